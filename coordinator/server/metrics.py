"""Prometheus metrics of ``snapview serve`` (``--metrics-port``): one scrape shows the whole
topology. Every metric is listed, with how to use it, in docs/metrics.md.

Two kinds of metric live in one dedicated ``CollectorRegistry`` (never the process-global one):

- **scrape-time** families, computed from the coordinator's state when Prometheus scrapes, so a
  scrape is always current: tables (newest barrier, lag, E2E delay; ``delay_report``), job
  states, the TSO, barriers, group commit, locks, store size. Each comes from one small function
  in ``ServerMetrics.sources``; adding a family is one more such function
  (``ServerMetrics.add_source``). A function that raises is logged and its families are left
  out of that scrape; the others are still served, so a scrape never fails as a whole;
- **event** metrics (counters and histograms) updated as epochs end: the coordinator hears of
  each committed or aborted attempt (``EpochManager.events``) and of each job reporting FAILED
  (``Registry.on_failed``). What only a view job knows (its strategy, its mutations, the seconds
  of each step of an epoch) reaches them through the epoch's commit metadata, as the coordinator
  commits it: jobs report THROUGH the coordinator, never to Prometheus directly.

Event metrics count from the server's start (Prometheus handles the reset at a restart) and keep
the series of every job seen since; label values taken from metadata are bounded (a strategy not
known here is ``other``, at most ``MAX_STEPS`` step names of ``STEP_NAME`` form per epoch).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector

from coordinator.jobs import JobState
from coordinator.server.barriers import Barriers
from coordinator.server.delay import delay_report
from coordinator.server.epochs import EpochManager
from coordinator.server.gc import GcManager
from coordinator.server.meta import EpochRecord
from coordinator.server.registry import Registry
from coordinator.server.revisions import REVISION_JOB_PREFIX, RevisionManager
from coordinator.server.tso import TimestampOracle
from kvstore.group_commit import GROUP_SIZE_BUCKETS
from kvstore.mvcc.records import Lock
from kvstore.mvcc.timestamp import physical_ms
from kvstore.store import LocalStore

log = logging.getLogger("snapview.metrics")

# Locks the oldest-lock scan looks at, at most (in key order): a scrape stays cheap even with
# millions of open locks. The count itself is exact (LMDB keeps it).
LOCK_SCAN_CAP = 10_000
# Epoch durations and steps: from a few milliseconds (an unchanged delta) to minutes (a build).
EPOCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# What snapview_job_epochs_total's strategy label can be (anything else in metadata: "other").
STRATEGIES = ("delta", "build", "full_recompute", "unchanged", "none", "other")
STEP_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
MAX_STEPS = 16

Source = Callable[[], Iterable[Metric]]


def epoch_strategy(fields: dict[str, Any]) -> str:
    """What an epoch did, from its commit metadata: ``delta`` or ``build`` (an incremental view),
    ``full_recompute``, ``unchanged`` (a view epoch that had nothing to do), ``none`` (no
    strategy: a sink, a plain EpochWriter) or ``other``."""
    strategy = fields.get("strategy")
    if strategy is None:
        return "none"
    if strategy == "incremental":
        step = fields.get("step")
        if step == "delta" and not fields.get("changes"):
            return "unchanged"
        return step if step in ("delta", "build") else "other"
    if strategy == "full_recompute":
        return "full_recompute" if fields.get("recomputed", True) else "unchanged"
    return strategy if strategy in STRATEGIES else "other"


def _metadata(rec: EpochRecord) -> dict[str, Any]:
    try:
        d = json.loads(rec.metadata) if rec.metadata else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if v >= 0 else None


class ServerMetrics:
    """The server's metrics: built on its components, registered in ``prom`` (a registry of
    their own if None), which the server serves at /metrics."""

    def __init__(
        self,
        store: LocalStore,
        tso: TimestampOracle,
        barriers: Barriers,
        registry: Registry,
        epochs: EpochManager,
        prom: CollectorRegistry | None = None,
        *,
        version: str = "",
        instance_id: str = "",
    ) -> None:
        self.store, self.tso, self.barriers = store, tso, barriers
        self.jobs, self.epochs = registry, epochs
        self.version, self.instance_id = version, instance_id
        # One scrape at a time (it bounds the load scrapes put on the server), and none after
        # close(): the store they read is about to close.
        self._scrape = threading.Lock()
        self._closed = False
        disable_created_metrics()  # no *_created series: they double the count for nothing
        self.registry = r = prom if prom is not None else CollectorRegistry()
        self.epoch_seconds = Histogram(
            "snapview_job_epoch_duration_seconds",
            "Seconds from the open of an epoch's committing attempt to its commit (TSO clock)",
            ["job"],
            buckets=EPOCH_BUCKETS,
            registry=r,
        )
        self.step_seconds = Histogram(
            "snapview_job_epoch_step_seconds",
            "Seconds a view job spent in each step of an epoch (from the epoch's metadata)",
            ["job", "step"],
            buckets=EPOCH_BUCKETS,
            registry=r,
        )
        self.epochs_total = Counter(
            "snapview_job_epochs",
            "Epochs committed, by what they did (delta, build, full_recompute, unchanged, none)",
            ["job", "strategy"],
            registry=r,
        )
        self.mutations = Counter(
            "snapview_job_mutations",
            "Rows changed (mutations written) by committed epochs, from their metadata",
            ["job"],
            registry=r,
        )
        self.failures = Counter(
            "snapview_job_failures",
            "Job failures: reported FAILED (reason=reported_failed) or an attempt rolled back "
            "(reason=attempt_aborted)",
            ["job", "reason"],
            registry=r,
        )
        self.sources: list[Source] = [
            self._server,
            self._tables,
            self._job_states,
            self._tso,
            self._barriers,
            self._group_commit,
            self._locks,
            self._store_size,
        ]
        r.register(self)
        ProcessCollector(registry=r)  # process_*: memory, CPU, open files, start time

    def add_source(self, source: Source) -> None:
        """One more scrape-time source of families (e.g. the GC's)."""
        self.sources.append(source)

    # ------------------------------------------------------------------ the collector

    def close(self, timeout: float = 5.0) -> None:
        """Serve no more scrape-time families (the server is about to close the store); waits
        up to ``timeout`` seconds for a scrape in progress."""
        got = self._scrape.acquire(timeout=timeout)
        self._closed = True
        if got:
            self._scrape.release()

    def collect(self) -> Iterable[Metric]:
        with self._scrape:
            if self._closed:
                return []
            return self._collect()

    def _collect(self) -> list[Metric]:
        out: list[Metric] = []
        for source in list(self.sources):
            try:
                families = list(source())  # all of a source's families, or none
            except Exception:  # noqa: BLE001 - one family's failure must not fail the scrape
                log.exception(
                    "metrics: %s failed; its families are left out of this scrape",
                    getattr(source, "__name__", source),
                )
                continue
            out.extend(families)
        return out

    # ------------------------------------------------------------------ events

    def committed(self, rec: EpochRecord) -> None:
        """An attempt of ``rec.job`` committed (EpochManager.events)."""
        job = job_label(rec.job)
        if rec.commit_ts and rec.start_ts:
            secs = max(0, physical_ms(rec.commit_ts) - physical_ms(rec.start_ts)) / 1000
            self.epoch_seconds.labels(job).observe(secs)
        fields = _metadata(rec)
        self.epochs_total.labels(job, epoch_strategy(fields)).inc()
        n = _number(fields.get("mutations", fields.get("rows")))
        if n:
            self.mutations.labels(job).inc(n)
        steps = fields.get("steps")
        if isinstance(steps, dict):
            for name, secs in list(steps.items())[:MAX_STEPS]:
                v = _number(secs)
                if v is not None and isinstance(name, str) and STEP_NAME.fullmatch(name):
                    self.step_seconds.labels(job, name).observe(v)

    def aborted(self, rec: EpochRecord) -> None:
        """An attempt of ``rec.job`` was rolled back (EpochManager.events)."""
        self.failures.labels(job_label(rec.job), "attempt_aborted").inc()

    def job_failed(self, job: str) -> None:
        """``job`` reported FAILED (Registry.on_failed)."""
        self.failures.labels(job, "reported_failed").inc()

    # ------------------------------------------------------------------ scrape-time sources

    def _server(self) -> Iterable[Metric]:
        g = GaugeMetricFamily(
            "snapview_server_info", "This server: 1, labelled", labels=["version", "instance_id"]
        )
        g.add_metric([self.version, self.instance_id], 1)
        yield g

    def _tables(self) -> Iterable[Metric]:
        _, rows = delay_report(self.store, self.barriers, self.jobs)
        labels = ["table", "kind"]
        barrier = GaugeMetricFamily(
            "snapview_table_barrier_ts",
            "The newest barrier the table has (a TSO timestamp; 0: none yet)",
            labels=labels,
        )
        behind = GaugeMetricFamily(
            "snapview_table_barriers_behind",
            "Barriers issued after the newest one the table has",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "snapview_table_barrier_lag_seconds",
            "Seconds between the issue of the newest barrier and of the table's newest barrier",
            labels=labels,
        )
        e2e = GaugeMetricFamily(
            "snapview_table_e2e_delay_seconds",
            "Seconds from the issue of the table's newest barrier until the table reached it",
            labels=labels,
        )
        for d in rows:
            key = [d.table, d.kind]
            barrier.add_metric(key, d.barrier)
            behind.add_metric(key, d.barriers_behind)
            lag.add_metric(key, d.barrier_lag_ms / 1000)
            e2e.add_metric(key, d.e2e_delay_ms / 1000)
        yield from (barrier, behind, lag, e2e)

    def _job_states(self) -> Iterable[Metric]:
        g = GaugeMetricFamily(
            "snapview_job_state",
            "1 for the registered job's current state (running, lost, failed, stopped, "
            "not_started, unknown), 0 for the others",
            labels=["job", "state"],
        )
        now_ms = int(time.time() * 1000)
        with self.store.storage.read_txn() as r:
            topo = Registry.load(r)
            for job in sorted(topo.jobs):
                last = EpochManager.last_committed_in(r, job)
                state = Registry.state_of(Registry.run_in(r, job), last, now_ms)
                for s in JobState:
                    g.add_metric([job, str(s)], 1 if s is state else 0)
        yield g

    def _tso(self) -> Iterable[Metric]:
        yield CounterMetricFamily(
            "snapview_tso_timestamps_issued",
            "Timestamps the TSO handed out since the server started",
            value=self.tso.issued_count,
        )

    def _barriers(self) -> Iterable[Metric]:
        newest = self.barriers.newest()
        wall = self.barriers.wall_ms(newest) if newest else 0
        yield GaugeMetricFamily(
            "snapview_barrier_newest_ts", "The newest issued barrier (a TSO timestamp)", newest
        )
        yield GaugeMetricFamily(
            "snapview_barrier_newest_age_seconds",
            "Seconds since the newest barrier was issued (about --barrier-interval at most "
            "while the barrier thread keeps up)",
            max(0.0, time.time() - wall / 1000) if wall else 0.0,
        )
        yield GaugeMetricFamily(
            "snapview_barrier_interval_seconds",
            "The configured time between barriers (--barrier-interval)",
            self.barriers.interval_s,
        )

    def _group_commit(self) -> Iterable[Metric]:
        committer = self.store.committer
        sizes = list(committer.group_sizes)
        buckets, total = [], 0
        for bound, n in zip([*map(str, GROUP_SIZE_BUCKETS), "+Inf"], sizes, strict=True):
            total += n
            buckets.append((bound, total))
        yield HistogramMetricFamily(
            "snapview_store_group_commit_actions",
            "Write actions per group commit (one LMDB transaction, one fsync each)",
            buckets=buckets,
            sum_value=committer.actions,
        )

    def _locks(self) -> Iterable[Metric]:
        oldest, seen, capped = 0, 0, False
        with self.store.storage.read_txn() as r:
            count = r.entries("lock")
            for _, raw in r.walk("lock"):
                if seen == LOCK_SCAN_CAP:
                    capped = True
                    break
                seen += 1
                ts = Lock.start_ts_of(raw)
                oldest = ts if not oldest else min(oldest, ts)
        age = max(0, self.tso.physical_ms() - physical_ms(oldest)) / 1000 if oldest else 0.0
        yield GaugeMetricFamily("snapview_store_locks", "Open (prewritten) locks", count)
        yield GaugeMetricFamily(
            "snapview_store_oldest_lock_age_seconds",
            f"Age of the oldest open lock among the first {LOCK_SCAN_CAP} in key order",
            age,
        )
        yield GaugeMetricFamily(
            "snapview_store_lock_scan_truncated",
            f"1 if more than {LOCK_SCAN_CAP} locks are open (the oldest-lock age is then a "
            "lower bound)",
            1 if capped else 0,
        )

    def _store_size(self) -> Iterable[Metric]:
        st = self.store.storage
        yield GaugeMetricFamily(
            "snapview_store_used_bytes",
            "Bytes of the LMDB map in use (pages up to the last)",
            st.used_bytes(),
        )
        yield GaugeMetricFamily(
            "snapview_store_map_size_bytes",
            "The LMDB map size (it doubles when full)",
            st.map_size(),
        )
        yield GaugeMetricFamily(
            "snapview_store_file_size_bytes",
            "Size of the LMDB data file (data.mdb)",
            os.stat(os.path.join(st.path, "data.mdb")).st_size,
        )
        yield GaugeMetricFamily(
            "snapview_store_filesystem_free_bytes",
            "Bytes free on the data dir's filesystem for the server's user",
            st.free_bytes(),
        )


def gc_source(gc: GcManager) -> Source:
    """The GC's families (``ServerMetrics.add_source``): the safepoint and what holds it back,
    reader leases, and the collector's progress."""

    def _gc() -> Iterable[Metric]:
        st = gc.status(page_size=1)  # the counts, not the leases: a scrape stays small
        now_ms = gc.tso.physical_ms()

        def age(ts: int) -> float:
            return max(0, now_ms - physical_ms(ts)) / 1000 if ts else 0.0

        yield GaugeMetricFamily(
            "snapview_gc_enabled",
            "1 if the safepoint moves by itself (--gc-interval > 0)",
            1 if st.enabled else 0,
        )
        yield GaugeMetricFamily(
            "snapview_gc_retention_seconds",
            "History kept for reads at older timestamps (--retention)",
            st.retention_s,
        )
        yield GaugeMetricFamily(
            "snapview_gc_safepoint_ts", "The GC safepoint: no read below it", st.safepoint
        )
        yield GaugeMetricFamily(
            "snapview_gc_safepoint_age_seconds",
            "How far the safepoint is behind now: about --retention when nothing else holds it "
            "back; more means a lease or a job does (see snapview_gc_hold_age_seconds)",
            age(st.safepoint),
        )
        holds = GaugeMetricFamily(
            "snapview_gc_hold_age_seconds",
            "Age of the oldest hold of each kind (retention, lease, job, revision): the oldest "
            "of them binds the safepoint",
            labels=["kind"],
        )
        oldest: dict[str, int] = {}
        for h in st.holds:
            oldest[h.kind] = min(oldest.get(h.kind, h.ts), h.ts)
        for kind, ts in sorted(oldest.items()):
            holds.add_metric([kind], age(ts))
        yield holds
        yield GaugeMetricFamily("snapview_gc_leases", "Live reader leases", st.lease_count)
        yield GaugeMetricFamily(
            "snapview_gc_oldest_lease_age_seconds",
            "Age of the timestamp the oldest live reader lease holds (0: none)",
            age(st.oldest_lease_ts),
        )
        p = st.progress
        for name, value, text in (
            ("versions_removed", p.versions_removed, "Row versions GC removed"),
            ("records_examined", p.records_examined, "Records GC steps examined"),
            (
                "records_deleted",
                p.records_deleted,
                "Records GC deleted (versions, long values, change-index entries)",
            ),
            ("steps", p.steps, "GC steps (each one bounded walk and one short write)"),
            ("passes", p.passes, "Whole GC passes over the store"),
            ("step_seconds", p.step_seconds, "Seconds spent in GC steps"),
            (
                "coordinator_records_removed",
                p.barriers_removed + p.epoch_records_removed,
                "Barrier, view-version and epoch records pruned below the safepoint",
            ),
        ):
            yield CounterMetricFamily(f"snapview_gc_{name}", text, value=value)
        yield GaugeMetricFamily(
            "snapview_gc_pass_in_progress",
            "1 while a GC pass is collecting",
            0 if p.pass_phase == "done" else 1,
        )

    return _gc


def job_label(job: str) -> str:
    """A job's metric label: every correction set's job (``revision/<id>``, one per set) shares
    the label ``revision/``, so their series do not grow with the number of revisions."""
    return REVISION_JOB_PREFIX if job.startswith(REVISION_JOB_PREFIX) else job


def revision_source(revisions: RevisionManager) -> Source:
    """The revisions' families (``ServerMetrics.add_source``): revisions by kind and state, the
    rows they changed, the tables fenced now, and how long the oldest unfinished one has run
    (a rebuild waits for its view's job: a large age means the job is not running)."""

    def _revisions() -> Iterable[Metric]:
        recs = revisions.stored()
        count = GaugeMetricFamily(
            "snapview_revisions",
            "Recorded revisions by kind (rollback, corrections, rebuild) and state (running, done, "
            "aborted)",
            labels=["kind", "state"],
        )
        by: dict[tuple[str, str], int] = {}
        rows: dict[str, int] = {}
        for r in recs:
            by[(r.kind, r.state)] = by.get((r.kind, r.state), 0) + 1
            if r.state == "done":
                rows[r.kind] = rows.get(r.kind, 0) + r.rows
        for (kind, state), n in sorted(by.items()):
            count.add_metric([kind, state], n)
        yield count
        changed = CounterMetricFamily(
            "snapview_revision_rows",
            "Rows changed by done revisions (restored or upserted, and removed), by kind",
            labels=["kind"],
        )
        for kind, n in sorted(rows.items()):
            changed.add_metric([kind], n)
        yield changed
        yield GaugeMetricFamily(
            "snapview_tables_fenced",
            "Tables a rollback fences right now (their writers wait)",
            revisions.fenced(),
        )
        running = [r.started_wall_ms for r in recs if r.state == "running"]
        yield GaugeMetricFamily(
            "snapview_revision_oldest_running_seconds",
            "How long the oldest revision still running has run (0: none)",
            max(0.0, time.time() - min(running) / 1000) if running else 0.0,
        )

    return _revisions
