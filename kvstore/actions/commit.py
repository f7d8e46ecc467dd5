"""commit: the second phase; makes a prewritten key visible at commit_ts."""

from __future__ import annotations

import struct

from kvstore.errors import TxnLockNotFound, TxnRolledBack
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import changes_key, encode_ts, txn_lock_key, versioned_key
from kvstore.mvcc.records import CRC_BYTES, SEAL_XOR, Lock, LockOp, WriteKind, crc32, pack_crc

_U64 = struct.Struct(">Q")


def commit_key(ctx: WriteContext, key: bytes, start_ts: int, commit_ts: int) -> None:
    """Replace txn ``start_ts``'s lock on ``key`` by a write record at ``commit_ts``.

    Invariant: afterwards the key has Write(kind, start_ts) at commit_ts and no lock of start_ts.
    Idempotent: a key this txn already committed is left alone. Raises TxnRolledBack if the txn
    was rolled back on the key, TxnLockNotFound if there is neither lock nor record."""
    reader, buf = ctx.reader, ctx.buf
    raw = reader.get_lock_raw(key)  # checked intact: a damaged lock never becomes a write
    if raw is None or Lock.start_ts_of(raw) != start_ts:
        rec = reader.find_txn_write(key, start_ts)
        if rec is None:
            raise TxnLockNotFound(key, start_ts)
        if rec[1].kind is WriteKind.ROLLBACK:
            raise TxnRolledBack(key, start_ts)
        return
    # A hot path of large epochs: the write record is built from the lock's bytes directly
    # (same one-byte op flags), without parsing the lock into an object.
    buf.put("write", versioned_key(key, commit_ts), Lock.write_bytes(raw))
    buf.delete("lock", key)
    buf.delete("txn_locks", txn_lock_key(start_ts, key))
    if raw[:1] != LockOp.LOCK.value:
        buf.put("changes", changes_key(key, commit_ts), b"")


BULK_MIN_KEYS = 64


def commit(ctx: WriteContext, keys: list[bytes], start_ts: int, commit_ts: int) -> None:
    """Commit ``keys`` of txn ``start_ts`` at ``commit_ts``, all or none (see commit_key).

    The common bulk shape (every key still locked by this txn, no key twice) is done in C-level
    passes: the locks are read in one call and checked with one CRC, and the write records are
    built from their bytes (one txn's locks share the primary, so the value starts at one
    offset). Anything else (a retry, a key resolved by a reader) takes commit_key per key."""
    if len(keys) >= BULK_MIN_KEYS and _commit_bulk(ctx, keys, start_ts, commit_ts):
        return
    for key in keys:
        commit_key(ctx, key, start_ts, commit_ts)


def _commit_bulk(ctx: WriteContext, keys: list[bytes], start_ts: int, commit_ts: int) -> bool:
    reader, buf = ctx.reader, ctx.buf
    if len(set(keys)) != len(keys):
        return False
    ts_be = _U64.pack(start_ts)
    locks = reader.get_many("lock", keys)
    if len(locks) != len(keys) or not all(raw[1:9] == ts_be for _, raw in locks):
        return False
    reader.check_intact("lock", locks)  # a damaged lock never becomes a sound write
    cut = Lock.value_offset(locks[0][1])
    suffix, commit_be, seal_xor = encode_ts(commit_ts), _U64.pack(commit_ts), SEAL_XOR
    buf.put_many(
        "write",
        [
            (k + suffix, (w := raw[:9] + raw[cut:-CRC_BYTES]) + pack_crc(crc32(w) ^ seal_xor))
            for k, raw in locks
        ],
    )
    buf.put_many(
        "changes",
        [(k[:4] + commit_be + k, b"") for k, raw in locks if raw[:1] != LockOp.LOCK.value],
    )
    ordered = sorted(keys)  # delete_many walks sorted keys
    buf.delete_many("lock", ordered)
    buf.delete_many("txn_locks", [ts_be + k for k in ordered])
    return True
