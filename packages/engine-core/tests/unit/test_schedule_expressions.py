"""EventBridge Scheduler's cron, rate and at expressions: next firings (DST, L, W, #, years) and refusals."""

from __future__ import annotations

import datetime as dt

import pytest

from engine_core.schedules.expressions import ExpressionError, parse

UTC = dt.timezone.utc


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def firings(expression: str, tz: str, after: dt.datetime, n: int, anchor: dt.datetime | None = None) -> list[str]:
    """The next ``n`` firings as wall-clock times in ``tz`` (ISO, with the offset)."""
    e, out, t = parse(expression, tz), [], after
    for _ in range(n):
        t = e.next_after(t, anchor)
        if t is None:
            break
        out.append(t.astimezone(e.tz).isoformat())
    return out


def test_cron_weekdays_at_nine_in_paris_skips_the_weekend_and_follows_the_dst_change():
    # when: Friday 27 March 2026; Europe's clocks move forward on Sunday 29 March
    got = firings("cron(0 9 ? * MON-FRI *)", "Europe/Paris", utc(2026, 3, 27, 12), 2)

    # then
    assert got == ["2026-03-30T09:00:00+02:00", "2026-03-31T09:00:00+02:00"]


def test_cron_at_a_time_the_spring_change_skips_does_not_fire_that_day():
    # when: 02:30 does not exist in New York on 8 March 2026
    got = firings("cron(30 2 * * ? *)", "America/New_York", utc(2026, 3, 7, 12), 2)

    # then
    assert got == ["2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"]


def test_cron_at_a_time_the_autumn_change_repeats_fires_once_at_its_first_occurrence():
    # when: 01:00-01:59 happens twice in New York on 1 November 2026
    got = firings("cron(0/30 1 * * ? *)", "America/New_York", utc(2026, 10, 31, 12), 4)

    # then: 01:00 and 01:30 EDT only, nothing in the repeated hour (EST)
    assert got == ["2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00",
                   "2026-11-02T01:00:00-05:00", "2026-11-02T01:30:00-05:00"]


def test_cron_every_fifteen_minutes_through_the_repeated_hour_fires_each_wall_time_once():
    # when
    got = firings("cron(0/15 * * * ? *)", "America/New_York", utc(2026, 11, 1, 5, 30), 4)

    # then: 01:45 EDT, then 02:00 EST an hour and a quarter later (01:00-01:45 EST are not repeated)
    assert got == ["2026-11-01T01:45:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-01T02:15:00-05:00",
                   "2026-11-01T02:30:00-05:00"]


def test_cron_last_day_of_month_handles_february_of_a_leap_year():
    assert firings("cron(0 0 L * ? *)", "UTC", utc(2028, 1, 31, 12), 3) == [
        "2028-02-29T00:00:00+00:00", "2028-03-31T00:00:00+00:00", "2028-04-30T00:00:00+00:00"]


def test_cron_nearest_weekday_stays_inside_the_month():
    # given: 1 Aug 2026 is a Saturday (nearest weekday inside August: Monday 3rd); 15 Aug is a Saturday (14th)
    assert firings("cron(0 12 1W * ? *)", "UTC", utc(2026, 7, 31), 1) == ["2026-08-03T12:00:00+00:00"]
    assert firings("cron(0 12 15W 8 ? 2026)", "UTC", utc(2026, 1, 1), 1) == ["2026-08-14T12:00:00+00:00"]
    # 31 May 2026 is a Sunday, the month's last day: the Friday before
    assert firings("cron(0 12 31W 5 ? 2026)", "UTC", utc(2026, 1, 1), 1) == ["2026-05-29T12:00:00+00:00"]


def test_cron_last_weekday_of_the_month():
    # 31 Oct 2026 is a Saturday: the last weekday is Friday 30th
    assert firings("cron(0 18 LW 10 ? 2026)", "UTC", utc(2026, 1, 1), 1) == ["2026-10-30T18:00:00+00:00"]


