"""Timestamps a person can read: the one place snapview turns its hybrid timestamps into wall
times and back.

A snapview timestamp (a TSO timestamp, a barrier, a ``commit_ts``) is ``physical_ms << 18 |
logical`` (``kvstore.mvcc.timestamp``), so its wall time is its physical part.

Decisions:

- **Shown in local time**, with the zone's offset, to the millisecond:
  ``2026-11-23 18:00:00.123+01:00``. A person reads the clock on their wall,
  and the text pastes back into ``--at`` as it is.
- **Parsed** from a plain integer (taken as a timestamp, as before) or an ISO 8601 date and time,
  ``2026-11-23 18:00:00`` or ``2026-11-23T18:00:00.5+01:00`` (``Z`` for UTC). Without a zone it is
  local time, like the times printed.
- **A wall time reads everything committed up to and including that instant**: it becomes the
  greatest timestamp of its millisecond, ``ms << 18 | LOGICAL_MASK``.
"""

from __future__ import annotations

import datetime as dt

from kvstore.errors import InvalidArgument
from kvstore.mvcc.timestamp import LOGICAL_MASK, compose, physical_ms

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def ts_to_datetime(ts: int) -> dt.datetime:
    """The local wall time of a timestamp (timezone-aware)."""
    return dt.datetime.fromtimestamp(physical_ms(ts) / 1000, tz=dt.UTC).astimezone()


def format_ts(ts: int) -> str:
    """``2026-11-23 18:00:00.123+01:00``: the timestamp's wall time, local, to the ms; ``-`` for
    0 (no timestamp)."""
    if ts <= 0:
        return "-"
    d = ts_to_datetime(ts)
    return d.strftime("%Y-%m-%d %H:%M:%S.") + f"{d.microsecond // 1000:03d}" + _offset(d)


def _offset(d: dt.datetime) -> str:
    off = d.utcoffset() or dt.timedelta(0)
    sign = "-" if off < dt.timedelta(0) else "+"
    minutes = abs(int(off.total_seconds())) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def with_wall(ts: int) -> str:
    """``TS (wall time)``, as the CLI prints barriers and read timestamps."""
    return f"{ts} ({format_ts(ts)})" if ts > 0 else str(ts)


def parse_ts(text: str | int) -> int:
    """A timestamp from an integer or an ISO 8601 date and time (local when it names no zone).
    Raises InvalidArgument naming the text."""
    if isinstance(text, int):
        return text
    s = str(text).strip()
    if s.isdigit():
        return int(s)
    try:
        d = dt.datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    except ValueError:
        raise InvalidArgument(
            f"not a timestamp: {text!r} (give a snapview timestamp, or a date and time such as "
            "'2026-11-23 18:00:00' (local) or '2026-11-23T18:00:00+01:00')"
        ) from None
    if d.tzinfo is None:
        d = d.astimezone()  # a naive time is local time
    ms = (d - _EPOCH) // dt.timedelta(milliseconds=1)
    if ms <= 0:
        raise InvalidArgument(f"timestamp {text!r} is before 1970")
    return compose(ms, LOGICAL_MASK)
