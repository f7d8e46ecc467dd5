"""One epoch of a view job, written once for every strategy: ``ViewStrategy.maintain``.

Epoch T of a view job is one Percolator transaction: the view moves from its version at the
barrier before to its version at barrier T in one step, or not at all. The runner here does
what every strategy does the same way, in this order:

1. open epoch T (``coordinator.epoch_attempt.OpeningAttempt``: in a thread of its own, kept
   alive from the moment it opens) while the strategy works ahead on reads only
   (``prepare``: the incremental strategy decides build or delta and computes a driver delta
   there; a full recompute does nothing);
2. an epoch found committed is a replay: counted as skipped, nothing written;
3. under ``attempt.running()`` (heartbeats; any exception aborts the attempt): the strategy
   writes the epoch (``write``, which returns an ``EpochWork``), then the commit with the
   metadata every view epoch carries (``barrier``, ``strategy``, the strategy's own fields,
   ``steps``, and ``rebuild`` when the open said a rebuild was requested);
4. the job's counters (``Progress``) updated from the ``EpochWork``.

A commit refused with Aborted (the attempt's locks outlived their TTL and a reader rolled them
back, or another run committed past the epoch the strategy followed) is retried up to
``MAX_COMMIT_ATTEMPTS`` times, after ``forget()``: the strategy drops whatever it cached of
the committed epochs and reads them again. A crash before the commit leaves locks that are
rolled back (the epoch is then redone); a crash after it leaves a committed epoch that a replay
skips.

Strategies: ``spark_sink.full_recompute.FullRecompute`` and
``spark_sink.ivm.strategy.Incremental``.
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from coordinator.client import Client
from coordinator.connection import ConnectionSettings
from coordinator.epoch_attempt import EpochAttempt, OpeningAttempt
from coordinator.jobs import EpochMetadata
from coordinator.process_clients import client_for
from kvstore.errors import Aborted
from kvstore.failpoints import fail_point
from kvstore.table_info import TableInfo
from spark_sink.view_progress import Laps, Progress

MAX_COMMIT_ATTEMPTS = 3
RECOMPUTE_SECONDS_KEPT = 1000  # Progress.recompute_seconds: the newest this many


@dataclass
class ViewSpec:
    """What a strategy needs to know about its view (built by MaterializedView)."""

    coordinator: str | ConnectionSettings
    token: str | None
    job: str
    target: str
    query: str
    column_names: tuple[str, ...]
    one_row: bool
    lock_ttl_ms: int = 20_000


@dataclass
class ViewEpoch:
    """One attempt at one view epoch as a strategy sees it: the process's client, the view's
    table (described afresh), the barrier's reads (each source's read ts, and whether it
    changed since the barrier before) and the epoch's laps."""

    client: Client
    view: TableInfo
    barrier: int
    reads: dict[str, tuple[int, bool]]
    laps: Laps

    @property
    def read_ts(self) -> dict[str, int]:
        """Each source's read ts at the barrier."""
        return {t: ts for t, (ts, _) in self.reads.items()}


@dataclass
class EpochWork:
    """What a strategy's ``write`` did in one epoch, for the view's ``Progress`` and the
    commit's metadata."""

    kind: str  # Progress.last_strategy: full_recompute, build or delta
    recomputed: bool  # it ran the view's query over its sources
    unchanged: bool  # it found nothing to change
    mutations: int  # rows written to the view (and its state tables)
    changes: int = 0  # source changes read (a delta)
    lookups: int = 0  # keyed rows read beside them
    why: str = ""  # why this kind (a build's reason, say)
    fields: dict = field(default_factory=dict)  # the strategy's own metadata for the commit


