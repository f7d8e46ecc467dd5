"""What the server reports about itself, as typed results: ``Client.status()``, ``topology()``,
``delay()`` and ``gc_status()`` (and ``iter_leases()``).

    st = client.status()                      # a ServerStatus
    st.version, st.tso, st.used_bytes
    for t in client.delay().tables:           # DelayInfo: TableDelay rows, each with its path
        print(t.table, t.barriers_behind, [p.job for p in t.path if p.bottleneck])
    gc = client.gc_status()                   # GcInfo: the safepoint, its holds, leases, progress
    gc.safepoint, gc.holds[0].kind, gc.progress.versions_removed

Each is a frozen dataclass built from the wire message inside the client (``from_pb``), as
``coordinator.jobs`` does for the job protocol, so no user of ``Client`` reads protobuf fields.
A dataclass has the fields of its message, by the same names and meanings
(``proto/snapview/v1/coordinator.proto``; ``tests/unit/test_public_api.py`` checks that none is
left out); repeated fields are tuples, nested messages dataclasses of their own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from google.protobuf.message import Message

from coordinator.jobs import JobInfo
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

D = TypeVar("D", bound="DataclassInstance")


def _from_pb(cls: type[D], m: Message, **converted: object) -> D:
    """A ``cls`` from message ``m``: each field from the message's field of the same name, but
    those given in ``converted`` (the repeated and nested ones, converted by the caller)."""
    plain = {f.name: getattr(m, f.name) for f in dataclasses.fields(cls) if f.name not in converted}
    return cls(**plain, **converted)


@dataclass(frozen=True)
class ServerStatus:
    """``Client.status()``: the server's version, clock, counts and space."""

    version: str
    tso: int  # a fresh timestamp
    tables: int
    jobs: int
    data_dir: str
    uptime_ms: int
    map_size_bytes: int  # the LMDB map (it grows by doubling when full)
    used_bytes: int
    group_commits: int
    grouped_actions: int
    # A random id the server wrote to DATA_DIR/instance at start: a process that reads the same
    # id there shares the server's host and data dir, and may open ``lmdb_path`` directly.
    instance_id: str = ""
    lmdb_path: str = ""

    @classmethod
    def from_pb(cls, m: cpb.StatusResponse) -> ServerStatus:
        return _from_pb(cls, m)


@dataclass(frozen=True)
class TableNode:
    """A table in the topology: its kind (root, view, state) and the job writing it, if any."""

    table: str
    kind: str
    writer: str = ""  # the registered job writing it ("" for none)


@dataclass(frozen=True)
class TopologyInfo:
    """``Client.topology()``: every registered job (by name) and every table."""

    jobs: tuple[JobInfo, ...]
    tables: tuple[TableNode, ...]

    @classmethod
    def from_pb(cls, m: cpb.TopologyResponse) -> TopologyInfo:
        return cls(
            jobs=tuple(JobInfo.from_pb(j) for j in m.jobs),
            tables=tuple(_from_pb(TableNode, t) for t in m.tables),
        )


@dataclass(frozen=True)
class JobContribution:
    """One table on a critical path and what its job adds; times are measured from the issue
    of the barrier of the table whose row the path belongs to (design.md §5.5)."""

    table: str
    job: str  # the job writing it ("" for a root table no job writes)
    barrier: int  # the barrier of the version used (later than asked: a fallback)
    own_ms: int  # reached the barrier minus the arrival of its last input
    wait_ms: int  # arrival of its last input minus the barrier's issue
    bottleneck: bool = False  # the largest own_ms on the path
    estimated: bool = False  # reached time not recorded: a root taken at the barrier's issue


@dataclass(frozen=True)
class TableDelay:
    """How far behind one table is, and its critical path (``path[0]`` is the table itself;
    the ``own_ms`` of the entries add up to ``e2e_delay_ms``)."""

    table: str
    kind: str
    job: str
    barrier: int  # the newest barrier the table has (0: none yet)
    barriers_behind: int  # issued barriers newer than it
    barrier_lag_ms: int  # issue time of the newest barrier minus that of ``barrier``
    e2e_delay_ms: int  # wall time the table reached ``barrier`` minus its issue time
    job_state: str = ""  # the state of the job writing it (JobInfo.state), if any
    path: tuple[JobContribution, ...] = ()

    @classmethod
    def from_pb(cls, m: cpb.TableDelay) -> TableDelay:
        return _from_pb(cls, m, path=tuple(_from_pb(JobContribution, p) for p in m.path))


@dataclass(frozen=True)
class DelayInfo:
    """``Client.delay()``: the newest barrier issued and every table's delay."""

    newest_barrier: int
    tables: tuple[TableDelay, ...]

    @classmethod
    def from_pb(cls, m: cpb.DelayResponse) -> DelayInfo:
        return cls(m.newest_barrier, tuple(TableDelay.from_pb(t) for t in m.tables))


@dataclass(frozen=True)
class GcHold:
    """Something the GC safepoint must not pass: ``kind`` retention, lease, job or revision,
    ``name`` (the lease's holder and id, the job, ...) and the ``ts`` it holds."""

    kind: str
    name: str
    ts: int


@dataclass(frozen=True)
class LeaseInfo:
    """A live reader lease as the server lists it: ``ts`` is held until ``expires_ms`` (the
    TSO's physical clock, ms). A caller without the admin role sees ``id`` hidden."""

    id: str
    holder: str
    ts: int
    ttl_ms: int
    expires_ms: int
    created_ms: int = 0


@dataclass(frozen=True)
class GcProgress:
    """What the collector has done since the server started (counters), and the pass under
    way (``pass_safepoint``, ``pass_phase``: write, changes (a full pass), changed_keys (an
    incremental one) or done). The server keeps its own as one of these too, replacing it at
    every step (``coordinator.server.gc``), so what it reports is what it counts."""

    passes: int = 0
    steps: int = 0
    versions_removed: int = 0
    records_examined: int = 0
    records_deleted: int = 0
    step_seconds: float = 0.0
    pass_safepoint: int = 0
    pass_phase: str = ""
    last_pass_seconds: float = 0.0
    last_pass_end_ms: int = 0
    epoch_records_removed: int = 0
    barriers_removed: int = 0


@dataclass(frozen=True)
class GcInfo:
    """``Client.gc_status()``: the GC safepoint, what holds it (oldest first: the first one
    binds; the leases count as one hold), GC's progress, and one page of the live leases."""

    enabled: bool  # False: ``--gc-interval 0``, the safepoint never moves by itself
    safepoint: int
    retention_s: float
    interval_s: float
    holds: tuple[GcHold, ...]
    leases: tuple[LeaseInfo, ...]  # one page, in id order
    progress: GcProgress
    now_ms: int  # the TSO's physical clock, to read ``LeaseInfo.expires_ms`` against
    lease_count: int  # live leases of the holder asked for (every holder's if none)
    next_page_token: str  # '': ``leases`` is the last page
    total_leases: int  # live leases on the server, whatever the holder
    oldest_lease_ts: int = 0  # the ts the oldest live lease holds (0: none)

    @classmethod
    def from_pb(cls, m: cpb.GcStatusResponse) -> GcInfo:
        return _from_pb(
            cls,
            m,
            holds=tuple(_from_pb(GcHold, h) for h in m.holds),
            leases=tuple(_from_pb(LeaseInfo, x) for x in m.leases),
            progress=_from_pb(GcProgress, m.progress),
        )
