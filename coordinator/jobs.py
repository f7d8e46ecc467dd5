"""The job protocol: what a sink or a view job says to the coordinator, with typed answers.

    jobs = client.jobs                        # a JobClient on the client's channel
    jobs.register_job("events", sink="events")
    e = jobs.open_transaction("events", 0, batch="q:0", owner="run-1")
    if e.state is EpochState.COMMITTED: ...   # a replay: skip the batch
    jobs.commit_transaction("events", e.epoch, e.start_ts, metadata)

An epoch is one Percolator transaction per (job, epoch): ``open_transaction`` takes its start_ts
and prewrites its primary, the job prewrites its rows as secondaries, ``commit_transaction``
commits the primary (the moment of truth). Every call is idempotent per (job, epoch). Most users
never call this directly: ``spark_sink.EpochWriter`` and ``MaterializedView`` do, through
``coordinator.epoch_attempt.EpochAttempt``.

The plain result types here (``EpochState``, ``TableRead``, ``BarrierPlan``, ``BarrierPlans``) are
also what the server side computes, so client and server speak one vocabulary.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvstore.errors import NotFound
from kvstore.remote import RpcCaller
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb
from snapview_proto.snapview.v1 import coordinator_pb2_grpc as cpb_grpc

if TYPE_CHECKING:
    from coordinator.revisions import Revision


class EpochState(enum.Enum):
    """Where one attempt at (job, epoch) stands. The values are what the server stores."""

    PREWRITE = "prewrite"  # open: the job may prewrite secondaries under start_ts
    COMMITTED = "committed"  # final: a replay of the epoch skips it
    ABORTED = "aborted"  # final for this attempt: reopening the epoch starts a new one

    def __str__(self) -> str:
        return self.value

    @classmethod
    def from_pb(cls, state: cpb.EpochState) -> EpochState:
        return _FROM_PB[state]

    def to_pb(self) -> cpb.EpochState:
        return _TO_PB[self]


_TO_PB = {
    EpochState.PREWRITE: cpb.EPOCH_PREWRITE,
    EpochState.COMMITTED: cpb.EPOCH_COMMITTED,
    EpochState.ABORTED: cpb.EPOCH_ABORTED,
}
_FROM_PB = {v: k for k, v in _TO_PB.items()}


def downstream_tables(table: str, writers: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """The tables computed from ``table`` by ``writers`` ((sink, sources) of each job, in the
    order to visit them), directly or through other sinks among them, upstream first: each after
    every table of the answer it reads. One rule for the server's topology and the client."""
    found: list[str] = []
    frontier = [table]
    while frontier:
        t = frontier.pop()
        for sink, sources in writers:
            if t in sources and sink not in found and sink != table:
                found.append(sink)
                frontier.append(sink)
    reads = {sink: sources for sink, sources in writers}
    depth: dict[str, int] = {}

    def depth_of(t: str, seen: frozenset[str] = frozenset()) -> int:
        if t not in depth:
            ups = [s for s in reads.get(t, ()) if s in found and s not in seen]
            depth[t] = 1 + max((depth_of(s, seen | {t}) for s in ups), default=0)
        return depth[t]

    return sorted(found, key=lambda t: (depth_of(t), t))


@dataclass(frozen=True)
class EpochInfo:
    """One attempt at (job, epoch), as the coordinator recorded it."""

    job: str
    epoch: int
    state: EpochState
    start_ts: int
    commit_ts: int = 0  # 0 unless COMMITTED
    primary_key: bytes = b""  # the epoch transaction's primary, which the job's rows point at
    attempt: int = 1  # 1 for the first attempt; reopening an epoch left in PREWRITE adds one
    metadata: str = ""  # what the job stored with the commit (e.g. its sources' offsets)
    batch: str = ""  # auto-numbered epochs: the batch the epoch is for
    owner: str = ""  # auto-numbered epochs: the run that opened the attempt
    # A view job's epoch: a rebuild requested of the view and not done yet (its revision id).
    # The epoch recomputes the view and names it in its metadata (``{"rebuild": id}``).
    rebuild: int = 0

    @property
    def committed(self) -> bool:
        return self.state is EpochState.COMMITTED

    @classmethod
    def from_pb(cls, m: cpb.EpochInfo) -> EpochInfo:
        return cls(
            job=m.job,
            epoch=m.epoch,
            state=EpochState.from_pb(m.state),
            start_ts=m.start_ts,
            commit_ts=m.commit_ts,
            primary_key=m.primary_key,
            attempt=m.attempt,
            metadata=m.metadata,
            batch=m.batch,
            owner=m.owner,
            rebuild=m.rebuild,
        )


