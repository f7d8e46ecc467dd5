"""The Coordinator gRPC service: TSO, epoch transactions, jobs, barriers, snapshots, status."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from concurrent.futures import Executor

import grpc

from coordinator.server.delay import delay_report
from coordinator.server.epochs import EpochManager
from coordinator.server.gc import GcManager
from coordinator.server.leases import Lease
from coordinator.server.meta import EpochRecord, JobRecord
from coordinator.server.registry import Registry, check_not_reserved
from coordinator.server.revisions import RevisionManager, RevisionRecord
from coordinator.server.roles import Roles, caller_is_admin, redact_gc_status
from coordinator.server.snapshot_planner import SnapshotPlanner, TableRead
from coordinator.server.tso import TimestampOracle
from kvstore.errors import InvalidArgument
from kvstore.grpc_errors import generic_handler
from kvstore.mvcc.timestamp import LOGICAL_MASK
from kvstore.store import LocalStore
from snapview_proto.snapview.v1 import coordinator_pb2 as pb

SERVICE_NAME = "snapview.v1.Coordinator"
VERSION = "0.1.0"


def epoch_to_pb(e: EpochRecord, rebuild: int = 0) -> pb.EpochInfo:
    return pb.EpochInfo(
        rebuild=rebuild,
        job=e.job,
        epoch=e.epoch,
        state=e.state.to_pb(),
        start_ts=e.start_ts,
        commit_ts=e.commit_ts,
        primary_key=e.primary_key,
        attempt=e.attempt,
        metadata=e.metadata,
        batch=e.batch,  # auto-numbered epochs: which batch, under which owner
        owner=e.owner,
    )


def revision_to_pb(r: RevisionRecord, barrier: int = 0) -> pb.Revision:
    return pb.Revision(
        id=r.id,
        table=r.table,
        kind=r.kind,
        state=r.state,
        who=r.who,
        started_wall_ms=r.started_wall_ms,
        ended_wall_ms=r.ended_wall_ms,
        target_ts=r.target_ts,
        target_barrier=r.target_barrier,
        start_ts=r.start_ts,
        commit_ts=r.commit_ts,
        barrier=barrier,
        restored=r.restored,
        removed=r.removed,
        mode=r.mode,
        job=r.job,
        views=list(r.views),
        error=r.error,
        key=r.key,
    )


def lease_to_pb(x: Lease) -> pb.Lease:
    return pb.Lease(
        id=x.id,
        holder=x.holder,
        ts=x.ts,
        ttl_ms=x.ttl_ms,
        expires_ms=x.expires_ms,
        created_ms=x.created_ms,
    )


def _reads(reads: tuple[TableRead, ...]) -> list[pb.TableRead]:
    return [pb.TableRead(table=r.table, read_ts=r.read_ts, changed=r.changed) for r in reads]


class CoordinatorService:
    def __init__(
        self,
        store: LocalStore,
        tso: TimestampOracle,
        epochs: EpochManager,
        data_dir: str,
        instance_id: str = "",
        *,
        registry: Registry,
        planner: SnapshotPlanner,
        gc: GcManager,
        revisions: RevisionManager,
        tso_executor: Executor | None = None,
        roles: Roles | None = None,
    ) -> None:
        self.store, self.tso, self.epochs, self.data_dir = store, tso, epochs, data_dir
        # Where a timestamp that cannot be had on the loop is allocated: best a pool of its own,
        # so that it never queues behind the store work in the default one.
        self.tso_executor = tso_executor
        self.instance_id = instance_id
        self.registry, self.planner, self.gc = registry, planner, gc
        self.revisions = revisions
        self.roles = roles  # None: no tokens, every caller is admin
        self.started = time.monotonic()

    def handler(self) -> grpc.GenericRpcHandler:
        return generic_handler(SERVICE_NAME, pb.DESCRIPTOR.services_by_name["Coordinator"], self)

    # Tso and TsoStream run on the server's event loop (see kvstore.grpc_errors): an open stream
    # holds no thread, and a timestamp is handed out without a thread hop unless the oracle is
    # busy or must persist its window first, which is then done in tso_executor.

    async def _allocate(self, count: int) -> int:
        if count > LOGICAL_MASK:
            raise InvalidArgument(f"Tso: count {count} exceeds {LOGICAL_MASK}")
        first = self.tso.try_allocate(count)
        if first is None:
            first = await asyncio.get_running_loop().run_in_executor(None, self.tso.allocate, count)
        return first

    async def Tso(self, req: pb.TsoRequest, ctx: grpc.aio.ServicerContext) -> pb.TsoResponse:
        count = req.count or 1
        return pb.TsoResponse(first=await self._allocate(count), count=count)

    async def TsoStream(
        self, requests: AsyncIterator[pb.TsoRequest], ctx: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TsoResponse]:
        async for req in requests:
            count = req.count or 1
            yield pb.TsoResponse(first=await self._allocate(count), count=count)

    def OpenTransaction(
        self, req: pb.OpenTransactionRequest, ctx: grpc.ServicerContext
    ) -> pb.EpochInfo:
        check_not_reserved(req.job)  # correction sets' epochs are opened by BeginCorrections
        if req.epoch == 0:
            return epoch_to_pb(
                self.epochs.open_batch(req.job, req.batch, req.owner, req.lock_ttl_ms)
            )
        opened = self.epochs.open(req.job, req.epoch, req.lock_ttl_ms)
        # Read after the open: a rebuild requested before it is seen by this epoch.
        return epoch_to_pb(opened, self.revisions.pending_rebuild(req.job))

    def CommitTransaction(
        self, req: pb.CommitTransactionRequest, ctx: grpc.ServicerContext
    ) -> pb.EpochInfo:
        return epoch_to_pb(self.epochs.commit(req.job, req.epoch, req.start_ts, req.metadata))

    def AbortTransaction(
        self, req: pb.AbortTransactionRequest, ctx: grpc.ServicerContext
    ) -> pb.EpochInfo:
        return epoch_to_pb(self.epochs.abort(req.job, req.epoch, req.start_ts))

    def HeartbeatTransaction(
        self, req: pb.HeartbeatTransactionRequest, ctx: grpc.ServicerContext
    ) -> pb.EpochInfo:
        return epoch_to_pb(self.epochs.heartbeat(req.job, req.epoch, req.start_ts, req.ttl_ms))

    def GetEpoch(self, req: pb.GetEpochRequest, ctx: grpc.ServicerContext) -> pb.EpochInfo:
        return epoch_to_pb(self.epochs.get(req.job, req.epoch))

    def Status(self, req: pb.StatusRequest, ctx: grpc.ServicerContext) -> pb.StatusResponse:
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

    # ------------------------------------------------------------------ jobs and barriers

    def _job_pb(self, rec: JobRecord) -> pb.JobInfo:
        last = self.epochs.last_committed(rec.job)
        run = self.registry.run_of(rec.job)
        state = self.registry.state_of(run, last, int(time.time() * 1000))
        return pb.JobInfo(
            state=str(state),
            last_error=run.error if run else "",
            reported_wall_ms=run.wall_ms if run else 0,
            job=rec.job,
            sink=rec.sink,
            sources=list(rec.sources),
            kind=rec.kind,
            query=rec.query,
            strategy=rec.strategy,
            registered_wall_ms=rec.registered_wall_ms,
            last_committed=last,
        )

    def RegisterJob(self, req: pb.RegisterJobRequest, ctx: grpc.ServicerContext) -> pb.JobInfo:
        rec = self.registry.register(
            req.job, req.sink, list(req.sources), req.kind or "sink", req.query, req.strategy
        )
        return self._job_pb(rec)

    def UnregisterJob(self, req: pb.UnregisterJobRequest, ctx: grpc.ServicerContext) -> pb.JobInfo:
        return self._job_pb(self.registry.unregister(req.job))

    def ReportJob(self, req: pb.ReportJobRequest, ctx: grpc.ServicerContext) -> pb.JobInfo:
        return self._job_pb(self.registry.report(req.job, req.state, req.error, req.ttl_ms))

    def ReleaseJob(
        self, req: pb.ReleaseJobRequest, ctx: grpc.ServicerContext
    ) -> pb.ReleaseJobResponse:
        settled, left = self.gc.release_job(req.job, req.owner)
        return pb.ReleaseJobResponse(
            released=settled is not None,
            epoch=epoch_to_pb(settled) if settled is not None else None,
            holds=[pb.GcHold(kind=h.kind, name=h.name, ts=h.ts) for h in left],
        )

    def Topology(self, req: pb.TopologyRequest, ctx: grpc.ServicerContext) -> pb.TopologyResponse:
        topo = self.registry.topology()
        tables = []
        for info in self.store.list_tables():
            w = topo.writer_of(info.name)
            tables.append(pb.TableNode(table=info.name, kind=info.kind, writer=w.job if w else ""))
        return pb.TopologyResponse(
            jobs=[self._job_pb(r) for r in sorted(topo.jobs.values(), key=lambda r: r.job)],
            tables=tables,
        )

    def Snapshot(self, req: pb.SnapshotRequest, ctx: grpc.ServicerContext) -> pb.SnapshotResponse:
        plan = self.planner.snapshot(list(req.tables), req.mode, req.barrier)
        return pb.SnapshotResponse(
            barrier=plan.barrier,
            mode=plan.mode,
            reads=_reads(plan.reads),
            barrier_wall_ms=plan.barrier_wall_ms,
        )

    def PlanBarriers(
        self, req: pb.PlanBarriersRequest, ctx: grpc.ServicerContext
    ) -> pb.PlanBarriersResponse:
        plans = self.planner.plan_barriers(req.job, req.limit, req.after, req.upto)
        return pb.PlanBarriersResponse(
            barriers=[
                pb.BarrierPlan(barrier=b.barrier, reads=_reads(b.reads), wall_ms=b.wall_ms)
                for b in plans.barriers
            ],
            last_committed=plans.last_committed,
            newest_barrier=plans.newest_barrier,
        )

    def Delay(self, req: pb.DelayRequest, ctx: grpc.ServicerContext) -> pb.DelayResponse:
        newest, rows = delay_report(self.store, self.planner.barriers, self.registry)
        return pb.DelayResponse(
            newest_barrier=newest,
            tables=[
                pb.TableDelay(
                    table=d.table,
                    kind=d.kind,
                    job=d.job,
                    barrier=d.barrier,
                    barriers_behind=d.barriers_behind,
                    barrier_lag_ms=d.barrier_lag_ms,
                    e2e_delay_ms=d.e2e_delay_ms,
                    job_state=d.job_state,
                    path=[
                        pb.JobContribution(
                            table=c.table,
                            job=c.job,
                            barrier=c.barrier,
                            own_ms=c.own_ms,
                            wait_ms=c.wait_ms,
                            bottleneck=c.bottleneck,
                            estimated=c.estimated,
                        )
                        for c in d.path
                    ],
                )
                for d in rows
            ],
        )

    # ------------------------------------------------------------------ GC and leases

    def AcquireLease(self, req: pb.AcquireLeaseRequest, ctx: grpc.ServicerContext) -> pb.Lease:
        return lease_to_pb(self.gc.acquire_lease(req.holder, req.ts, req.ttl_ms))

    def RenewLease(self, req: pb.RenewLeaseRequest, ctx: grpc.ServicerContext) -> pb.Lease:
        return lease_to_pb(self.gc.renew_lease(req.id, req.ttl_ms, req.ts))

    def ReleaseLease(
        self, req: pb.ReleaseLeaseRequest, ctx: grpc.ServicerContext
    ) -> pb.ReleaseLeaseResponse:
        return pb.ReleaseLeaseResponse(existed=self.gc.release_lease(req.id))

    def GcStatus(self, req: pb.GcStatusRequest, ctx: grpc.ServicerContext) -> pb.GcStatusResponse:
        resp = self._gc_status(req)
        if not caller_is_admin(self.roles, ctx):
            redact_gc_status(resp)  # a lease id is its taker's capability
        return resp

    def _gc_status(self, req: pb.GcStatusRequest) -> pb.GcStatusResponse:
        st = self.gc.status(req.page_size, req.page_token, req.holder)
        return pb.GcStatusResponse(
            enabled=st.enabled,
            safepoint=st.safepoint,
            retention_s=st.retention_s,
            interval_s=st.interval_s,
            holds=[pb.GcHold(kind=h.kind, name=h.name, ts=h.ts) for h in st.holds],
            leases=[lease_to_pb(x) for x in st.leases.leases],
            lease_count=st.leases.count,
            next_page_token=st.leases.next_after,
            total_leases=st.lease_count,
            oldest_lease_ts=st.oldest_lease_ts,
            # The wire message has the dataclass's fields (test_public_api checks it).
            progress=pb.GcProgress(**dataclasses.asdict(st.progress)),
            now_ms=self.tso.physical_ms(),
        )

    # ------------------------------------------------------------------ revisions

    def _revision_pb(self, r: RevisionRecord) -> pb.Revision:
        return revision_to_pb(r, self.revisions.barrier_of(r))

    def Revise(self, req: pb.ReviseRequest, ctx: grpc.ServicerContext) -> pb.Revision:
        return self._revision_pb(
            self.revisions.rollback(
                req.table, req.to_ts, req.to_barrier, req.dry_run, req.who, req.key
            )
        )

    def BeginCorrections(
        self, req: pb.BeginCorrectionsRequest, ctx: grpc.ServicerContext
    ) -> pb.BeginCorrectionsResponse:
        rec, epoch = self.revisions.begin_corrections(req.table, req.mode, req.who, req.lock_ttl_ms)
        return pb.BeginCorrectionsResponse(
            revision=self._revision_pb(rec), epoch=epoch_to_pb(epoch)
        )

    def Rebuild(self, req: pb.RebuildRequest, ctx: grpc.ServicerContext) -> pb.Revision:
        return self._revision_pb(self.revisions.request_rebuild(req.view, req.who))

    def GetRevision(self, req: pb.GetRevisionRequest, ctx: grpc.ServicerContext) -> pb.Revision:
        return self._revision_pb(self.revisions.get(req.id))

    def ListRevisions(
        self, req: pb.ListRevisionsRequest, ctx: grpc.ServicerContext
    ) -> pb.ListRevisionsResponse:
        return pb.ListRevisionsResponse(
            revisions=[self._revision_pb(r) for r in self.revisions.records(req.table, req.limit)]
        )
