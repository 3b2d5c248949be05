"""EventBridge Scheduler's schedule expressions, evaluated in an IANA time zone.

- ``cron(minutes hours day-of-month month day-of-week year)``: six fields; ``, - * /`` everywhere,
  ``?`` in one of the two day fields (exactly one of them), ``L``, ``LW`` and ``nW`` in day-of-month,
  ``L`` (Saturday), ``nL`` (the last weekday n of the month) and ``n#k`` in day-of-week; months
  ``1-12``/``JAN-DEC``, weekdays ``1-7``/``SUN-SAT`` (1 is Sunday), years ``1970-2199``.
- ``rate(N minute|minutes|hour|hours|day|days)``: singular for 1, plural above; a fixed duration in
  absolute time (a day is 24 hours, across DST changes too), counted from the schedule's start.
- ``at(yyyy-mm-ddThh:mm:ss)``: once, at that wall-clock time in the time zone.

Daylight saving time, as Scheduler documents it: a wall-clock time the spring change skips does not
fire; a wall-clock time the autumn change repeats fires once, at its first occurrence.

What this module does not take it refuses with a message saying what to write instead: ranges that run
backwards (``FRI-MON``), ``L`` or ``W`` inside a list, ``L-n`` offsets. Every refusal is an
:class:`ExpressionError`.

Example:
    >>> import datetime as dt
    >>> e = parse("cron(0 9 ? * MON-FRI *)", "Europe/Paris")
    >>> e.next_after(dt.datetime(2026, 3, 27, 12, 0, tzinfo=dt.timezone.utc))
    datetime.datetime(2026, 3, 30, 7, 0, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

UTC = dt.timezone.utc
MONTHS = {name: i for i, name in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT",
                                            "NOV", "DEC"), start=1)}
WEEKDAYS = {name: i for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"), start=1)}
FIELDS = ("minutes", "hours", "day-of-month", "month", "day-of-week", "year")
_BOUNDS = {"minutes": (0, 59), "hours": (0, 23), "day-of-month": (1, 31), "month": (1, 12), "day-of-week": (1, 7),
           "year": (1970, 2199)}
_NAMES = {"month": MONTHS, "day-of-week": WEEKDAYS}
MAX_RATE_S = 36_500 * 86_400
"""The longest rate period taken (100 years): a firing's record is dated from the next firing after it, which
for periods of millennia lies past the last date Python can hold."""
_RATE = re.compile(r"\Arate\((\d+) (minute|minutes|hour|hours|day|days)\)\Z", re.ASCII)
_AT = re.compile(r"\Aat\((\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\)\Z", re.ASCII)
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}


class ExpressionError(ValueError):
    """A schedule expression or time zone Loom cannot evaluate; the message says what to write instead."""


NOT_ZONES = frozenset({"localtime", "posixrules"})
"""Files a time zone directory holds beside the zones, which ZoneInfo opens though they name no IANA zone:
``localtime`` is this machine's own zone, whatever that is; ``posixrules`` a copy of New York's."""


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``UTC``, ``Europe/Paris``), or ExpressionError."""
    try:
        if name in NOT_ZONES:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise ExpressionError(f"time zone {name!r} is not an IANA time zone name: write one such as UTC, "
                              "Europe/Paris or America/New_York (the list EventBridge Scheduler takes)") from None


def _wall_to_utc(local: dt.datetime, tz: ZoneInfo) -> dt.datetime | None:
    """The instant a wall-clock time names: None when the clocks skip it (spring), the first occurrence when
    they repeat it (autumn): what Scheduler does with such times."""
    first = local.replace(tzinfo=tz, fold=0)
    instant = first.astimezone(UTC)
    if instant.astimezone(tz).replace(tzinfo=None) != local:
        return None
    return instant


# -- cron ---------------------------------------------------------------------------------------------------
def _digits(text: str) -> bool:
    """ASCII digits only, as EventBridge reads a field (``str.isdigit`` takes ``²`` and ``٣``, which ``int``
    refuses or reads as 3)."""
    return text.isascii() and text.isdigit()


def _number(text: str, field: str, expr: str) -> int:
    names = _NAMES.get(field, {})
    if text.upper() in names:
        return names[text.upper()]
    if not _digits(text):
        hint = f" or a name ({'-'.join((next(iter(names)), list(names)[-1]))})" if names else ""
        raise ExpressionError(f"{expr}: {text!r} in the {field} field is not a number{hint}")
    value = int(text)
    low, high = _BOUNDS[field]
    if not low <= value <= high:
        raise ExpressionError(f"{expr}: {value} is outside the {field} field's range {low}-{high}")
    return value


