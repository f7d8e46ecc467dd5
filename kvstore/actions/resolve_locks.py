"""resolve_locks: finish a whole transaction whose fate is known, through its lock indexes.

A transaction's locks are indexed two ways (kvstore.actions.prewrite): ``txn_locks`` holds one
entry per lock (start_ts + key -> the Write record that commits it), and ``txn_ranges`` one entry
per bulk prewrite (start_ts + first key -> last key), standing for the locks of start_ts between
those keys. An entry may outlive its locks (a reader resolved a key alone): the locks are what
counts, and every entry of the transaction goes here.
"""

from __future__ import annotations

import struct

from kvstore.actions.commit import commit_key
from kvstore.actions.rollback import rollback_key
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import encode_ts
from kvstore.mvcc.records import CRC_BYTES, SEAL_XOR, Lock, LockOp, WriteKind, crc32, pack_crc
from kvstore.storage import Reader

LOCK_FLAG = LockOp.LOCK.value


def ranged_locks(
    reader: Reader, start_ts: int, max_locks: int = 0
) -> tuple[list, list[tuple[bytes, bytes]], bool]:
    """(the txn's txn_ranges entries taken, its locks (key, encoded lock) inside them, in key
    order, whether entries are left).

    Overlapping ranges (two partitions of one epoch with interleaved keys) are merged first, so
    each lock is found once; locks of other transactions inside a range are passed over. With
    ``max_locks`` > 0 it takes entries, in order, only until that many locks are found: the
    entries taken are the first ones, one unbroken run, and every lock they stand for is in
    the answer."""
    ts_be = struct.pack(">Q", start_ts)
    ranges = reader.items_between("txn_ranges", ts_be, struct.pack(">Q", start_ts + 1))
    merged: list[list[bytes]] = []
    taken = 0
    locks: list[tuple[bytes, bytes]] = []
    for k, last in ranges:
        first = k[8:]
        if merged and first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            if max_locks and merged:
                locks += _locks_between(reader, merged[-1], ts_be)
                merged.clear()
                if len(locks) >= max_locks:
                    break
            merged.append([first, last])
        taken += 1
    for span in merged:
        locks += _locks_between(reader, span, ts_be)
    return ranges[:taken], locks, taken < len(ranges)


def _locks_between(reader: Reader, span: list[bytes], ts_be: bytes) -> list[tuple[bytes, bytes]]:
    first, last = span
    items = reader.items_between("lock", first, last + b"\x00")  # last + 0: just after last
    return [(k, raw) for k, raw in items if raw[1:9] == ts_be]


def has_secondaries(reader: Reader, start_ts: int, primary: bytes) -> bool:
    """Whether txn ``start_ts`` still has an index entry for a lock besides ``primary``'s."""
    prefix = struct.pack(">Q", start_ts)
    end = struct.pack(">Q", start_ts + 1)
    if any(k[8:] != primary for k, _ in reader.iter_range("txn_locks", prefix, end)):
        return True
    return any(True for _ in reader.iter_range("txn_ranges", prefix, end))


def resolve_locks(ctx: WriteContext, start_ts: int, commit_ts: int) -> int:
    """Commit (commit_ts > 0) or roll back (commit_ts == 0) every lock left by txn ``start_ts``.

    Invariant: afterwards the txn holds no lock anywhere and has no index entry left. The caller
    must know the txn's fate from its primary (check_txn_status) first: this action trusts
    ``commit_ts``. Idempotent; returns how many keys it resolved."""
    return resolve_locks_step(ctx, start_ts, commit_ts, 0)[0]


def settle_txn(ctx: WriteContext, primary: bytes, start_ts: int) -> int:
    """Decide txn ``start_ts`` now, through its primary, never by guessing: if the primary
    committed, the txn did (its locks are committed too); otherwise the primary is rolled back
    first, so the txn can never commit later, and then its locks. Returns the commit_ts, or 0
    for a txn rolled back. Idempotent."""
    rec = ctx.reader.find_txn_write(primary, start_ts)
    if rec is not None and rec[1].kind is not WriteKind.ROLLBACK:
        resolve_locks(ctx, start_ts, rec[0])
        return rec[0]
    rollback_key(ctx, primary, start_ts)
    resolve_locks(ctx, start_ts, 0)
    return 0


def resolve_locks_step(
    ctx: WriteContext, start_ts: int, commit_ts: int, limit: int
) -> tuple[int, bool]:
    """``resolve_locks`` in bounded writes: resolves about ``limit`` locks (all when 0) and
    returns (how many, whether any are left). Callers step until none are left, so resolving a
    large transaction never holds the store's writer for long; between steps the transaction
    reads the same (its primary decided its fate)."""
    reader, buf = ctx.reader, ctx.buf
    prefix = struct.pack(">Q", start_ts)
    entries = reader.items_between(
        "txn_locks", prefix, struct.pack(">Q", start_ts + 1), limit=limit
    )
    more = bool(limit) and len(entries) >= limit
    if more:
        ranges: list = []
        ranged: list[tuple[bytes, bytes]] = []  # the next steps take the ranges
    else:
        ranges, ranged, more = ranged_locks(reader, start_ts, limit)
    if ranges:
        buf.delete_run("txn_ranges", ranges[0][0], len(ranges))
    if not commit_ts:
        for k, _ in entries:
            rollback_key(ctx, k[8:], start_ts)
        for key, _ in ranged:
            rollback_key(ctx, key, start_ts)
        return len(entries) + len(ranged), more
    # Every record read here is checked before it is turned into a commit record: a damaged
    # one fails the action (DataLoss) rather than being sealed again as sound.
    reader.check_intact("txn_locks", [e for e in entries if e[1]])
    reader.check_intact("lock", ranged)
    # Index entries of an older format (no Write record) take the per-key path.
    if not all(w for _, w in entries):
        for k, w in entries:
            if not w:
                commit_key(ctx, k[8:], start_ts, commit_ts)
        entries = [e for e in entries if e[1]]
    if entries:  # read above in this transaction: the txn's index entries, one unbroken run
        buf.delete_run("txn_locks", entries[0][0], len(entries))
    keys = [k[8:] for k, _ in entries]
    pairs = list(zip(keys, [w for _, w in entries], strict=True))
    if ranged and keys:
        indexed = set(keys)  # a key both indexed alone and inside a range resolves once
        ranged = [(k, raw) for k, raw in ranged if k not in indexed]
    if ranged:
        # Lock.write_bytes for each lock, with the value offset (the primary's length is in
        # it) read once: it is the same for every lock of the txn.
        cut = Lock.value_offset(ranged[0][1])
        pairs += [
            (k, (w := raw[:9] + raw[cut:-CRC_BYTES]) + pack_crc(crc32(w) ^ SEAL_XOR))
            for k, raw in ranged
        ]
        keys += [k for k, _ in ranged]
    # Comprehensions, not an append loop: this runs once per key of every committed epoch.
    suffix = encode_ts(commit_ts)
    ts_be = struct.pack(">Q", commit_ts)
    buf.put_many("write", [(key + suffix, w) for key, w in pairs])
    buf.put_many(
        "changes", [(key[:4] + ts_be + key, b"") for key, w in pairs if w[:1] != LOCK_FLAG]
    )
    if ranged and entries:
        keys.sort()  # delete_many walks sorted keys
    buf.delete_many("lock", keys)
    return len(pairs), more
