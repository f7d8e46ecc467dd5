"""The check a Commit, Rollback or ResolveLocks sent over gRPC passes before it touches a lock.

Percolator's atomicity rests on one rule: a transaction's primary key decides it, and every other
key follows the primary. A raw call can break that rule: a ``Rollback`` of one secondary of a
transaction whose primary later commits leaves that key with its old value in a transaction
recorded as done. So a call from outside the server is *checked*: it may only do what agrees
with the outcome the transaction's primary records, or decide the transaction as a whole
through its primary (a Commit or Rollback that names the primary itself). That is every call
the client library makes in normal operation (its own transaction's commit and rollback, and
lock resolution through the primary after ``CheckTxnStatus``).

A transaction whose primary is a key of the system table belongs to the server (an epoch's or a
revision's status key, coordinator.server.meta): nobody but the server decides it, so a call on
it is accepted only where its primary has already decided, for every caller, admin included.
An admin's *raw* call (``raw=True``) may decide other transactions against their primary, as an
operator's repair tool. The check runs inside the write that acts, so no prewrite can slip
between the check and the act.
"""

from __future__ import annotations

import struct

from kvstore.errors import PermissionDenied
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import SYSTEM_TABLE_ID, table_id_of
from kvstore.mvcc.records import Lock, WriteKind
from kvstore.storage import Reader

COMMIT, ROLLBACK, RESOLVE = "Commit", "Rollback", "ResolveLocks"
# How many stale txn_locks entries (whose lock a reader already resolved) are passed over when
# looking for one live lock of a transaction: a bounded read, and one live lock is all it takes.
_MAX_INDEX_PROBES = 64


def txn_primary(reader: Reader, start_ts: int, keys: list[bytes]) -> bytes | None:
    """The primary of txn ``start_ts``, read from any lock it still holds (all its locks name
    the same primary); None when it holds none: then no call can split it any more."""
    for key in keys:
        lock = reader.get_lock(key)
        if lock is not None and lock.start_ts == start_ts:
            return lock.primary
    lo, hi = struct.pack(">Q", start_ts), struct.pack(">Q", start_ts + 1)
    for probes, (k, _) in enumerate(reader.iter_range("txn_locks", lo, hi)):
        lock = reader.get_lock(k[8:])
        if lock is not None and lock.start_ts == start_ts:
            return lock.primary
        if probes >= _MAX_INDEX_PROBES:
            break
    for k, last in reader.iter_range("txn_ranges", lo, hi):
        for lk, raw in reader.iter_range("lock", k[8:], last + b"\x00"):
            if Lock.start_ts_of(raw) == start_ts:
                return reader.parse_lock(lk, raw).primary
    return None


def is_server_owned(primary: bytes) -> bool:
    """Whether a transaction with this primary is an epoch's or a revision's (system table)."""
    return len(primary) >= 4 and table_id_of(primary) == SYSTEM_TABLE_ID


def check_call(
    ctx: WriteContext,
    op: str,
    start_ts: int,
    keys: list[bytes],
    commit_ts: int = 0,
    *,
    raw: bool = False,
) -> None:
    """Raise PermissionDenied unless ``op`` (COMMIT, ROLLBACK or RESOLVE; ``commit_ts`` 0 for a
    rollback) on txn ``start_ts`` agrees with its primary, as the module docstring says."""
    reader = ctx.reader
    primary = txn_primary(reader, start_ts, keys)
    if primary is None:
        return
    rec = reader.find_txn_write(primary, start_ts)
    rolled_back = rec is not None and rec[1].kind is WriteKind.ROLLBACK
    committed_at = rec[0] if rec is not None and not rolled_back else 0
    owned = is_server_owned(primary)
    if commit_ts and committed_at == commit_ts or not commit_ts and rolled_back:
        return  # what the primary already decided
    if not owned and primary in keys and op != RESOLVE:
        return  # decides the whole transaction through its primary (all or none)
    if raw and not owned:
        return  # an admin's repair
    if owned:
        who = "a revision's or an epoch's transaction, which only the server decides"
    else:
        who = "a transaction that its primary decides (name the primary, or resolve through it)"
    state = (
        f"committed at {committed_at}"
        if committed_at
        else "rolled back"
        if rolled_back
        else "not decided yet"
    )
    wanted = f"commit at {commit_ts}" if commit_ts else "roll back"
    raise PermissionDenied(
        f"{op}: refused to {wanted} transaction start_ts={start_ts}: it is {who}; its primary "
        f"{primary.hex()} is {state}"
    )
