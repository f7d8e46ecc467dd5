"""prewrite: the first phase of Percolator's two-phase commit."""

from __future__ import annotations

import struct
from operator import itemgetter

from kvstore.actions.fence import check_fences, check_not_dropped
from kvstore.errors import KeyIsLocked, KeyPrewrittenTwice, TxnRolledBack, WriteConflict
from kvstore.group_commit import WriteContext
from kvstore.limits import RESOLVE_STEP
from kvstore.mvcc.keys import decode_ts, encode_ts, versioned_key
from kvstore.mvcc.records import (
    SEAL_XOR,
    SHORT_VALUE_MAX,
    VALUE_TAG,
    Lock,
    LockOp,
    Mutation,
    WriteKind,
    crc32,
    pack_crc,
    seal,
)
from kvstore.storage import Reader, WriteBuffer

# A bulk prewrite of at least this many keys indexes its locks by one txn_ranges entry (first
# key -> last key) instead of one txn_locks entry per key: half the writes per row, and no
# per-key index delete when the transaction resolves.
RANGE_INDEX_MIN_KEYS = 64


def check_prewrite(reader: Reader, key: bytes, primary: bytes, start_ts: int) -> bool:
    """Whether ``key`` still needs a lock for txn ``start_ts``.

    Returns False when the txn already locked or committed the key (a retried request). Raises
    KeyIsLocked for another txn's lock, TxnRolledBack if this txn was rolled back on the key, and
    WriteConflict if a Put/Delete/Lock write has commit_ts >= start_ts. Rollback records of other
    transactions change no data, so they are not conflicts."""
    lock = reader.get_lock(key)
    if lock is not None:
        if lock.start_ts == start_ts:
            return False
        raise KeyIsLocked(key, lock.primary, lock.start_ts, lock.ttl_ms, 0, lock.txn_size)
    newest = reader.newest_commit_ts(key)
    if newest is None or newest < start_ts:
        return True  # the common case, decided from the newest version's key alone
    for commit_ts, w in reader.iter_writes(key):
        if commit_ts < start_ts:
            break
        if w.start_ts == start_ts:
            if w.kind is WriteKind.ROLLBACK:
                raise TxnRolledBack(key, start_ts)
            return False
        if w.kind is not WriteKind.ROLLBACK:
            raise WriteConflict(key, primary, start_ts, w.start_ts, commit_ts)
    return True


def keys_held(
    reader: Reader, keys: list[bytes], start_ts: int, most: int = RESOLVE_STEP
) -> tuple[bytes, ...]:
    """The keys of ``keys`` (sorted, no key twice) that txn ``start_ts`` holds a lock on, in
    that order, at most ``most`` of them: e.g. the locks in a prewrite's way that resolving
    one decided transaction clears, in one write."""
    ts_be = struct.pack(">Q", start_ts)
    held = [k for k, raw in reader.get_many("lock", keys) if raw[1:9] == ts_be]
    return tuple(held[:most])


def check_same_mutation(
    reader: Reader, key: bytes, start_ts: int, op: LockOp, value: bytes
) -> None:
    """A txn prewriting a key again must bring the same mutation (a retried request does);
    anything else is two rows for one key in one transaction: KeyPrewrittenTwice."""
    lock = reader.get_lock(key)
    if lock is None or lock.start_ts != start_ts:
        return  # committed already: a retry arriving late
    if lock.op is LockOp.PUT and lock.short_value is None:
        held = reader.get_data(key, start_ts)
    else:
        held = lock.short_value or b""
    if lock.op is not op or held != value:
        raise KeyPrewrittenTwice.of(key, start_ts)


def stage_value(
    buf: WriteBuffer, op: LockOp, key: bytes, value: bytes, start_ts: int
) -> bytes | None:
    """Where a mutation's value lives: returned to ride inline (short values), or written to the
    data CF under (key, start_ts) when longer than SHORT_VALUE_MAX (None is returned then)."""
    if op is not LockOp.PUT:
        return None
    if len(value) > SHORT_VALUE_MAX:
        buf.put("data", versioned_key(key, start_ts), seal(value))
        return None
    return value


def _all_inline(mutations: list[Mutation]) -> bool:
    """Every mutation a PUT of an inline value or a DELETE (a view's delta, an index's change)."""
    # list.count compares by identity first: no Python-level Enum.__hash__ per mutation
    ops = list(map(itemgetter(0), mutations))
    return (
        ops.count(LockOp.PUT) + ops.count(LockOp.DELETE) == len(ops)
        and max(map(len, map(itemgetter(2), mutations))) <= SHORT_VALUE_MAX
    )


def _unversioned_inline(
    reader: Reader, mutations: list[Mutation], primary: bytes, start_ts: int
) -> list[Mutation]:
    """The mutations of prewrite's common shape (PUTs of inline values and DELETEs, no key locked)
    that still need a lock: the same rules as check_prewrite, with no per-key branching on op or
    size. ``mutations`` must be sorted by key.

    A version record's 8-byte suffix is ~commit_ts big-endian, so "commit_ts >= start_ts" is
    "suffix <= ~start_ts" as bytes. The write CF is walked alongside the sorted keys: the first
    record at or after an earlier key is also the first at or after this one when it does not
    sort before this key, so a seek is needed only when it does; once no record is left, the
    remaining keys are all new."""
    not_older = encode_ts(start_ts)
    seek, seek_key = reader.write_seeker()
    out: list[Mutation] = []
    keep = out.append
    at = b""  # the first write-CF record at or after the previous key
    for i, m in enumerate(mutations):
        key = m[1]
        if at < key:
            if not seek(key):
                return out + mutations[i:] if i else mutations
            at = seek_key()
        if (
            at[-8:] <= not_older
            and at[:-8] == key
            and not check_prewrite(reader, key, primary, start_ts)
        ):
            continue
        keep(m)
    return out


