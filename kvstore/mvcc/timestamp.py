"""The timestamp format shared by the TSO and the store (a PD-style hybrid timestamp).

ts = physical milliseconds since the Unix epoch << 18 | logical counter. The store needs only
``physical_ms``: a lock's TTL counts from the physical time of its start_ts.
"""

LOGICAL_BITS = 18
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


def compose(physical_ms: int, logical: int) -> int:
    return physical_ms << LOGICAL_BITS | logical


def physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS


def lock_expired(start_ts: int, ttl_ms: int, now_ms: int) -> bool:
    """A lock is expired once its TTL, counted from its start_ts, has run out at now_ms."""
    return physical_ms(start_ts) + ttl_ms <= now_ms


def wall_text(ts: int) -> str:
    """The wall time of ``ts`` (its physical part) as UTC text, for error messages:
    ``2026-11-24 08:50:00.123 UTC``. (The CLI prints local times: coordinator.times.)"""
    import datetime as dt

    d = dt.datetime.fromtimestamp(physical_ms(ts) / 1000, tz=dt.UTC)
    return d.strftime("%Y-%m-%d %H:%M:%S.") + f"{d.microsecond // 1000:03d} UTC"
