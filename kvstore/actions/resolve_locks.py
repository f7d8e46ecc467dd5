"""resolve_locks: finish a whole transaction whose fate is known, through the txn_locks index."""

from __future__ import annotations

import struct

from kvstore.actions.commit import commit_key
from kvstore.actions.rollback import rollback_key
from kvstore.group_commit import WriteContext
from kvstore.storage import Reader


def locks_of_txn(reader: Reader, start_ts: int) -> list[bytes]:
    """Every key still locked by txn ``start_ts`` (empty once it is resolved)."""
    return [k[8:] for k, _ in reader.iter_prefix("txn_locks", struct.pack(">Q", start_ts))]


def resolve_locks(ctx: WriteContext, start_ts: int, commit_ts: int) -> int:
    """Commit (commit_ts > 0) or roll back (commit_ts == 0) every lock left by txn ``start_ts``.

    Invariant: afterwards the txn holds no lock anywhere. The caller must know the txn's fate from
    its primary (check_txn_status) first: this action trusts ``commit_ts``. Idempotent; returns
    how many keys it resolved."""
    keys = locks_of_txn(ctx.reader, start_ts)
    for key in keys:
        if commit_ts:
            commit_key(ctx, key, start_ts, commit_ts)
        else:
            rollback_key(ctx, key, start_ts)
    return len(keys)
