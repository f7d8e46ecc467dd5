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
    # that commits it, so the whole transaction commits from its index, in bulk. Index entries of
    # an older format (no Write record) take the per-key path.
    resolved = len(entries)
    if not all(w for _, w in entries):
        for k, w in entries:
            if not w:
                commit_key(ctx, k[8:], start_ts, commit_ts)
        entries = [e for e in entries if e[1]]
    # Comprehensions, not an append loop: this runs once per key of every committed epoch.
    keys = [k[8:] for k, _ in entries]
    suffix = encode_ts(commit_ts)
    ts_be = struct.pack(">Q", commit_ts)
    pairs = list(zip(keys, [w for _, w in entries], strict=True))
    ctx.buf.put_many("write", [(key + suffix, w) for key, w in pairs])
    ctx.buf.put_many(
        "changes", [(key[:4] + ts_be + key, b"") for key, w in pairs if w[:1] != LOCK_FLAG]
    )
    ctx.buf.delete_many("lock", keys)
    if entries:  # read above in this transaction: the txn's index entries, one unbroken run
        ctx.buf.delete_run("txn_locks", entries[0][0], len(entries))
    return resolved