def test_cron_nth_weekday_and_last_weekday_of_the_month():
    # second Tuesday (3#2) and last Friday (6L) of March 2026
    assert firings("cron(0 10 ? 3 3#2 2026)", "UTC", utc(2026, 1, 1), 1) == ["2026-03-10T10:00:00+00:00"]
    assert firings("cron(0 10 ? 3 6L 2026)", "UTC", utc(2026, 1, 1), 1) == ["2026-03-27T10:00:00+00:00"]
    assert firings("cron(0 10 ? 3 FRIL 2026)", "UTC", utc(2026, 1, 1), 1) == ["2026-03-27T10:00:00+00:00"]


def test_cron_fifth_weekday_fires_only_in_months_that_have_one():
    # Mondays in 2026: five in March, June, August, November
    got = firings("cron(0 8 ? * MON#5 2026)", "UTC", utc(2026, 1, 1), 5)
    assert [g[:10] for g in got] == ["2026-03-30", "2026-06-29", "2026-08-31", "2026-11-30"]


def test_cron_day_of_week_l_alone_is_saturday():
    assert firings("cron(0 8 ? * L *)", "UTC", utc(2026, 3, 1), 2) == [
        "2026-03-07T08:00:00+00:00", "2026-03-14T08:00:00+00:00"]


def test_cron_year_field_ends_the_schedule():
    # when
    got = firings("cron(0 0 1 1 ? 2027-2028)", "UTC", utc(2026, 6, 1), 5)

    # then
    assert got == ["2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"]


def test_cron_lists_ranges_steps_and_month_names():
    assert firings("cron(5,35 8-10/2 ? JAN,JUL SUN 2026)", "UTC", utc(2026, 1, 1), 5) == [
        "2026-01-04T08:05:00+00:00", "2026-01-04T08:35:00+00:00", "2026-01-04T10:05:00+00:00",
        "2026-01-04T10:35:00+00:00", "2026-01-11T08:05:00+00:00"]


def test_cron_day_31_skips_shorter_months():
    assert [g[:10] for g in firings("cron(0 0 31 * ? *)", "UTC", utc(2026, 4, 1), 3)] == [
        "2026-05-31", "2026-07-31", "2026-08-31"]


def test_next_after_is_strictly_after_the_given_time():
    e = parse("cron(0 9 * * ? *)")
    assert e.next_after(utc(2026, 5, 1, 9)) == utc(2026, 5, 2, 9)
    assert e.next_after(utc(2026, 5, 1, 8, 59, 59)) == utc(2026, 5, 1, 9)


def test_rate_counts_fixed_durations_from_its_anchor_across_dst():
    # given: a daily rate anchored at 09:00 New York time the day before the spring change
    anchor = dt.datetime(2026, 3, 7, 14, 0, tzinfo=UTC)  # 09:00 EST

    # when
    got = firings("rate(1 day)", "America/New_York", anchor, 2, anchor=anchor)

    # then: 24 hours apart, so 10:00 on the wall clock after the change
    assert got == ["2026-03-08T10:00:00-04:00", "2026-03-09T10:00:00-04:00"]


def test_rate_of_a_hundred_years_is_taken_and_its_next_firing_is_dated():
    rate = parse("rate(36500 days)")
    assert rate.next_after(utc(2026, 1, 1, 0, 1), anchor=utc(2026, 1, 1)) == utc(2026, 1, 1) + dt.timedelta(days=36500)


def test_rate_without_an_anchor_has_no_known_next_firing():
    assert parse("rate(5 minutes)").next_after(utc(2026, 1, 1)) is None
    assert parse("rate(5 minutes)").next_after(utc(2026, 1, 1, 0, 12), anchor=utc(2026, 1, 1)) == utc(2026, 1, 1, 0, 15)


def test_at_fires_once_at_its_wall_clock_time():
    e = parse("at(2026-12-31T23:00:00)", "Asia/Tokyo")
    assert e.next_after(utc(2026, 1, 1)) == utc(2026, 12, 31, 14)
    assert e.next_after(utc(2026, 12, 31, 14)) is None


