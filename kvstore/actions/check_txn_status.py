"""check_txn_status: decide the fate of a transaction from its primary key."""

from __future__ import annotations

from kvstore.actions.rollback import rollback_key
from kvstore.errors import TxnLockNotFound
from kvstore.group_commit import WriteContext
from kvstore.mvcc.records import WriteKind
from kvstore.mvcc.timestamp import lock_expired
from kvstore.results import COMMITTED, LOCKED, ROLLED_BACK, TxnStatusResult


def check_txn_status(
    ctx: WriteContext, primary: bytes, lock_ts: int, now_ms: int, rollback_if_not_exist: bool
) -> TxnStatusResult:
    """The status of txn ``lock_ts`` as its primary key tells it.

    Invariant: the primary is the single point of truth for a txn. A live primary lock means
    LOCKED; an expired one is rolled back here (lock removed, rollback record written), so the
    txn can never commit afterwards; a commit record means COMMITTED. When the primary has neither
    (its prewrite may still be in flight), ``rollback_if_not_exist`` writes a rollback record so
    the late prewrite fails; otherwise TxnLockNotFound is raised."""
    lock = ctx.reader.get_lock(primary)
    if lock is not None and lock.start_ts == lock_ts:
        if lock_expired(lock.start_ts, lock.ttl_ms, now_ms):
            rollback_key(ctx, primary, lock_ts)
            return TxnStatusResult(ROLLED_BACK)
        return TxnStatusResult(LOCKED, lock=lock)
    rec = ctx.reader.find_txn_write(primary, lock_ts)
    if rec is not None:
        if rec[1].kind is WriteKind.ROLLBACK:
            return TxnStatusResult(ROLLED_BACK)
        return TxnStatusResult(COMMITTED, commit_ts=rec[0])
    if rollback_if_not_exist:
        rollback_key(ctx, primary, lock_ts)
        return TxnStatusResult(ROLLED_BACK)
    raise TxnLockNotFound(primary, lock_ts)
