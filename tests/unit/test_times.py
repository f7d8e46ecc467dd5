"""coordinator.times: wall times beside timestamps, and timestamps from wall times."""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest

from coordinator.times import format_ts, parse_ts, ts_to_datetime, with_wall
from kvstore.errors import InvalidArgument
from kvstore.mvcc.timestamp import LOGICAL_MASK, compose, physical_ms

# 2026-11-23 18:00:00 UTC
MS = int(dt.datetime(2026, 11, 23, 18, 0, tzinfo=dt.UTC).timestamp() * 1000)


@pytest.fixture
def utc_plus_one(monkeypatch):
    """Local time is UTC+1 for the test (naive times are local)."""
    monkeypatch.setenv("TZ", "Europe/Paris")  # UTC+1 in November
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_integer_is_a_timestamp():
    assert parse_ts("470673453034766336") == 470673453034766336
    assert parse_ts(42) == 42


def test_iso_with_zone_reads_up_to_the_end_of_its_millisecond():
    ts = parse_ts("2026-11-23T18:00:00Z")
    assert ts == compose(MS, LOGICAL_MASK)
    assert parse_ts("2026-11-23T19:00:00+01:00") == ts
    assert parse_ts("2026-11-23 18:00:00.250+00:00") == compose(MS + 250, LOGICAL_MASK)
    # every commit within that millisecond is included, none of the next one
    assert compose(MS, 12345) <= ts < compose(MS + 1, 0)


def test_naive_time_is_local(utc_plus_one):
    assert physical_ms(parse_ts("2026-11-23 19:00:00")) == MS
    assert physical_ms(parse_ts("2026-11-23T19:00")) == MS


def test_format_is_local_with_offset(utc_plus_one):
    ts = compose(MS + 123, 7)
    assert format_ts(ts) == "2026-11-23 19:00:00.123+01:00"
    assert with_wall(ts) == f"{ts} (2026-11-23 19:00:00.123+01:00)"
    assert ts_to_datetime(ts) == dt.datetime(2026, 11, 23, 18, 0, 0, 123000, tzinfo=dt.UTC)
    assert format_ts(0) == "-"


def test_round_trip(utc_plus_one):
    ts = compose(MS + 5, 3)
    assert physical_ms(parse_ts(format_ts(ts))) == MS + 5


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01", "18:00", "1e9", ""])
def test_bad_times_name_the_text(bad):
    with pytest.raises(InvalidArgument, match="not a timestamp"):
        parse_ts(bad)


def test_source_option_at_takes_a_time():
    from spark_source.options import SourceOptions

    o = SourceOptions.parse({"table": "t", "at": "2026-11-23T18:00:00Z"})
    assert o.at == compose(MS, LOGICAL_MASK)
    assert SourceOptions.parse({"table": "t", "at": "12345"}).at == 12345
    with pytest.raises(InvalidArgument, match="option at: not a timestamp: 'noon'"):
        SourceOptions.parse({"table": "t", "at": "noon"})
    assert os.environ.get("TZ") != "Europe/Paris"
