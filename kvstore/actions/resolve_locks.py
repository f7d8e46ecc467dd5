"""resolve_locks: finish a whole transaction whose fate is known, through the txn_locks index."""

from __future__ import annotations

import struct

from kvstore.actions.commit import commit_key
from kvstore.actions.rollback import rollback_key
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import encode_ts
from kvstore.mvcc.records import LockOp

LOCK_FLAG = LockOp.LOCK.value


def resolve_locks(ctx: WriteContext, start_ts: int, commit_ts: int) -> int:
    """Commit (commit_ts > 0) or roll back (commit_ts == 0) every lock left by txn ``start_ts``.

    Relies on the txn_locks invariant: an index entry exists exactly while its lock does, and
    holds the Write record that commits it (see mvcc.records).

    Invariant: afterwards the txn holds no lock anywhere. The caller must know the txn's fate from
    its primary (check_txn_status) first: this action trusts ``commit_ts``. Idempotent; returns
    how many keys it resolved."""
    prefix = struct.pack(">Q", start_ts)
    entries = ctx.reader.items_between("txn_locks", prefix, struct.pack(">Q", start_ts + 1))
    if not commit_ts:
        for k, _ in entries:
            rollback_key(ctx, k[8:], start_ts)
        return len(entries)
    # Committing: an index entry exists exactly while its lock does and holds the Write record
    # that commits it, so the whole transaction commits from its index, in bulk.
    suffix = encode_ts(commit_ts)
    ts_be = struct.pack(">Q", commit_ts)
    writes, changes, keys = [], [], []
    for k, write in entries:
        key = k[8:]
        if not write:  # an index entry of an older format: take the per-key path
            commit_key(ctx, key, start_ts, commit_ts)
            continue
        keys.append(key)
        writes.append((key + suffix, write))
        if write[:1] != LOCK_FLAG:
            changes.append((key[:4] + ts_be + key, b""))
    ctx.buf.put_many("write", writes)
    ctx.buf.put_many("changes", changes)
    ctx.buf.delete_many("lock", keys)
    ctx.buf.delete_prefix("txn_locks", prefix)
    return len(entries)
