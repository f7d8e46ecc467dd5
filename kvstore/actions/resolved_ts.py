"""resolved_ts: the timestamp below which a table's history is final.

It is asked for every root table of every snapshot and every barrier, so its cost must not grow
with the number of locks. An epoch that loads millions of rows holds millions of locks until
it resolves, and a scan of the table's locks (what this once was) then took minutes per call
and stalled every snapshot and barrier of the server behind it.

Instead it reads the lock indexes, which are ordered by start_ts (``kvstore.actions.prewrite``):
``txn_locks`` (start_ts + key, one entry per lock of a small prewrite) and ``txn_ranges``
(start_ts + first key -> last key, one entry per bulk prewrite). Every lock has an entry in one
of them for as long as it exists; an entry may outlive its locks (a reader resolved a key of a
ranged transaction alone), so each candidate is confirmed by reading the lock itself. The walk
goes up the start_ts order and stops at the first transaction with a live lock in the table:
its cost is a few seeks per transaction in flight (any table) and per bulk prewrite entry
below the answer, however many locks each holds.
"""

from __future__ import annotations

import struct

from kvstore.mvcc.keys import table_prefix
from kvstore.storage import Reader

_TS = struct.Struct(">Q")


def resolved_ts(reader: Reader, table_id: int, tso_now: int) -> int:
    """A ts such that no commit at or below it can still appear in table ``table_id``.

    ``tso_now`` must be taken from the TSO *before* ``reader`` was opened. Then a txn without a
    lock in the table yet will take its commit_ts after tso_now, and a txn with a lock commits
    above its start_ts, so the answer is min(tso_now, min start_ts of the table's locks - 1)."""
    oldest = oldest_lock(reader, table_id)
    return tso_now if oldest is None else min(tso_now, oldest[0] - 1)


def oldest_lock(reader: Reader, table_id: int) -> tuple[int, bytes] | None:
    """(the smallest start_ts of a lock in table ``table_id``, a key that transaction holds
    there), or None when the table holds no lock (read through the lock indexes: see the
    module's docstring)."""
    lo = table_prefix(table_id)
    hi = table_prefix(table_id + 1) if table_id < 0xFFFFFFFF else None
    best = _oldest_indexed(reader, lo, hi)
    above = None if best is None else _TS.pack(best[0])  # only older transactions can matter
    for k, last in reader.iter_range("txn_ranges", b"", above):
        first = max(k[8:], lo)
        end = last + b"\x00" if hi is None else min(last + b"\x00", hi)
        if first >= end:
            continue  # the bulk prewrite wrote other tables' keys
        ts_be = k[:8]
        for key, raw in reader.iter_range("lock", first, end):
            if raw[1:9] == ts_be:
                # entries come in start_ts order: nothing after this one is older
                return _TS.unpack(ts_be)[0], key
    return best


def _oldest_indexed(reader: Reader, lo: bytes, hi: bytes | None) -> tuple[int, bytes] | None:
    """(the smallest start_ts of a live lock in [lo, hi) indexed by a ``txn_locks`` entry, its
    key): one seek per transaction in flight (its entries are contiguous, in key order), then
    its entries in the table alone."""
    seek_from = b""
    while True:
        first = next(reader.iter_range("txn_locks", seek_from, None), None)
        if first is None:
            return None
        ts_be = first[0][:8]
        for k, _ in reader.iter_range("txn_locks", ts_be + lo, ts_be + hi if hi else None):
            if hi is None and k[:8] != ts_be:
                break
            raw = reader.get_lock_raw(k[8:])
            if raw is not None and raw[1:9] == ts_be:
                return _TS.unpack(ts_be)[0], k[8:]
        start_ts = _TS.unpack(ts_be)[0]
        if start_ts == 0xFFFFFFFFFFFFFFFF:
            return None
        seek_from = _TS.pack(start_ts + 1)
