"""scan_changes: the net change of every key of a table in (from_ts, to_ts]."""

from __future__ import annotations

import struct

from kvstore.actions.get import get
from kvstore.actions.scan import first_blocking_lock
from kvstore.mvcc.keys import parse_changes_key, table_prefix
from kvstore.results import ChangeRecord
from kvstore.storage import Reader


def scan_changes(reader: Reader, table_id: int, from_ts: int, to_ts: int) -> list[ChangeRecord]:
    """Net changes of table ``table_id`` in (from_ts, to_ts], in key order.

    Invariant: applying the result to the table as of from_ts gives the table as of to_ts, and
    nothing else: a key whose value at both ends is the same (inserted then deleted, or updated
    back) yields nothing. Like ``scan``, it never reads through a lock with start_ts <= to_ts
    (raises KeyIsLocked), so the images are final."""
    prefix = table_prefix(table_id)
    blocking = first_blocking_lock(reader, prefix, table_prefix(table_id + 1), to_ts)
    if blocking is not None:
        raise blocking
    newest: dict[bytes, int] = {}
    lo = prefix + struct.pack(">Q", from_ts + 1)
    hi = (
        prefix + struct.pack(">Q", to_ts + 1) if to_ts + 1 < 1 << 64 else table_prefix(table_id + 1)
    )
    for k, _ in reader.iter_range("changes", lo, hi):
        commit_ts, uk = parse_changes_key(k)
        newest[uk] = commit_ts
    out = []
    for uk in sorted(newest):
        old = get(reader, uk, from_ts)
        new = get(reader, uk, to_ts)
        if old != new:
            out.append(ChangeRecord(uk, old, new, newest[uk]))
    return out