class ViewStrategy(abc.ABC):
    """How a view's version at a barrier is computed; ``maintain`` runs the epoch (see the
    module docstring), the subclass says what to compute (``prepare``, ``write``) and what to
    remember of committed epochs (``committed``, ``forget``, ``follow``)."""

    name: str

    def __init__(self, spec: ViewSpec, session: SparkSession) -> None:
        self.spec = spec
        self.session = session
        self.progress = Progress()

    # ------------------------------------------------------------------ the runner

    def maintain(self, barrier: int, reads: dict[str, tuple[int, bool]]) -> None:
        """Make the view's version at ``barrier`` exist, exactly once. ``reads``: each
        source's read ts at the barrier, and whether it changed since the barrier before."""
        for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
            try:
                with self.epoch_scope():
                    self._epoch(barrier, reads)
                return
            except Aborted:
                self.forget()
                if attempt == MAX_COMMIT_ATTEMPTS:
                    raise

    def _epoch(self, barrier: int, reads: dict[str, tuple[int, bool]]) -> None:
        spec = self.spec
        laps = Laps()
        client = client_for(spec.coordinator, spec.token)
        view = client.describe_table(spec.target, refresh=True)
        epoch = ViewEpoch(client, view, barrier, reads, laps)
        opening = OpeningAttempt(client, spec.job, barrier, ttl_ms=spec.lock_ttl_ms)
        try:
            ahead = self.prepare(epoch, opening)
            attempt = opening.result()
        except BaseException:
            opening.abandon()
            raise
        p = self.progress
        if attempt.committed:
            p.skipped += 1
            p.last_barrier = max(p.last_barrier, barrier)
            self.committed(None)
            return
        with attempt.running():
            laps.lap("open")
            work = self.write(epoch, attempt, ahead)
            fail_point("view.before_commit")
            rebuild = attempt.info.rebuild
            meta = EpochMetadata(
                sources=epoch.read_ts,
                fields={
                    "barrier": barrier,
                    "strategy": self.name,
                    **work.fields,
                    # Seconds per step so far (the commit's own comes after): the coordinator
                    # turns them into snapview_job_epoch_step_seconds (docs/metrics.md).
                    "steps": {k: round(v, 4) for k, v in laps.steps.items()},
                    # The coordinator marks the rebuild's revision DONE with this commit
                    # (coordinator.server.revisions).
                    **({"rebuild": rebuild} if rebuild else {}),
                },
            )
            attempt.commit(meta)
        self.committed(meta)
        laps.lap("commit")
        p.first_barrier = p.first_barrier or barrier
        p.last_barrier = barrier
        p.barriers += 1
        p.recomputed += work.recomputed
        p.unchanged += work.unchanged
        p.mutations += work.mutations
        p.last_steps = laps.steps
        p.last_epoch_s = sum(laps.steps.values())
        p.last_strategy, p.last_why = work.kind, work.why
        p.last_changes, p.last_lookups = work.changes, work.lookups
        p.last_mutations = work.mutations
        if work.recomputed:
            p.recompute_seconds.append(p.last_epoch_s)
            del p.recompute_seconds[:-RECOMPUTE_SECONDS_KEPT]

    # ------------------------------------------------------------------ the strategy's part

    def epoch_scope(self) -> contextlib.AbstractContextManager:
        """A context around each attempt at an epoch (none by default)."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def prepare(self, epoch: ViewEpoch, opening: OpeningAttempt) -> object:
        """Work done while the epoch opens: reads only, nothing written. Call
        ``opening.wait()`` first when the reads must not meet an attempt a crashed run left
        (the open rolls it back). The result is handed to ``write``."""

    @abc.abstractmethod
    def write(self, epoch: ViewEpoch, attempt: EpochAttempt, ahead: object) -> EpochWork:
        """Prewrite the epoch's mutations into the open ``attempt`` (heartbeating; an
        exception aborts it); the runner commits. ``ahead``: what ``prepare`` returned."""

    def committed(self, meta: EpochMetadata | None) -> None:
        """The epoch is committed: by this strategy with ``meta``, or (None) before it was
        opened, by another run of the job (a replay)."""
        return None  # by default nothing is remembered of committed epochs

    def forget(self) -> None:
        """Drop whatever is cached of the job's committed epochs (after Aborted)."""
        return None

    def follow(self, last_committed: int) -> None:
        """``last_committed`` is the job's newest committed epoch as the coordinator says
        (another run may have committed since this strategy's last epoch)."""
        return None
