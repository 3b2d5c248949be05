"""The queue's backlog mark: one item every store reads and moves forward only (the ``store`` fixture)."""

from __future__ import annotations

import datetime as dt

from engine_core.backlog import BacklogMark

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def mark(visible_s: float, observed_s: float) -> BacklogMark:
    return BacklogMark(visible_at=T0 + dt.timedelta(seconds=visible_s), observed_at=T0 + dt.timedelta(seconds=observed_s))


def test_get_backlog_mark_when_none_was_written_returns_none(store):
    assert store.get_backlog_mark() is None


def test_put_backlog_mark_then_get_returns_it_to_the_millisecond(store):
    written = BacklogMark(visible_at=T0 + dt.timedelta(milliseconds=1234), observed_at=T0 + dt.timedelta(seconds=200))

    assert store.put_backlog_mark(written) is True

    assert store.get_backlog_mark() == written


def test_put_backlog_mark_of_a_later_visible_time_replaces_and_an_earlier_one_is_refused(store):
    # given: a worker reached messages visible at 100 s
    assert store.put_backlog_mark(mark(100, 400))

    # when: another reached further, then a slower one reports an older point later
    further = store.put_backlog_mark(mark(150, 420))
    older = store.put_backlog_mark(mark(120, 500))
    same = store.put_backlog_mark(mark(150, 600))

    # then: the mark only moves forward; a refused write changes nothing
    assert (further, older, same) == (True, False, False)
    assert store.get_backlog_mark() == mark(150, 420)


def test_the_backlog_mark_is_not_an_execution_nor_due(store):
    store.put_backlog_mark(mark(100, 400))

    far = T0 + dt.timedelta(days=3650)
    assert not store.query_due(0, far, 10).items
