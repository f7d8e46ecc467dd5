"""rollback: abandon a transaction on some keys, for good."""

from __future__ import annotations

from kvstore.errors import TxnAlreadyCommitted
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import txn_lock_key, versioned_key
from kvstore.mvcc.records import Write, WriteKind


def rollback_key(ctx: WriteContext, key: bytes, start_ts: int) -> None:
    """Remove txn ``start_ts``'s lock (and large value) on ``key`` and leave a rollback record.

    Invariant: afterwards the txn can neither commit on the key nor prewrite it again: the
    rollback record at start_ts is there even if no lock ever arrived, so a prewrite delayed in
    the network fails when it lands. Idempotent. Raises TxnAlreadyCommitted if the txn committed
    on the key. Timestamps are unique (one TSO), so the record at start_ts overwrites no commit."""
    reader, buf = ctx.reader, ctx.buf
    lock = reader.get_lock(key)
    if lock is not None and lock.start_ts == start_ts:
        buf.delete("lock", key)
        buf.delete("txn_locks", txn_lock_key(start_ts, key))
        # (present or not: the value is dropped unread, damaged or not)
        if lock.short_value is None and reader.get("data", versioned_key(key, start_ts)):
            buf.delete("data", versioned_key(key, start_ts))
    else:
        rec = reader.find_txn_write(key, start_ts)
        if rec is not None:
            if rec[1].kind is WriteKind.ROLLBACK:
                return
            raise TxnAlreadyCommitted(key, start_ts, rec[0])
    buf.put("write", versioned_key(key, start_ts), Write(WriteKind.ROLLBACK, start_ts).to_bytes())


def rollback(ctx: WriteContext, keys: list[bytes], start_ts: int) -> None:
    """Roll back txn ``start_ts`` on every key of ``keys``, all or none (see rollback_key)."""
    for key in keys:
        rollback_key(ctx, key, start_ts)
