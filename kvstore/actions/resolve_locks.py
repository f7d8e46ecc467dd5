"""resolve_locks: finish a whole transaction whose fate is known, through the txn_locks index."""

from __future__ import annotations

import struct

from kvstore.actions.commit import commit_key
from kvstore.actions.rollback import rollback_key
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import encode_ts
from kvstore.mvcc.records import Lock, LockOp
from kvstore.storage import Reader

LOCK_FLAG = LockOp.LOCK.value


def locks_of_txn(reader: Reader, start_ts: int) -> list[bytes]:
    """Every key still locked by txn ``start_ts`` (empty once it is resolved)."""
    return [k[8:] for k, _ in reader.iter_prefix("txn_locks", struct.pack(">Q", start_ts))]


def resolve_locks(ctx: WriteContext, start_ts: int, commit_ts: int) -> int:
    """Commit (commit_ts > 0) or roll back (commit_ts == 0) every lock left by txn ``start_ts``.

    Invariant: afterwards the txn holds no lock anywhere. The caller must know the txn's fate from
    its primary (check_txn_status) first: this action trusts ``commit_ts``. Idempotent; returns
    how many keys it resolved."""
    keys = locks_of_txn(ctx.reader, start_ts)
    if not commit_ts:
        for key in keys:
            rollback_key(ctx, key, start_ts)
        return len(keys)
    # Committing: every key is locked by this txn (the txn_locks index says so), so the write
    # records are built from the locks' bytes and stored in bulk.
    get_lock = ctx.reader.get
    suffix = encode_ts(commit_ts)
    ts_be = struct.pack(">Q", commit_ts)
    writes, changes, done = [], [], []
    for key in keys:
        raw = get_lock("lock", key)
        if raw is None or Lock.start_ts_of(raw) != start_ts:
            commit_key(ctx, key, start_ts, commit_ts)  # the general path words any error
            continue
        writes.append((key + suffix, Lock.write_bytes(raw)))
        if raw[:1] != LOCK_FLAG:
            changes.append((key[:4] + ts_be + key, b""))
        done.append(key)
    ctx.buf.put_many("write", writes)
    ctx.buf.put_many("changes", changes)
    ctx.buf.delete_many("lock", done)
    prefix = struct.pack(">Q", start_ts)
    ctx.buf.delete_many("txn_locks", [prefix + k for k in done])
    return len(keys)