def _values(text: str, field: str, expr: str) -> frozenset[int]:
    """A plain field (no ``L``, ``W``, ``#``): its values as a set."""
    low, high = _BOUNDS[field]
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise ExpressionError(f"{expr}: the {field} field {text!r} has an empty list item")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not _digits(step_text) or int(step_text) < 1:
                raise ExpressionError(f"{expr}: the increment in {part!r} ({field}) must be a whole number of at least 1")
            step = int(step_text)
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _number(a, field, expr), _number(b, field, expr)
            if first > last:
                names = _NAMES.get(field, {})
                by_number = {v: k for k, v in names.items()}
                named = a.upper() in names or b.upper() in names  # said with names: the fix too
                end, start = (by_number.get(high, high), by_number.get(low, low)) if named else (high, low)
                raise ExpressionError(f"{expr}: the range {base!r} in the {field} field runs backwards; Loom takes "
                                      f"ascending ranges only: write {a}-{end},{start}-{b} for one that wraps")
        else:
            first = _number(base, field, expr)
            last = high if slash else first
        out.update(range(first, last + 1, step))
    return frozenset(out)


@dataclass(frozen=True)
class _Days:
    """How a day-of-month or day-of-week field picks days: a set of values, or one special form."""

    values: frozenset[int] | None = None
    last: bool = False
    """``L``: the month's last day (day-of-month), or every Saturday (day-of-week, the week's last day)."""
    weekday_near: int | None = None
    """``nW``: the weekday (Mon-Fri) nearest day n, within the month; ``LW`` is the last weekday."""
    last_weekday_of: int | None = None
    """``nL`` (day-of-week): the last weekday n (1 Sunday ... 7 Saturday) of the month."""
    nth: tuple[int, int] | None = None
    """``n#k`` (day-of-week): the k-th weekday n of the month."""


def _day_of_month(text: str, expr: str) -> _Days:
    upper = text.upper()
    if upper == "L":
        return _Days(last=True)
    if upper == "LW":
        return _Days(last=True, weekday_near=0)
    if re.fullmatch(r"\d+W", upper, re.ASCII):
        return _Days(weekday_near=_number(upper[:-1], "day-of-month", expr))
    if "L" in upper or "W" in upper:
        raise ExpressionError(f"{expr}: day-of-month {text!r} is not supported: use L (last day), LW (last weekday) "
                              "or nW (the weekday nearest day n) alone in the field; L-n offsets are not taken")
    return _Days(values=_values(text, "day-of-month", expr))


def _day_of_week(text: str, expr: str) -> _Days:
    upper = text.upper()
    if upper == "L":
        return _Days(values=frozenset({7}))
    if m := re.fullmatch(r"(\w+)#(\d+)", upper, re.ASCII):
        k = int(m[2])
        if not 1 <= k <= 5:
            raise ExpressionError(f"{expr}: in {text!r} the week of the month must be 1-5")
        return _Days(nth=(_number(m[1], "day-of-week", expr), k))
    if m := re.fullmatch(r"(\w+?)L", upper, re.ASCII):
        return _Days(last_weekday_of=_number(m[1], "day-of-week", expr))
    if "L" in upper or "#" in upper:
        raise ExpressionError(f"{expr}: day-of-week {text!r} is not supported: use L (Saturday), nL (the last "
                              "weekday n of the month) or n#k (the k-th weekday n) alone in the field")
    return _Days(values=_values(text, "day-of-week", expr))


def _aws_weekday(day: dt.date) -> int:
    """1 Sunday ... 7 Saturday (Python's weekday() is 0 Monday ... 6 Sunday)."""
    return (day.weekday() + 1) % 7 + 1


def _nearest_weekday(year: int, month: int, day: int) -> int | None:
    last = calendar.monthrange(year, month)[1]
    if day > last:
        return None  # like 31 in a 30-day month: no firing that month
    wd = dt.date(year, month, day).weekday()  # 5 Saturday, 6 Sunday
    if wd == 5:
        return day - 1 if day > 1 else day + 2
    if wd == 6:
        return day + 1 if day < last else day - 2
    return day


@dataclass(frozen=True)
class Cron:
    expression: str
    tz: ZoneInfo
    minutes: frozenset[int]
    hours: frozenset[int]
    dom: _Days | None
    months: frozenset[int]
    dow: _Days | None
    years: frozenset[int]

    kind = "cron"

    def _days(self, year: int, month: int) -> list[int]:
        last = calendar.monthrange(year, month)[1]
        if self.dom is not None:
            d = self.dom
            if d.weekday_near is not None:
                near = _nearest_weekday(year, month, last if d.last else d.weekday_near)
                return [] if near is None else [near]
            if d.last:
                return [last]
            return sorted(x for x in d.values or () if x <= last)
        assert self.dow is not None
        w = self.dow
        days = range(1, last + 1)
        if w.nth is not None:
            weekday, k = w.nth
            matching = [x for x in days if _aws_weekday(dt.date(year, month, x)) == weekday]
            return [matching[k - 1]] if len(matching) >= k else []
        if w.last_weekday_of is not None:
            return [max(x for x in days if _aws_weekday(dt.date(year, month, x)) == w.last_weekday_of)]
        return [x for x in days if _aws_weekday(dt.date(year, month, x)) in (w.values or ())]

    def next_after(self, after: dt.datetime, anchor: dt.datetime | None = None) -> dt.datetime | None:
        """The first firing strictly after ``after`` (aware), in UTC; None when there is none (past its years)."""
        start_local = after.astimezone(self.tz).replace(tzinfo=None)
        for year in sorted(y for y in self.years if y >= start_local.year):
            for month in sorted(self.months):
                if (year, month) < (start_local.year, start_local.month):
                    continue
                for day in self._days(year, month):
                    if dt.date(year, month, day) < start_local.date():
                        continue
                    for hour in sorted(self.hours):
                        for minute in sorted(self.minutes):
                            instant = _wall_to_utc(dt.datetime(year, month, day, hour, minute), self.tz)
                            if instant is not None and instant > after:
                                return instant
        return None


