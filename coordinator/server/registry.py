"""The job registry: which job writes which table from which sources (the topology).

Two rules keep the lineage a forest of one-writer tables, which is what makes a view's version at
a barrier well defined:

- **one writer per table**: a job asking to write a table that another registered job writes is
  refused with ``SecondWriter`` (ALREADY_EXISTS), naming both jobs;
- **no cycles**: a job whose sink is one of its sources, or feeds one of them through other jobs,
  is refused with ``TopologyCycle`` (FAILED_PRECONDITION), naming the cycle.

Registrations live in the ``meta`` CF, so they survive restarts. A job registers again on every
start with the same sink (its sources may change); it is removed only by ``unregister``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.errors import SecondWriter, TopologyCycle
from coordinator.jobs import JobState, downstream_tables
from coordinator.server import drops
from coordinator.server.meta import (
    JOB_KINDS,
    JOB_RECORD_PREFIX,
    MAX_TEXT_BYTES,
    SINK,
    JobRecord,
    JobRun,
    check_job_name,
    check_label,
    job_dropped_key,
    job_record_key,
    job_run_key,
)
from kvstore.catalog import Catalog
from kvstore.errors import FailedPrecondition, InvalidArgument, NotFound, cut
from kvstore.failpoints import armed
from kvstore.group_commit import WriteContext
from kvstore.storage import Reader
from kvstore.store import LocalStore
from kvstore.table_info import STATE, TableInfo, owner_of_state

MAX_SOURCES = 256  # tables one job reads
REPORTED_STATES = ("running", "failed", "stopped")
DEFAULT_REPORT_TTL_MS = 10_000
MAX_REPORT_TTL_MS = 3_600_000
MAX_ERROR_CHARS = 4000
log = logging.getLogger("snapview.registry")


def check_not_reserved(job: str) -> None:
    """Refuse a job name the coordinator keeps for itself (FAILED_PRECONDITION)."""
    if job.startswith(Registry.RESERVED_PREFIXES):
        raise FailedPrecondition(
            f"job name {job!r}: names starting with {' or '.join(Registry.RESERVED_PREFIXES)} "
            "are the coordinator's own (revisions)"
        )


@dataclass
class Topology:
    """A consistent picture of the registry: jobs by name and the writer of each table."""

    jobs: dict[str, JobRecord] = field(default_factory=dict)

    def writer_of(self, table: str) -> JobRecord | None:
        for rec in self.jobs.values():
            if rec.sink == table:
                return rec
        return None

    def downstream(self, table: str, views_only: bool = False) -> list[str]:
        """Every table computed from ``table`` by registered jobs (only view jobs, with
        ``views_only``), directly or through other such jobs' tables, upstream first
        (``coordinator.jobs.downstream_tables``)."""
        jobs = sorted(self.jobs.values(), key=lambda r: r.job)
        return downstream_tables(
            table, [(r.sink, r.sources) for r in jobs if r.is_view or not views_only]
        )

    def path_to(self, start: str, goal: str) -> list[str] | None:
        """A lineage path start -> ... -> goal following writer jobs' sources upstream (each
        step goes from a table to one of the tables its writer reads), or None."""
        stack, seen = [[start]], set()
        while stack:
            path = stack.pop()
            table = path[-1]
            if table == goal:
                return path
            if table in seen:
                continue
            seen.add(table)
            w = self.writer_of(table)
            for src in w.sources if w else ():
                stack.append([*path, src])
        return None


class Registry:
    """``on_failed`` (the server's metrics) is called with a job's name each time its report
    turns it FAILED (a report of failed after none or another state), once the report is
    durable."""

    # Job names the coordinator keeps for itself: correction sets' epochs (coordinator.server.
    # revisions) are not registered jobs, and a user job under such a name would pass for one.
    RESERVED_PREFIXES = ("revision/", "rollback/")

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        # Called inside the write that unregisters a job (unregister, or a drop), with the job:
        # what else goes with it goes in the same transaction (RevisionManager.on_job_gone).
        self.on_unregister: list[Callable[[WriteContext, str], None]] = []
        self.on_failed: Callable[[str], None] | None = None

    @staticmethod
    def load(reader: Reader) -> Topology:
        return Topology(
            {
                k[len(JOB_RECORD_PREFIX) :].decode(): JobRecord.from_json(v)
                for k, v in reader.iter_prefix("meta", JOB_RECORD_PREFIX)
            }
        )

    @staticmethod
    def get_in(reader: Reader, job: str) -> JobRecord | None:
        raw = reader.get("meta", job_record_key(job))
        return None if raw is None else JobRecord.from_json(raw)

    def get(self, job: str) -> JobRecord:
        check_job_name(job)
        with self.store.storage.read_txn() as r:
            rec = self.get_in(r, job)
        if rec is None:
            raise NotFound(f"job {job!r} is not registered")
        return rec

    def topology(self) -> Topology:
        with self.store.storage.read_txn() as r:
            return self.load(r)

    def register(
        self,
        job: str,
        sink: str,
        sources: list[str],
        kind: str = SINK,
        query: str = "",
        strategy: str = "",
    ) -> JobRecord:
        """Register (or re-register) ``job`` writing ``sink`` from ``sources``.

        Guarantees: afterwards ``sink`` has exactly one writer, ``job``, and no table depends on
        itself; a job a drop unregistered (``coordinator.server.drops``) may open epochs again,
        from epoch 1. Checked and written in one LMDB transaction, so two racing registrations cannot
        both pass."""
        check_job_name(job)
        check_not_reserved(job)
        if kind not in JOB_KINDS:
            raise InvalidArgument(f"job {job!r}: kind {cut(kind)} is not one of {JOB_KINDS}")
        check_label(job, "strategy", strategy)
        check_label(job, "query", query, MAX_TEXT_BYTES)
        if len(sources) > MAX_SOURCES:
            raise InvalidArgument(
                f"job {job!r}: {len(sources)} sources; a job reads at most {MAX_SOURCES}"
            )
        catalog: Catalog = self.store.catalog
        if catalog.get(sink).kind == STATE:  # TableNotFound names a missing one
            raise FailedPrecondition(
                f"table {sink!r} is a state table of view {owner_of_state(sink)!r}; only that "
                "view's job writes it"
            )
        for s in sources:
            catalog.get(s)
        sources = list(dict.fromkeys(sources))

        def act(ctx: WriteContext) -> JobRecord:
            topo = self.load(ctx.reader)
            old = topo.jobs.get(job)
            if old is not None and old.sink != sink:
                raise FailedPrecondition(
                    f"job {job!r} is registered as the writer of table {old.sink!r}; it cannot "
                    f"write {sink!r} too (unregister it first)"
                )
            if old is not None and old.kind != kind:
                raise SecondWriter(
                    f"table {sink!r} is already written by job {job!r} as a {old.kind}; a "
                    f"{kind} writer under the same job name cannot write it too"
                )
            w = topo.writer_of(sink)
            if w is not None and w.job != job:
                raise SecondWriter(
                    f"table {sink!r} is already written by job {w.job!r}; job {job!r} cannot "
                    "write it too (one writer per table)"
                )
            if sink in sources:
                raise TopologyCycle(f"job {job!r} would read its own sink table {sink!r}")
            for s in sources:
                path = topo.path_to(s, sink)
                if path is not None:
                    cycle = " <- ".join([sink, *path])
                    raise TopologyCycle(
                        f"job {job!r} writing {sink!r} from {s!r} would make a cycle: {cycle}"
                    )
            rec = JobRecord(
                job,
                sink,
                tuple(sources),
                kind,
                query,
                strategy,
                old.registered_wall_ms if old else int(time.time() * 1000),
            )
            if rec != old:
                ctx.buf.put("meta", job_record_key(job), rec.to_json())
            # A job its table's drop unregistered starts anew (its epochs went with the table).
            ctx.buf.delete("meta", job_dropped_key(job))
            return rec

        return self.store.run_write(act)

    def unregister(self, job: str) -> JobRecord:
        """Forget ``job`` (its epochs stay); its sink may then get another writer."""
        check_job_name(job)

        def act(ctx: WriteContext) -> JobRecord:
            rec = self.get_in(ctx.reader, job)
            if rec is None:
                raise NotFound(f"job {job!r} is not registered")
            ctx.buf.delete("meta", job_record_key(job))
            ctx.buf.delete("meta", job_run_key(job))
            for hook in self.on_unregister:
                hook(ctx, job)
            return rec

        return self.store.run_write(act)

    # ------------------------------------------------------------------ liveness

    def report(self, job: str, state: str, error: str = "", ttl_ms: int = 0) -> JobRecord:
        """Record ``job``'s report of itself (running with a TTL, failed with an error, or
        stopped); NotFound once the job is unregistered, so a dropped view's job learns to stop."""
        check_job_name(job)
        if state not in REPORTED_STATES:
            raise InvalidArgument(
                f"job {job!r}: reported state {cut(state)} is not one of {REPORTED_STATES}"
            )
        ttl_ms = ttl_ms or DEFAULT_REPORT_TTL_MS
        if not 0 < ttl_ms <= MAX_REPORT_TTL_MS:
            raise InvalidArgument(f"job {job!r}: ttl_ms must be in (0, {MAX_REPORT_TTL_MS}]")
        run = JobRun(state, error[:MAX_ERROR_CHARS], int(time.time() * 1000), ttl_ms)

        def act(ctx: WriteContext) -> tuple[JobRecord, JobRun | None]:
            rec = self.get_in(ctx.reader, job)
            if rec is None:
                raise NotFound(f"job {job!r} is not registered (was its table dropped?)")
            before = self.run_in(ctx.reader, job)
            ctx.buf.put("meta", job_run_key(job), run.to_json())
            return rec, before

        rec, before = self.store.run_write(act)
        if state == "failed" and (before is None or before.state != "failed"):
            self._failed(job)
        return rec

    def _failed(self, job: str) -> None:
        if self.on_failed is None:
            return
        try:
            self.on_failed(job)
        except Exception:  # noqa: BLE001 - an observer must not fail the report
            log.exception("on_failed of job %r failed", job)

    @staticmethod
    def run_in(reader: Reader, job: str) -> JobRun | None:
        raw = reader.get("meta", job_run_key(job))
        return None if raw is None else JobRun.from_json(raw)

    def run_of(self, job: str) -> JobRun | None:
        with self.store.storage.read_txn() as r:
            return self.run_in(r, job)

    @staticmethod
    def state_of(run: JobRun | None, last_committed: int, now_ms: int) -> JobState:
        """The job's liveness from its last report (see coordinator.jobs.JobState)."""
        if run is None:
            return JobState.UNKNOWN if last_committed else JobState.NOT_STARTED
        if run.state == "running":
            return JobState.RUNNING if now_ms <= run.wall_ms + run.ttl_ms else JobState.LOST
        return JobState(run.state)

    # ------------------------------------------------------------------ drop

    def drop_guard(self, ctx: WriteContext, table: str, cascade: bool) -> tuple[list, list]:
        """Inside the store's drop of ``table`` (one write): the tables downstream of it (read,
        directly or through other views, by registered jobs), dependents first, and the jobs
        writing ``table`` or any of them, whose registrations are deleted here with everything
        else of them (their epochs, view versions: ``coordinator.server.drops``). Without
        ``cascade`` a table with downstream tables is refused, naming them."""
        topo = self.load(ctx.reader)
        order = topo.downstream(table)
        if order and not cascade:
            readers = sorted(r.job for r in topo.jobs.values() if table in r.sources)
            raise FailedPrecondition(
                f"table {table!r} is read by job(s) {', '.join(map(repr, readers))} (downstream: "
                f"{', '.join(map(repr, order))}); drop those first, or drop with cascade"
            )
        downstream = list(reversed(order))  # dependents first
        jobs = []
        for t in [*downstream, table]:
            w = topo.writer_of(t)
            # A view's job unregistered before the drop (drop_old_table did that) is named by
            # its newest view version: its epochs go too, unless the name writes another table.
            named = drops.forget_view_versions(ctx, t)
            writer = w.job if w is not None else named
            if w is not None:
                jobs.append(w.job)
                ctx.buf.delete("meta", job_record_key(w.job))
                ctx.buf.delete("meta", job_run_key(w.job))
                if armed("drop.keep_job_records"):
                    continue  # a planted fault (the lifecycle walk's self-test): keep the rest
                for hook in self.on_unregister:
                    hook(ctx, w.job)
            elif not named or named in topo.jobs:
                continue
            raw = ctx.reader.get("catalog", t.encode())
            drops.forget_job(ctx, writer, t, TableInfo.from_json(raw).id if raw else 0)
        return downstream, jobs
