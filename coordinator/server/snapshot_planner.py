"""Consistent-snapshot planning and barrier plans for view jobs.

A **consistent snapshot** of a set of tables is a barrier T that every one of them has, with each
table's read ts at T (root: T; view: the commit ts of its epoch for T). Reading every table at its
read ts shows one state of the sources: the state as of T (stale snapshot isolation).

- mode ``snapshot`` (default): the newest such barrier, or the one asked for;
- mode ``latest``: every table at one fresh timestamp, i.e. each at its own newest version. Views
  then reflect different barriers; this is what ordinary streaming shows, kept for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.errors import BarrierNotReached
from coordinator.jobs import BarrierPlan, BarrierPlans, TableRead
from coordinator.server.barriers import Barriers
from coordinator.server.epochs import EpochManager
from coordinator.server.registry import Registry, Topology
from coordinator.server.tso import TimestampOracle
from kvstore.errors import InvalidArgument, NotFound
from kvstore.storage import Reader
from kvstore.store import LocalStore

SNAPSHOT, LATEST = "snapshot", "latest"
MODES = (SNAPSHOT, LATEST)
MAX_BARRIER_SEARCH = 10_000  # how far back to look for a barrier every table has
DEFAULT_PLAN_LIMIT = 64


@dataclass(frozen=True)
class SnapshotPlan:
    barrier: int
    mode: str
    reads: tuple[TableRead, ...]
    barrier_wall_ms: int = 0


class _Tables:
    """Per-call view of the tables involved: which are views, and each one's newest barrier.

    The root tables' resolved timestamps are taken by ``resolve_roots`` before the caller opens
    its read transaction, never inside it: ``LocalStore.resolved_ts`` takes a TSO timestamp
    (which may write the TSO's window through the writer) and opens a read transaction of its
    own after it. Inside another read transaction either one waits for a map resize that waits
    for that transaction: a deadlock (issue 24). Taken before, the caller's transaction also
    sees every commit at or below them."""

    def __init__(self, planner: SnapshotPlanner, names: list[str]) -> None:
        self.p = planner
        self.topo: Topology = planner.registry.topology()
        self.names = names
        self.view: dict[str, bool] = {}
        for n in names:
            info = planner.store.catalog.get(n)  # TableNotFound names it
            self.view[n] = Barriers.is_view_table(n, info.kind, self.topo)
        self._resolved: dict[str, int] = {}

    def resolve_roots(self) -> None:
        """Take every root table's resolved ts (no read transaction may be open)."""
        for n in self.names:
            if not self.view[n]:
                self._resolved[n] = self.p.store.resolved_ts(n)

    def resolved(self, table: str) -> int:
        return self._resolved[table]  # a KeyError: resolve_roots was not called first

    def newest(self, reader: Reader, table: str) -> int:
        if self.view[table]:
            return Barriers.view_newest(reader, table)
        return self.p.barriers.root_newest(table, self.resolved(table))

    def read_at(self, reader: Reader, table: str, barrier: int) -> int | None:
        """The table's read ts at ``barrier``, or None if it does not have it."""
        if self.view[table]:
            v = Barriers.view_version(reader, table, barrier)
            return None if v is None else v.read_ts
        return barrier if self.resolved(table) >= barrier else None


class SnapshotPlanner:
    def __init__(
        self,
        store: LocalStore,
        tso: TimestampOracle,
        barriers: Barriers,
        registry: Registry,
        epochs: EpochManager,
    ) -> None:
        self.store, self.tso, self.barriers = store, tso, barriers
        self.registry, self.epochs = registry, epochs

    def snapshot(self, tables: list[str], mode: str = SNAPSHOT, barrier: int = 0) -> SnapshotPlan:
        """Plan a consistent read of ``tables`` (see the module docstring). Raises
        BarrierNotReached (FAILED_PRECONDITION) when no barrier is common to all of them yet,
        or a table lacks the barrier asked for."""
        mode = mode or SNAPSHOT
        if mode not in MODES:
            raise InvalidArgument(f"snapshot mode {mode!r} is not one of {MODES}")
        if not tables:
            raise InvalidArgument("a snapshot needs at least one table")
        names = list(dict.fromkeys(tables))
        t = _Tables(self, names)
        if mode == LATEST:
            if barrier:
                raise InvalidArgument("a barrier can only be given in mode snapshot")
            ts = self.tso.now()
            return SnapshotPlan(0, LATEST, tuple(TableRead(n, ts) for n in names))
        t.resolve_roots()
        with self.store.storage.read_txn() as r:
            if barrier:
                if not self.barriers.is_issued(barrier):
                    raise NotFound(
                        f"barrier {barrier} was never issued or is older than the retention "
                        f"(newest barrier: {self.barriers.newest()})"
                    )
                reads = []
                for n in names:
                    read_ts = t.read_at(r, n, barrier)
                    if read_ts is None:
                        raise BarrierNotReached(
                            f"table {n!r} has no version at barrier {barrier} (its newest is "
                            f"{t.newest(r, n)})"
                        )
                    reads.append(TableRead(n, read_ts))
                return SnapshotPlan(barrier, SNAPSHOT, tuple(reads), self.barriers.wall_ms(barrier))
            newest = {n: t.newest(r, n) for n in names}
            cap = min(newest.values())
            if cap:
                views = [n for n in names if t.view[n]]
                for b in self.barriers.issued_at_or_below(cap, MAX_BARRIER_SEARCH):
                    found = [t.read_at(r, n, b) for n in names]
                    at = [x for x in found if x is not None]
                    if len(at) == len(names):  # every table has barrier b
                        return SnapshotPlan(
                            b,
                            SNAPSHOT,
                            tuple(TableRead(n, x) for n, x in zip(names, at, strict=True)),
                            self.barriers.wall_ms(b),
                        )
                    if not views:
                        break
        behind = ", ".join(f"{n} at {newest[n] or 'none'}" for n in names)
        raise BarrierNotReached(
            f"no barrier is common to tables {names} yet (newest barriers: {behind}; "
            f"newest issued: {self.barriers.newest()})"
        )

    def plan_barriers(
        self, job: str, limit: int = 0, after: int = 0, upto: int = 0
    ) -> BarrierPlans:
        """The barriers a view job may process next, oldest first, each with every source's
        read ts and whether the source changed since the barrier before.

        ``after`` 0 means after the job's last committed epoch; a job that never committed gets
        one barrier, the newest every source has (it starts there). The plan stops before the
        first barrier some source does not have yet: barriers are processed in order, none
        skipped."""
        rec = self.registry.get(job)
        if not rec.is_view:
            raise InvalidArgument(f"job {job!r} writes {rec.sink!r} as a sink, not a view")
        limit = limit or DEFAULT_PLAN_LIMIT
        last = self.epochs.last_committed(job)
        after = after or last
        out = BarrierPlans(last_committed=last, newest_barrier=self.barriers.newest())
        sources = list(rec.sources)
        t = _Tables(self, sources)
        t.resolve_roots()
        with self.store.storage.read_txn() as r:
            if not after:
                if not sources:
                    cands = self.barriers.issued_at_or_below(upto or out.newest_barrier, 1)
                else:
                    cap = min(t.newest(r, s) for s in sources)
                    cands = self.barriers.issued_at_or_below(min(cap, upto) if upto else cap, 1)
            else:
                cands = self.barriers.issued_after(after, upto, limit)
            prev = after
            for b in cands:
                reads = []
                for s in sources:
                    ts = t.read_at(r, s, b)
                    if ts is None:
                        return out
                    reads.append(TableRead(s, ts, self._changed(r, t, s, prev, b)))
                out.barriers.append(BarrierPlan(b, tuple(reads), self.barriers.wall_ms(b)))
                prev = b
        return out

    def _changed(self, reader: Reader, t: _Tables, table: str, prev: int, barrier: int) -> bool:
        """Conservative: True unless the table provably has the same contents at ``barrier``
        as at ``prev``."""
        if not prev:
            return True
        if t.view[table]:
            v = Barriers.view_version(reader, table, barrier)
            return v is None or v.changed or v.prev != prev
        _, n = self.store.change_boundary(table, prev, barrier, 1, reader=reader)
        return n > 0