def _cron(expr: str, body: str, tz: ZoneInfo) -> Cron:
    fields = body.split()
    if len(fields) != 6:
        raise ExpressionError(f"{expr}: a cron expression has six fields ({' '.join(FIELDS)}), this one has "
                              f"{len(fields)}; e.g. cron(0 9 ? * MON-FRI *) for 09:00 on weekdays")
    minute, hour, dom, month, dow, year = fields
    if (dom == "?") == (dow == "?"):
        raise ExpressionError(f"{expr}: exactly one of day-of-month ({dom}) and day-of-week ({dow}) must be ?, as "
                              "EventBridge requires; e.g. cron(0 9 1 * ? *) (the 1st) or cron(0 9 ? * MON *) (Mondays)")
    return Cron(expression=expr, tz=tz, minutes=_values(minute, "minutes", expr), hours=_values(hour, "hours", expr),
                dom=None if dom == "?" else _day_of_month(dom, expr), months=_values(month, "month", expr),
                dow=None if dow == "?" else _day_of_week(dow, expr), years=_values(year, "year", expr))


# -- rate and at --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rate:
    expression: str
    tz: ZoneInfo
    period: dt.timedelta

    kind = "rate"

    def next_after(self, after: dt.datetime, anchor: dt.datetime | None = None) -> dt.datetime | None:
        """``anchor`` + k x period, the first after ``after``; None without an anchor (a rate schedule counts
        from when it started, which only a firing tells)."""
        if anchor is None:
            return None
        if anchor > after:
            return anchor
        periods = (after - anchor) // self.period + 1
        return anchor + periods * self.period


@dataclass(frozen=True)
class At:
    expression: str
    tz: ZoneInfo
    when: dt.datetime
    """The instant, in UTC."""

    kind = "at"

    def next_after(self, after: dt.datetime, anchor: dt.datetime | None = None) -> dt.datetime | None:
        return self.when if self.when > after else None


Expression = Cron | Rate | At


def parse(expression: str, timezone: str = "UTC") -> Expression:
    """The expression, checked whole; ExpressionError saying what is wrong and what to write otherwise."""
    tz = zone(timezone)
    text = expression.strip() if isinstance(expression, str) else ""
    if text.startswith("cron(") and text.endswith(")"):
        return _cron(expression, text[5:-1], tz)
    if text.startswith("rate("):
        m = _RATE.match(text)
        if not m:
            raise ExpressionError(f"{expression}: a rate is rate(N unit) with a whole N and a unit of minute(s), "
                                  "hour(s) or day(s), e.g. rate(1 hour) or rate(15 minutes)")
        value, unit = int(m[1]), m[2]
        if value < 1 or (value == 1) != (not unit.endswith("s")):
            raise ExpressionError(f"{expression}: write rate(1 {unit.rstrip('s')}) for one, rate(N {unit.rstrip('s')}s) "
                                  "for N > 1 (N at least 1)")
        seconds = value * _UNIT_S[unit.rstrip("s")]
        if seconds > MAX_RATE_S:
            raise ExpressionError(f"{expression}: a rate's period is at most {MAX_RATE_S // 86400:,} days (100 years; "
                                  "its firings are dated past what a clock can hold beyond that); for a rarer one "
                                  "use cron(...) with a year, or at(...)")
        return Rate(expression, tz, dt.timedelta(seconds=seconds))
    if text.startswith("at("):
        m = _AT.match(text)
        if not m:
            raise ExpressionError(f"{expression}: a one-time schedule is at(yyyy-mm-ddThh:mm:ss), e.g. "
                                  "at(2026-12-31T23:00:00), in the schedule's time zone")
        try:
            local = dt.datetime(*(int(g) for g in m.groups()))
        except ValueError as exc:
            raise ExpressionError(f"{expression}: not a date and time ({exc})") from None
        when = _wall_to_utc(local, tz)
        if when is None:
            raise ExpressionError(f"{expression}: {local.isoformat()} does not exist in {timezone} (the clocks skip it "
                                  "for daylight saving time); pick a time outside the change")
        return At(expression, tz, when)
    raise ExpressionError(f"{expression!r} is not a schedule expression: write cron(...), rate(...) or at(...), e.g. "
                          "cron(0 9 ? * MON-FRI *), rate(1 hour) or at(2026-12-31T23:00:00)")


__all__ = ["At", "Cron", "Expression", "ExpressionError", "Rate", "parse", "zone"]
