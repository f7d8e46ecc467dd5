"""txn_heartbeat: keep a long transaction's primary lock alive."""

from __future__ import annotations

from kvstore.errors import TxnLockNotFound, TxnRolledBack
from kvstore.group_commit import WriteContext
from kvstore.mvcc.records import WriteKind
from kvstore.mvcc.timestamp import physical_ms


def txn_heartbeat(
    ctx: WriteContext, primary: bytes, start_ts: int, advise_ttl_ms: int, now_ms: int
) -> int:
    """Extend the TTL of txn ``start_ts``'s primary lock to at least now + advise_ttl_ms.

    Invariant: a TTL never shrinks, so a heartbeat cannot make a live txn look expired. Returns the
    new TTL (ms from start_ts's physical time). Raises TxnRolledBack / TxnLockNotFound when the
    lock is gone: the txn was rolled back (or committed) and the caller must stop."""
    lock = ctx.reader.get_lock(primary)
    if lock is None or lock.start_ts != start_ts:
        rec = ctx.reader.find_txn_write(primary, start_ts)
        if rec is not None and rec[1].kind is WriteKind.ROLLBACK:
            raise TxnRolledBack(primary, start_ts)
        raise TxnLockNotFound(primary, start_ts)
    ttl = max(lock.ttl_ms, now_ms - physical_ms(start_ts) + advise_ttl_ms)
    if ttl != lock.ttl_ms:
        ctx.buf.put("lock", primary, lock.with_ttl(ttl).to_bytes())
    return ttl
