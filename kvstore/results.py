"""Plain results the store's actions return and the wire carries.

No storage behind them: ``kvstore.wire``, ``kvstore.remote`` and ``kvstore.lock_resolution`` use
them in a client process without loading LMDB or the actions.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvstore.mvcc.records import Lock

# A transaction's fate as its primary key tells it (TxnStatusResult.status).
LOCKED, COMMITTED, ROLLED_BACK = "locked", "committed", "rolled_back"


@dataclass(frozen=True)
class TxnStatusResult:
    """What check_txn_status found on a transaction's primary key."""

    status: str  # LOCKED, COMMITTED or ROLLED_BACK
    commit_ts: int = 0
    lock: Lock | None = None


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    """One key's net change over an interval (from_ts, to_ts], as scan_changes returns it."""

    key: bytes
    old: bytes | None  # the value at from_ts (None: absent)
    new: bytes | None  # the value at to_ts (None: absent)
    commit_ts: int  # the newest commit of the key inside the interval


@dataclass(frozen=True)
class DropResult:
    """What a drop_table did: whether the table existed, the downstream tables dropped with it
    (cascade) and the writer jobs unregistered. True when the table was dropped."""

    dropped: bool
    also_dropped: tuple[str, ...] = ()
    unregistered_jobs: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.dropped