@pytest.mark.parametrize(("expression", "tz", "says"), [
    ("cron(0 9 * * *)", "UTC", "a cron expression has six fields"),
    ("cron(0 9 * * * *)", "UTC", "exactly one of day-of-month (*) and day-of-week (*) must be ?"),
    ("cron(0 9 ? * ? *)", "UTC", "exactly one of day-of-month (?) and day-of-week (?) must be ?"),
    ("cron(60 9 * * ? *)", "UTC", "60 is outside the minutes field's range 0-59"),
    ("cron(0 24 * * ? *)", "UTC", "24 is outside the hours field's range 0-23"),
    ("cron(0 9 * 13 ? *)", "UTC", "13 is outside the month field's range 1-12"),
    ("cron(0 9 ? * 8 *)", "UTC", "8 is outside the day-of-week field's range 1-7"),
    ("cron(0 9 * * ? 2200)", "UTC", "2200 is outside the year field's range 1970-2199"),
    ("cron(0 9 ? * FRI-MON *)", "UTC", "the range 'FRI-MON' in the day-of-week field runs backwards; Loom takes "
                                     "ascending ranges only: write FRI-SAT,SUN-MON"),
    ("cron(0 22-2 * * ? *)", "UTC", "write 22-23,0-2 for one that wraps"),
    ("cron(0 9 L-3 * ? *)", "UTC", "L-n offsets are not taken"),
    ("cron(0 9 1,L * ? *)", "UTC", "alone in the field"),
    ("cron(0 9 ? * 2#6 *)", "UTC", "the week of the month must be 1-5"),
    ("cron(0 9 ? * MON#1,FRI *)", "UTC", "alone in the field"),
    ("cron(*/0 9 * * ? *)", "UTC", "must be a whole number of at least 1"),
    ("cron(0 9 * * ? FOO)", "UTC", "'FOO' in the year field is not a number"),
    ("rate(1 minutes)", "UTC", "write rate(1 minute) for one"),
    ("rate(5 minute)", "UTC", "rate(N minutes) for N > 1"),
    ("rate(0 hours)", "UTC", "N at least 1"),
    ("rate(2 weeks)", "UTC", "a unit of minute(s), hour(s) or day(s)"),
    # a period of millennia: its firing's record would be dated past what a clock can hold (every firing
    # failed with OverflowError, the schedule starting nothing); the longest taken is 100 years
    ("rate(3000000 days)", "UTC", "a rate's period is at most 36,500 days (100 years"),
    ("rate(52560001 minutes)", "UTC", "a rate's period is at most 36,500 days"),
    ("at(2026-02-30T10:00:00)", "UTC", "not a date and time"),
    ("at(2026-03-08T02:30:00)", "America/New_York", "does not exist in America/New_York"),
    ("at(2026-03-08 02:30)", "UTC", "at(yyyy-mm-ddThh:mm:ss)"),
    ("every day", "UTC", "is not a schedule expression: write cron(...), rate(...) or at(...)"),
    ("cron(0 9 * * ? *)", "Mars/Olympus", "time zone 'Mars/Olympus' is not an IANA time zone name"),
    ("cron(0 9 * * ? *)", "/etc/localtime", "is not an IANA time zone name"),
    # files of the zone directory ZoneInfo opens: this machine's own zone, a copy of New York's
    ("cron(0 9 * * ? *)", "localtime", "time zone 'localtime' is not an IANA time zone name"),
    ("cron(0 9 * * ? *)", "posixrules", "time zone 'posixrules' is not an IANA time zone name"),
    # digits EventBridge does not read: str.isdigit takes them, int() refuses one and reads the other as 3
    ("cron(0 \u00b2 ? * SUN *)", "UTC", "'\u00b2' in the hours field is not a number"),
    ("cron(0/\u00b2 9 * * ? *)", "UTC", "must be a whole number of at least 1"),
    ("cron(0 9 ? * \u00b2#1 *)", "UTC", "or n#k (the k-th weekday n) alone in the field"),
    ("cron(0 9 ? * \u00b2L *)", "UTC", "nL (the last weekday n of the month)"),
    ("cron(0 \u0663 * * ? *)", "UTC", "'\u0663' in the hours field is not a number"),
    ("rate(\u0663 minutes)", "UTC", "with a whole N and a unit"),
    ("at(\u0662\u0660\u0662\u0666-03-08T02:30:00)", "UTC", "at(yyyy-mm-ddThh:mm:ss)"),
])
def test_parse_when_unsupported_or_invalid_raises_saying_what_to_write(expression, tz, says):
    # when
    with pytest.raises(ExpressionError) as raised:
        parse(expression, tz)

    # then
    assert says in str(raised.value)