def prewrite(
    ctx: WriteContext,
    mutations: list[Mutation],
    primary: bytes,
    start_ts: int,
    ttl_ms: int,
    txn_size: int,
    revision: int = 0,
) -> None:
    """Lock every key of ``mutations`` for txn ``start_ts``, all or none.

    Invariant: a key carries at most one lock, and a txn never locks a key that has a write with
    commit_ts >= start_ts (it would commit "into the past" of a reader). Idempotent for the same
    start_ts: keys this txn already locked (with the same mutation) or committed are left alone;
    a key it locked with a different mutation raises KeyPrewrittenTwice. Values longer than
    SHORT_VALUE_MAX go to the data CF; shorter ones ride inline in the lock (and later the write).
    A table fenced by a revision takes no new lock (TableFenced, see kvstore.actions.fence),
    except from that revision (``revision``, its id); a dropped table takes none at all
    (TableNotFound naming it).
    """
    reader, buf = ctx.reader, ctx.buf
    check_fences(reader, mutations, revision)
    check_not_dropped(reader, mutations)
    # Keys that already carry a lock take the careful path; for the rest (nearly always all of
    # them) one C-level lookup says so, and the locks are stored in bulk.
    locked = {k for k, _ in reader.get_many("lock", [k for _, k, _ in mutations])}
    locks, index = [], []
    ts_be = struct.pack(">Q", start_ts)
    if not locked and _all_inline(mutations):
        mutations = sorted(mutations, key=itemgetter(1))  # near-free when already in key order
        todo = _unversioned_inline(reader, mutations, primary, start_ts)
        if not todo:
            return
        put = LockOp.PUT
        lock_head = Lock.header(put, primary, start_ts, ttl_ms, txn_size) + VALUE_TAG
        # Sealed per record: the head's CRC is taken once and continued over each value. A
        # DELETE's lock carries no value: one record serves every deleted key.
        lock_crc = crc32(lock_head)
        gone = seal(Lock.header(LockOp.DELETE, primary, start_ts, ttl_ms, txn_size))
        buf.put_many(
            "lock",
            [
                (k, lock_head + v + pack_crc(crc32(v, lock_crc) ^ SEAL_XOR) if op is put else gone)
                for op, k, v in todo
            ],
        )
        if len(todo) >= RANGE_INDEX_MIN_KEYS:
            # One entry stands for the run: resolve_locks finds these locks by scanning the lock
            # CF between the first and last key for locks of start_ts.
            buf.put("txn_ranges", ts_be + todo[0][1], todo[-1][1])
        else:
            write_head = put.value + ts_be + VALUE_TAG
            write_crc = crc32(write_head)
            deleted = seal(LockOp.DELETE.value + ts_be)
            buf.put_many(
                "txn_locks",
                [
                    (
                        ts_be + k,
                        write_head + v + pack_crc(crc32(v, write_crc) ^ SEAL_XOR)
                        if op is put
                        else deleted,
                    )
                    for op, k, v in todo
                ],
            )
        return
    # Per op, built once per request: the lock without its value, and the commit record's head
    # (same one-byte flag and start_ts; see Lock.write_bytes).
    heads = {
        op: (Lock.header(op, primary, start_ts, ttl_ms, txn_size), op.value + ts_be)
        for op in {m[0] for m in mutations}
    }
    seek, seek_key = reader.write_seeker()
    tag = VALUE_TAG
    for op, key, value in mutations:
        if key in locked:
            try:
                needed = check_prewrite(reader, key, primary, start_ts)
            except KeyIsLocked as e:
                e.keys = keys_held(reader, sorted(locked), e.start_ts)
                raise
            if not needed:
                check_same_mutation(reader, key, start_ts, op, value)
                continue
        elif seek(key):
            # The newest version of the key, if any, is the first record at or after it.
            k = seek_key()
            if (
                len(k) == len(key) + 8
                and k.startswith(key)
                and decode_ts(k[-8:]) >= start_ts
                and not check_prewrite(reader, key, primary, start_ts)
            ):
                continue
        lock_head, write_head = heads[op]
        if op is LockOp.PUT and len(value) <= SHORT_VALUE_MAX:
            locks.append((key, seal(lock_head + tag + value)))
            write = seal(write_head + tag + value)
        else:
            short = stage_value(buf, op, key, value, start_ts)
            locks.append((key, seal(lock_head if short is None else lock_head + tag + short)))
            write = seal(write_head if short is None else write_head + tag + short)
        # The index entry carries the commit record, so resolve_locks needs no lock lookup.
        index.append((ts_be + key, write))
    locks.sort()
    index.sort()
    buf.put_many("lock", locks)
    buf.put_many("txn_locks", index)
