"""Read planning for parallel readers: key-range splits and change-count boundaries.

These look at the index structure only (keys of the write and changes CFs), never at values, so
they are cheap, and they need no timestamp: a split is a hint for partitioning, and a reader at
any ts gets every key of a range exactly once whatever the boundaries are.
"""

from __future__ import annotations

import struct

from kvstore.mvcc.keys import parse_changes_key, table_prefix
from kvstore.storage import Reader


def split_range(
    reader: Reader, start: bytes, end: bytes, rows_per_split: int, max_splits: int
) -> tuple[list[bytes], int]:
    """Boundaries cutting [start, end) into ranges of about ``rows_per_split`` user keys (at most
    ``max_splits`` ranges), and the approximate key count (versions count as keys)."""
    count = sum(1 for _ in _keys(reader, start, end))
    step = max(rows_per_split, -(-count // max(max_splits, 1)), 1)
    boundaries: list[bytes] = []
    last_uk = b""
    for i, k in enumerate(_keys(reader, start, end)):
        uk = k[:-8]
        if i and i % step == 0 and uk != last_uk:
            boundaries.append(uk)
        last_uk = uk
    return boundaries, count


def _keys(reader: Reader, start: bytes, end: bytes):
    for k in reader.keys_from("write", start):
        if k >= end:
            return
        yield k


def change_boundary(
    reader: Reader, table_id: int, from_ts: int, to_ts: int, max_changes: int
) -> tuple[int, int]:
    """(ts, changes): the smallest ts <= to_ts at which (from_ts, ts] holds ``max_changes``
    change-index entries, extended to the end of that commit; to_ts if there are fewer."""
    prefix = table_prefix(table_id)
    lo = prefix + struct.pack(">Q", from_ts + 1)
    hi = (
        prefix + struct.pack(">Q", to_ts + 1) if to_ts + 1 < 1 << 64 else table_prefix(table_id + 1)
    )
    n = 0
    for k, _ in reader.iter_range("changes", lo, hi):
        n += 1
        if n >= max_changes:
            commit_ts = parse_changes_key(k)[0]
            rest = sum(
                1
                for _ in reader.iter_range(
                    "changes", k + b"\x00", prefix + struct.pack(">Q", commit_ts + 1)
                )
            )
            return commit_ts, n + rest
    return to_ts, n
