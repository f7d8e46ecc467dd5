"""scan_changes: the net change of every key of a table in (from_ts, to_ts].

Read in two kinds of bounded steps, each of which fits in one short read transaction (the
store streams a change scan as chunks, see LocalStore.scan_changes_chunks):

* ``changed_keys``: one pass over the table's change index in (from_ts, to_ts], keeping only
  the smallest ``max_keys`` distinct keys above a resume key (a window). The index is in commit
  order, not key order, so a change larger than one window takes one pass per window; in
  exchange the memory a scan holds is bounded by the window, not by the change.
* ``change_records``: the old and new image of each key of a window's piece.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from kvstore.actions.get import get_changes
from kvstore.actions.scan import first_blocking_lock
from kvstore.mvcc.keys import table_prefix
from kvstore.results import ChangeRecord
from kvstore.storage import Reader

_CHANGES_KEY_HEAD = 12  # table id and commit_ts before the user key (mvcc.keys.changes_key)


def changed_keys(
    reader: Reader,
    table_id: int,
    from_ts: int,
    to_ts: int,
    after: bytes | None = None,
    max_keys: int = 0,
) -> tuple[list[bytes], bool]:
    """The distinct user keys of table ``table_id`` with a committed Put/Delete in
    (from_ts, to_ts], above ``after`` (all when None), in key order: the smallest ``max_keys``
    of them (all when 0), and whether more remain above the last one returned.

    Holds at most about 2 * ``max_keys`` keys while it reads. Like ``scan``, it never reads
    through a lock with start_ts <= to_ts in the table (raises KeyIsLocked)."""
    prefix = table_prefix(table_id)
    blocking = first_blocking_lock(reader, prefix, table_prefix(table_id + 1), to_ts)
    if blocking is not None:
        raise blocking
    lo = prefix + struct.pack(">Q", from_ts + 1)
    hi = (
        prefix + struct.pack(">Q", to_ts + 1) if to_ts + 1 < 1 << 64 else table_prefix(table_id + 1)
    )
    seen: set[bytes] = set()
    cutoff: bytes | None = None  # keys at or above it are past the window: not kept
    more = False
    for k in reader.keys_from("changes", lo):
        if k >= hi:
            break
        uk = k[_CHANGES_KEY_HEAD:]  # (parse_changes_key without the commit_ts)
        if after is not None and uk <= after:
            continue
        if cutoff is not None and uk >= cutoff:
            more = True
            continue
        seen.add(uk)
        if max_keys and len(seen) >= 2 * max_keys:
            kept = sorted(seen)
            cutoff = kept[max_keys]
            seen = set(kept[:max_keys])
            more = True
    keys = sorted(seen)
    if max_keys and len(keys) > max_keys:
        del keys[max_keys:]
        more = True
    return keys, more


def change_records(
    reader: Reader, keys: list[bytes], from_ts: int, to_ts: int
) -> list[ChangeRecord]:
    """The net change of each of ``keys`` (keys ``changed_keys`` returned for the same
    interval) in (from_ts, to_ts], in the order given; a key whose value is the same at both
    ends (inserted then deleted, or updated back) yields nothing. Raises KeyIsLocked for a key
    held by a lock with start_ts <= to_ts, as ``get`` does."""
    # The newest Put/Delete at or below to_ts is each key's newest change in the interval (the
    # change index holds exactly those commits): it gives the new image and commit_ts.
    return [
        ChangeRecord(uk, old, new, commit_ts)
        for uk, old, new, commit_ts in get_changes(reader, keys, from_ts, to_ts)  # locks checked
        if old != new
    ]


def count_changes(reader: Reader, keys: list[bytes], from_ts: int, to_ts: int) -> tuple[int, int]:
    """(restored, removed) over ``keys``, as ``change_records`` would give them: the records
    whose old image is a row, and those whose old image is absent. Holds no images."""
    restored = removed = 0
    for _, old, _ in _net_changes(reader, keys, from_ts, to_ts):
        if old is None:
            removed += 1
        else:
            restored += 1
    return restored, removed


def _net_changes(
    reader: Reader, keys: list[bytes], from_ts: int, to_ts: int
) -> Iterator[tuple[bytes, bytes | None, bytes | None]]:
    for uk, old, new, _ in get_changes(reader, keys, from_ts, to_ts):  # checks the locks
        if old != new:
            yield uk, old, new


def scan_changes(reader: Reader, table_id: int, from_ts: int, to_ts: int) -> list[ChangeRecord]:
    """Net changes of table ``table_id`` in (from_ts, to_ts], in key order, in one read.

    Invariant: applying the result to the table as of from_ts gives the table as of to_ts, and
    nothing else: a key whose value at both ends is the same (inserted then deleted, or updated
    back) yields nothing. Like ``scan``, it never reads through a lock with start_ts <= to_ts
    (raises KeyIsLocked), so the images are final. It holds the whole change: the store's
    streamed form (LocalStore.scan_changes_chunks) holds a bounded window instead."""
    keys, _ = changed_keys(reader, table_id, from_ts, to_ts)
    return change_records(reader, keys, from_ts, to_ts)
