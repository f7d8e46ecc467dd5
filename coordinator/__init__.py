"""snapview's coordinator package and its public Python client.

    import coordinator
    client = coordinator.connect("localhost:50051")
    with client.transaction() as txn:
        txn.put("accounts", {"id": 1, "balance": 100})

Public names are re-exported here; ``tests/unit/test_public_api.py`` pins the list.
"""

from coordinator.client import Client, connect
from coordinator.connection import ConnectionSettings
from coordinator.errors import (
    BarrierNotReached,
    LeaseNotFound,
    RevisionNotReached,
    SecondWriter,
    TopologyCycle,
)
from coordinator.reports import DelayInfo, GcInfo, LeaseInfo, ServerStatus, TopologyInfo
from coordinator.revisions import Revision
from coordinator.snapshot import Snapshot
from coordinator.transaction import Transaction
from coordinator.tso_client import prepare_fork
from kvstore.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    KeyIsLocked,
    NotFound,
    SchemaMismatch,
    SnapshotTooOld,
    SnapviewError,
    TableNotFound,
    TxnError,
    ValueTooLarge,
    WriteConflict,
)
from kvstore.remote import RetryPolicy

__all__ = [
    "AlreadyExists",
    "BarrierNotReached",
    "Client",
    "ConnectionSettings",
    "DelayInfo",
    "FailedPrecondition",
    "GcInfo",
    "InvalidArgument",
    "KeyIsLocked",
    "LeaseInfo",
    "LeaseNotFound",
    "NotFound",
    "RetryPolicy",
    "Revision",
    "RevisionNotReached",
    "SchemaMismatch",
    "SecondWriter",
    "ServerStatus",
    "Snapshot",
    "SnapshotTooOld",
    "SnapviewError",
    "TableNotFound",
    "TopologyCycle",
    "TopologyInfo",
    "Transaction",
    "TxnError",
    "ValueTooLarge",
    "WriteConflict",
    "connect",
    "prepare_fork",
]
