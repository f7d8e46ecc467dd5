"""The Coordinator gRPC service: TSO, epoch transactions and status."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc

from coordinator.epochs import ABORTED, COMMITTED, PREWRITE, EpochInfo, EpochManager
from coordinator.tso import TimestampOracle
from kvstore.errors import InvalidArgument
from kvstore.grpc_errors import generic_handler
from kvstore.mvcc.timestamp import LOGICAL_MASK
from kvstore.store import LocalStore
from snapview_proto.snapview.v1 import coordinator_pb2 as pb

SERVICE_NAME = "snapview.v1.Coordinator"
VERSION = "0.1.0"
_STATE = {PREWRITE: pb.EPOCH_PREWRITE, COMMITTED: pb.EPOCH_COMMITTED, ABORTED: pb.EPOCH_ABORTED}


def epoch_to_pb(e: EpochInfo) -> pb.EpochInfo:
    return pb.EpochInfo(
        job=e.job,
        epoch=e.epoch,
        state=_STATE[e.state],
        start_ts=e.start_ts,
        commit_ts=e.commit_ts,
        primary_key=e.primary_key,
        attempt=e.attempt,
        metadata=e.metadata,
    )


class CoordinatorService:
    def __init__(
        self,
        store: LocalStore,
        tso: TimestampOracle,
        epochs: EpochManager,
        data_dir: str,
        instance_id: str = "",
    ):
        self.store, self.tso, self.epochs, self.data_dir = store, tso, epochs, data_dir
        self.instance_id = instance_id
        self.started = time.monotonic()

    def handler(self) -> grpc.GenericRpcHandler:
        return generic_handler(SERVICE_NAME, pb.DESCRIPTOR.services_by_name["Coordinator"], self)

    def Tso(self, req: pb.TsoRequest, ctx) -> pb.TsoResponse:
        count = req.count or 1
        if count > LOGICAL_MASK:
            raise InvalidArgument(f"Tso: count {count} exceeds {LOGICAL_MASK}")
        return pb.TsoResponse(first=self.tso.allocate(count), count=count)

    def TsoStream(self, requests: Iterator[pb.TsoRequest], ctx) -> Iterator[pb.TsoResponse]:
        for req in requests:
            yield self.Tso(req, ctx)

    def OpenTransaction(self, req: pb.OpenTransactionRequest, ctx) -> pb.EpochInfo:
        if req.epoch == 0:
            return epoch_to_pb(
                self.epochs.open_batch(req.job, req.batch, req.owner, req.lock_ttl_ms)
            )
        return epoch_to_pb(self.epochs.open(req.job, req.epoch, req.lock_ttl_ms))

    def CommitTransaction(self, req: pb.CommitTransactionRequest, ctx) -> pb.EpochInfo:
        return epoch_to_pb(self.epochs.commit(req.job, req.epoch, req.start_ts, req.metadata))

    def AbortTransaction(self, req: pb.AbortTransactionRequest, ctx) -> pb.EpochInfo:
        return epoch_to_pb(self.epochs.abort(req.job, req.epoch, req.start_ts))

    def HeartbeatTransaction(self, req: pb.HeartbeatTransactionRequest, ctx) -> pb.EpochInfo:
        return epoch_to_pb(self.epochs.heartbeat(req.job, req.epoch, req.start_ts, req.ttl_ms))

    def GetEpoch(self, req: pb.GetEpochRequest, ctx) -> pb.EpochInfo:
        return epoch_to_pb(self.epochs.get(req.job, req.epoch))

    def Status(self, req: pb.StatusRequest, ctx) -> pb.StatusResponse:
        st = self.store.stats()
        return pb.StatusResponse(
            version=VERSION,
            tso=self.tso.now(),
            tables=len(self.store.list_tables()),
            jobs=len(self.epochs.jobs()),
            data_dir=self.data_dir,
            uptime_ms=int((time.monotonic() - self.started) * 1000),
            map_size_bytes=st["map_size"],
            used_bytes=st["used_bytes"],
            group_commits=st["group_commits"],
            grouped_actions=st["grouped_actions"],
            instance_id=self.instance_id,
            lmdb_path=self.store.storage.path,
        )