class JobState(enum.StrEnum):
    """A job's liveness as the coordinator sees it, from the job's own reports
    (``JobClient.report_job``; a MaterializedView reports by itself).

    RUNNING: it reported running within its TTL. LOST: it reported running, then stopped
    reporting (its process died or hangs). FAILED: it reported a failure (``last_error``).
    STOPPED: it stopped cleanly. NOT_STARTED: registered, never reported, never committed (a view
    built but never started). UNKNOWN: it commits but does not report (a plain EpochWriter)."""

    RUNNING = "running"
    LOST = "lost"
    FAILED = "failed"
    STOPPED = "stopped"
    NOT_STARTED = "not_started"
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, raw: str) -> JobState:
        try:
            return cls(raw)
        except ValueError:
            return cls.UNKNOWN

    @property
    def healthy(self) -> bool:
        return self is JobState.RUNNING


@dataclass(frozen=True)
class JobInfo:
    """A registered job: the one writer of ``sink``, reading ``sources``."""

    job: str
    sink: str
    sources: tuple[str, ...] = ()
    kind: str = "sink"  # "view" (a MaterializedView job: epochs are barriers) or "sink"
    query: str = ""
    strategy: str = ""
    registered_wall_ms: int = 0
    last_committed: int = 0  # the job's newest committed epoch (a barrier for a view job)
    state: JobState = JobState.UNKNOWN  # liveness, from the job's own reports (see JobState)
    last_error: str = ""  # what the job reported when it failed
    reported_wall_ms: int = 0  # when it last reported (0: never)

    @classmethod
    def from_pb(cls, m: cpb.JobInfo) -> JobInfo:
        return cls(
            job=m.job,
            sink=m.sink,
            sources=tuple(m.sources),
            kind=m.kind,
            query=m.query,
            strategy=m.strategy,
            registered_wall_ms=m.registered_wall_ms,
            last_committed=m.last_committed,
            state=JobState.parse(m.state),
            last_error=m.last_error,
            reported_wall_ms=m.reported_wall_ms,
        )


@dataclass(frozen=True)
class JobRelease:
    """What ``JobClient.release_job`` did: the open epoch it settled (None: the job had none
    open) and what the job still holds, each ``(ts, why)``: its committed read position, held
    while the job stays registered (the safepoint passes it once the job is unregistered)."""

    job: str
    epoch: EpochInfo | None
    holds: tuple[tuple[int, str], ...] = ()

    @property
    def released(self) -> bool:
        return self.epoch is not None


@dataclass(frozen=True)
class TableRead:
    """Where one table is read: at ``read_ts``; ``changed`` (in a BarrierPlan) says whether it
    may differ from its contents at the plan's previous barrier (False only when provably
    not)."""

    table: str
    read_ts: int
    changed: bool = True


@dataclass(frozen=True)
class BarrierPlan:
    """One barrier a view job may process: every source's read ts there."""

    barrier: int
    reads: tuple[TableRead, ...]
    wall_ms: int = 0


@dataclass
class BarrierPlans:
    """The barriers a view job may process next, oldest first, none skipped."""

    barriers: list[BarrierPlan] = field(default_factory=list)
    last_committed: int = 0
    newest_barrier: int = 0

    @classmethod
    def from_pb(cls, m: cpb.PlanBarriersResponse) -> BarrierPlans:
        return cls(
            barriers=[
                BarrierPlan(
                    b.barrier,
                    tuple(TableRead(r.table, r.read_ts, r.changed) for r in b.reads),
                    b.wall_ms,
                )
                for b in m.barriers
            ],
            last_committed=m.last_committed,
            newest_barrier=m.newest_barrier,
        )


FEED = "feed"  # EpochMetadata.sources' name for a snapview change feed (see EpochMetadata)


