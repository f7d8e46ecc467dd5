"""Public names are a contract (docs/design.md, public interface): pin them, and check the client covers the wire."""

from __future__ import annotations

import dataclasses

import pytest

import coordinator
from coordinator import reports
from coordinator.client import Client
from coordinator.jobs import EpochInfo, EpochState, JobClient, JobInfo
from kvstore.remote import RemoteStore
from kvstore.store import LocalStore
from snapview_proto.snapview.v1 import coordinator_pb2, kvstore_pb2


def test_coordinator_exports_are_pinned():
    assert sorted(coordinator.__all__) == sorted(
        [
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
    )
    for name in coordinator.__all__:
        assert getattr(coordinator, name) is not None


def _snake(name: str) -> str:
    out = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
    return out


def test_remote_store_covers_every_kvstore_rpc():
    """Every KvStore RPC has a RemoteStore method, and LocalStore has the same one."""
    for m in kvstore_pb2.DESCRIPTOR.services_by_name["KvStore"].methods:
        name = _snake(m.name)
        assert hasattr(RemoteStore, name), f"RemoteStore lacks {name} for {m.name}"
        assert hasattr(LocalStore, name), f"LocalStore lacks {name} for {m.name}"


# RPCs reached through another client method.
SERVED_BY = {
    "TsoStream": "tso",
    "AcquireLease": "lease",
    "BeginCorrections": "revise",
    "GetRevision": "revision",
    "ListRevisions": "revisions",
}


def test_client_covers_every_coordinator_rpc():
    """Every Coordinator RPC is served by exactly one of the user-facing Client and the job
    protocol's JobClient."""
    for m in coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].methods:
        name = SERVED_BY.get(m.name) or _snake(m.name)
        owners = [cls.__name__ for cls in (Client, JobClient) if hasattr(cls, name)]
        assert owners, f"neither Client nor JobClient has {name} for {m.name}"
        assert len(owners) == 1, f"{name} for {m.name} is on both {owners}"


def test_epoch_states_cover_the_wire_enum():
    """Every EpochState the server can send maps to one EpochState member and back."""
    wire = [v.number for v in coordinator_pb2.EpochState.DESCRIPTOR.values if v.number]
    assert sorted(s.to_pb() for s in EpochState) == sorted(wire)
    for n in wire:
        assert EpochState.from_pb(n).to_pb() == n


# The client's typed results and the wire messages they are built from.
RESULTS = [
    (EpochInfo, coordinator_pb2.EpochInfo),
    (JobInfo, coordinator_pb2.JobInfo),
    (reports.ServerStatus, coordinator_pb2.StatusResponse),
    (reports.TopologyInfo, coordinator_pb2.TopologyResponse),
    (reports.TableNode, coordinator_pb2.TableNode),
    (reports.DelayInfo, coordinator_pb2.DelayResponse),
    (reports.TableDelay, coordinator_pb2.TableDelay),
    (reports.JobContribution, coordinator_pb2.JobContribution),
    (reports.GcInfo, coordinator_pb2.GcStatusResponse),
    (reports.GcHold, coordinator_pb2.GcHold),
    (reports.LeaseInfo, coordinator_pb2.Lease),
    (reports.GcProgress, coordinator_pb2.GcProgress),
]


@pytest.mark.parametrize(("result", "message"), RESULTS, ids=[r.__name__ for r, _ in RESULTS])
def test_a_typed_result_has_every_field_of_its_message(result, message):
    """Nothing the server sends is dropped on the way to the caller: each result dataclass has
    exactly the fields of its message, by name."""
    assert dataclasses.is_dataclass(result) and result.__dataclass_params__.frozen
    fields = {f.name for f in dataclasses.fields(result)}
    assert fields == {f.name for f in message.DESCRIPTOR.fields}