@dataclass(frozen=True)
class EpochMetadata:
    """What a job commits with an epoch (``EpochInfo.metadata``, JSON): the contract between
    whoever writes an epoch and whoever resumes from it.

    ``sources`` says how far the epoch read each input: a view job's epoch names each source
    table with its read ts at the barrier; a sink fed by a snapview change feed names ``FEED``
    with a ts T such that every change of the feed it consumed has ``_commit_ts`` <= T and no
    change of that feed lies in (T, the end of its batch] (``spark.readStream ...
    .option("resumeFromJob", job)`` resumes there). ``fields`` are informational (batch, rows,
    strategy, ...)."""

    sources: dict[str, int] = field(default_factory=dict)
    fields: dict[str, object] = field(default_factory=dict)

    @property
    def feed(self) -> int | None:
        """The change-feed high-water this epoch recorded, or None."""
        ts = self.sources.get(FEED)
        return None if ts is None else int(ts)

    def to_json(self) -> str:
        return json.dumps({**self.fields, "sources": self.sources})

    @classmethod
    def from_json(cls, raw: str) -> EpochMetadata:
        d = json.loads(raw) if raw else {}
        sources = d.pop("sources", None) or {}
        return cls(sources=dict(sources), fields=d)


@dataclass(frozen=True)
class BegunCorrections:
    """``JobClient.begin_corrections``: the correction set's revision record (running) and its
    open epoch (job ``revision/<id>``)."""

    revision: Revision
    epoch: EpochInfo


class JobClient:
    """The job protocol over a client's channel (``client.jobs``). Thread-safe; transport
    failures are retried by the client's RetryPolicy, which is safe because every call is
    idempotent per (job, epoch)."""

    def __init__(self, stub: cpb_grpc.CoordinatorStub, rpc: RpcCaller) -> None:
        self._stub = stub
        self._rpc = rpc

    # ------------------------------------------------------------------ epochs

    def open_transaction(
        self, job: str, epoch: int, lock_ttl_ms: int = 0, batch: str = "", owner: str = ""
    ) -> EpochInfo:
        """Open (job, epoch) for prewriting. ``epoch`` 0 picks the epoch for ``batch`` (auto
        numbering: the job's newest epoch if it is this batch's, else the next one).

        A COMMITTED answer means the epoch is done: skip it. A PREWRITE answer is a fresh
        attempt (an older attempt left in PREWRITE was rolled back first), or, with auto
        numbering, the same owner's attempt to attach to."""
        req = cpb.OpenTransactionRequest(
            job=job, epoch=epoch, lock_ttl_ms=lock_ttl_ms, batch=batch, owner=owner
        )
        return EpochInfo.from_pb(self._rpc.unary(self._stub.OpenTransaction, req))

    def commit_transaction(
        self, job: str, epoch: int, start_ts: int, metadata: str = ""
    ) -> EpochInfo:
        """Commit the attempt ``start_ts`` of (job, epoch), storing ``metadata`` with it.
        Idempotent: committing a committed attempt returns it again. Raises Aborted if the
        attempt was rolled back (a newer attempt took over, or its locks expired)."""
        req = cpb.CommitTransactionRequest(
            job=job, epoch=epoch, start_ts=start_ts, metadata=metadata
        )
        return EpochInfo.from_pb(self._rpc.unary(self._stub.CommitTransaction, req))

    def abort_transaction(self, job: str, epoch: int, start_ts: int) -> EpochInfo:
        """Roll the attempt back, primary first, so none of its rows can ever become visible."""
        req = cpb.AbortTransactionRequest(job=job, epoch=epoch, start_ts=start_ts)
        return EpochInfo.from_pb(self._rpc.unary(self._stub.AbortTransaction, req))

    def heartbeat_transaction(self, job: str, epoch: int, start_ts: int, ttl_ms: int) -> EpochInfo:
        """Extend the attempt's lock TTL to ``ttl_ms`` from now (its locks stay alive)."""
        req = cpb.HeartbeatTransactionRequest(
            job=job, epoch=epoch, start_ts=start_ts, ttl_ms=ttl_ms
        )
        return EpochInfo.from_pb(self._rpc.unary(self._stub.HeartbeatTransaction, req))

    def begin_corrections(
        self, table: str, mode: str, who: str, lock_ttl_ms: int
    ) -> BegunCorrections:
        """Record a correction set of root table ``table`` (``mode`` upsert or delete, by
        ``who``) and open its epoch (job ``revision/<id>``): prewrite the rows as secondaries of
        the epoch's primary, then commit it (the revision is DONE in the same transaction) or
        abort it. Returns the revision (running) and the open epoch. Sent once, never retried: a
        repeat would record a second correction set (the first one's epoch then expires
        unused). ``Client.revise(table, corrections=...)`` is the public way in."""
        from coordinator.revisions import Revision

        req = cpb.BeginCorrectionsRequest(table=table, mode=mode, who=who, lock_ttl_ms=lock_ttl_ms)
        begun = self._rpc.once(self._stub.BeginCorrections, req, self._rpc.policy.rpc_timeout_s)
        return BegunCorrections(Revision.from_pb(begun.revision), EpochInfo.from_pb(begun.epoch))

    def release_job(self, job: str, owner: str = "") -> JobRelease:
        """Settle ``job``'s open epoch now, through its primary (a committed primary stays
        committed, anything else is rolled back), so it holds nothing: for an operator whose
        job went away (``snapview jobs release``) or a writer stopping mid-epoch. With ``owner``,
        only an epoch that owner opened. Idempotent; raises NotFound for a job that never opened
        an epoch. Without this, an open epoch nobody renews is settled once its hold lapses
        (``snapview serve --epoch-ttl``)."""
        req = cpb.ReleaseJobRequest(job=job, owner=owner)
        r = self._rpc.unary(self._stub.ReleaseJob, req)
        return JobRelease(
            job,
            EpochInfo.from_pb(r.epoch) if r.released else None,
            tuple((h.ts, h.name) for h in r.holds),
        )

    def get_epoch(self, job: str, epoch: int = 0) -> EpochInfo:
        """The record of (job, epoch); epoch 0: the job's newest. Raises NotFound if none."""
        req = cpb.GetEpochRequest(job=job, epoch=epoch)
        return EpochInfo.from_pb(self._rpc.unary(self._stub.GetEpoch, req))

    def last_committed_metadata(self, job: str) -> EpochMetadata | None:
        """The metadata of sink job ``job``'s newest committed epoch, or None if it has none
        (or its newest two epochs are not committed: the newest may be open, the one before it
        is then committed unless the job never committed). For a job whose epochs are numbered
        1, 2, ... (a sink); a view job's epochs are barriers: see
        ``spark_sink.ivm.strategy.last_view_epoch``."""
        try:
            info = self.get_epoch(job, 0)
        except NotFound:
            return None
        for _ in range(2):
            if info.committed and info.metadata:
                return EpochMetadata.from_json(info.metadata)
            if info.epoch <= 1:
                return None
            info = self.get_epoch(job, info.epoch - 1)
        return None

    # ------------------------------------------------------------------ registry and barriers

    def register_job(
        self,
        job: str,
        sink: str,
        sources: Sequence[str] = (),
        kind: str = "sink",
        query: str = "",
        strategy: str = "",
    ) -> JobInfo:
        """Register ``job`` as the one writer of ``sink``, reading ``sources``. A second writer
        raises SecondWriter; a cycle raises TopologyCycle. Idempotent for the same job."""
        req = cpb.RegisterJobRequest(
            job=job, sink=sink, sources=list(sources), kind=kind, query=query, strategy=strategy
        )
        return JobInfo.from_pb(self._rpc.unary(self._stub.RegisterJob, req))

    def unregister_job(self, job: str) -> JobInfo:
        """Remove ``job`` from the registry (its sink is free for another writer)."""
        req = cpb.UnregisterJobRequest(job=job)
        return JobInfo.from_pb(self._rpc.unary(self._stub.UnregisterJob, req))

    def report_job(
        self, job: str, state: JobState, error: str = "", ttl_ms: int = 10_000
    ) -> JobInfo:
        """Tell the coordinator how ``job`` is: RUNNING (a heartbeat that holds for ``ttl_ms``;
        past it the job shows as LOST), FAILED with ``error``, or STOPPED. Raises NotFound once
        the job is unregistered (dropped): the job should then stop."""
        req = cpb.ReportJobRequest(job=job, state=str(state), error=error, ttl_ms=ttl_ms)
        return JobInfo.from_pb(self._rpc.unary(self._stub.ReportJob, req))

    def list_jobs(self) -> list[JobInfo]:
        """Every registered job with its state and last committed epoch, by name."""
        topo = self._rpc.unary(self._stub.Topology, cpb.TopologyRequest())
        return [JobInfo.from_pb(j) for j in topo.jobs]

    def plan_barriers(
        self, job: str, limit: int = 0, after: int = 0, upto: int = 0
    ) -> BarrierPlans:
        """The barriers view job ``job`` may process next, oldest first: after ``after`` (0:
        its last committed epoch), up to ``upto`` (0: no bound), at most ``limit`` (0: the
        server's default). The plan stops before the first barrier a source lacks."""
        req = cpb.PlanBarriersRequest(job=job, limit=limit, after=after, upto=upto)
        return BarrierPlans.from_pb(self._rpc.unary(self._stub.PlanBarriers, req))
