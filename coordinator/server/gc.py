"""The automatic GC safepoint, and the background collector that follows it.

Every ``interval_s`` the coordinator computes how far the safepoint may go: the minimum of its
**holds**, each a timestamp something may still read at:

- ``retention``: now − ``--retention`` (default 10 minutes, like TiDB's ``tidb_gc_life_time``),
  so ``read --at`` and change reads inside the window keep working;
- ``lease``: the live reader lease with the oldest ts (``coordinator.server.leases``, which finds
  it in O(log n): a tick never walks or sorts the leases, of which a server holds up to
  ``--max-leases``); its name says how many others there are;
- ``job``: for every registered job, the oldest source read ts its last committed epoch
  recorded (its metadata's ``sources``: a view's read ts per source at its last barrier, a sink's
  change-feed position), since its next epoch reads changes from there; a view job's last
  committed barrier itself; and an open (PREWRITE) epoch's barrier, or its start_ts − 1 for a
  sink, so an epoch in progress keeps what it reads. A job stopped for longer than the retention
  keeps its committed hold until it is unregistered (its view dropped); an open epoch is a hold
  with an owner (``coordinator.server.owned_holds``): once its owner stopped renewing it for the
  hold TTL it holds nothing, and the tick settles it through its primary
  (``EpochManager.settle_lapsed``) before it computes the holds;
- anything registered with ``add_holds`` (a revision in progress pins its base).

The safepoint moves up to that minimum (never back) and is made durable *before* anything at it
is collected (``LocalStore.advance_safepoint``); then a pass collects the store in small steps
(``LocalStore.gc_step``: a bounded walk on a read transaction, then one short write of deletes;
incremental, over the keys the change index names, but for the first pass after a start and one
an hour: ``FULL_PASS_INTERVAL_S``),
paced so that GC takes at most about ``1 / (1 + pace)`` of the time (half of it where a step
finds much to collect: ``PRODUCTIVE_SHARE``) and writers are held only for one step's deletes at
a time. Coordinator records below the safepoint go too: barriers and
view versions (each view keeps its newest), epoch records older than each job's last committed
one, expired leases. The same holds guard the manual ``Gc`` RPC (``LocalStore.gc_guard``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from coordinator.jobs import EpochMetadata
from coordinator.reports import GcProgress
from coordinator.server.core import Core
from coordinator.server.epochs import EpochManager
from coordinator.server.leases import (
    DEFAULT_MAX_LEASES,
    DEFAULT_MAX_LEASES_PER_HOLDER,
    Lease,
    LeasePage,
    Leases,
)
from coordinator.server.meta import (
    COMMITTED,
    PREWRITE,
    EpochRecord,
    JobRecord,
    epoch_key,
)
from coordinator.server.owned_holds import OwnedHold
from coordinator.server.registry import Registry
from kvstore.actions.gc import GcCursor, GcStep
from kvstore.errors import FailedPrecondition, InvalidArgument
from kvstore.group_commit import WriteContext
from kvstore.mvcc.timestamp import compose, physical_ms, wall_text
from kvstore.storage import Reader

log = logging.getLogger("snapview.gc")
HISTORY_RETENTION_S = 600.0  # MVCC history kept for reads at older timestamps (--retention)
DEFAULT_INTERVAL_S = 10.0
# GC sleeps PACE times as long as its last step took: it takes at most 1/(1+PACE) of the time.
DEFAULT_PACE = 3.0
# A step that found this share (or more) of what it examined collectable is *productive*: the
# pass is in history a rewrite or a bulk delete left, which takes new pages for as long as it
# stays, so the collector sleeps only PRODUCTIVE_PACE_FACTOR of its pace after it (half the
# time at the default pace). A walk over settled keys finds next to nothing and keeps the pace.
PRODUCTIVE_SHARE = 0.25
PRODUCTIVE_PACE_FACTOR = 1 / 3
# Passes are incremental (they cost what changed: kvstore.actions.gc), but for the first after
# a start and one every FULL_PASS_INTERVAL_S, which also collect what no change-index entry
# names (Rollback and Lock records, a straggler's history).
FULL_PASS_INTERVAL_S = 3600.0
MIN_PAUSE_S = 0.002
# Epoch records deleted in one write (a job that ran for months has millions).
EPOCH_PRUNE_BATCH = 4096


@dataclass(frozen=True)
class Hold:
    """Something the safepoint must not pass: ``kind`` (retention, lease, job, revision),
    ``name`` (the lease's holder and id, the job, ...) and the ``ts`` it may read at."""

    kind: str
    name: str
    ts: int


@dataclass(frozen=True)
class GcStatus:
    """A snapshot of the GC's state, for ``snapview leases``, metrics and tests."""

    enabled: bool
    safepoint: int
    retention_s: float
    interval_s: float
    holds: list[Hold]  # every hold, oldest ts first (the first one binds); one for the leases
    leases: LeasePage  # one page of the live leases (``Leases.page``), with their count
    lease_count: int = 0  # every live lease, whatever the page's filter
    oldest_lease_ts: int = 0  # the ts the oldest live lease holds (0: none)
    progress: GcProgress = field(default_factory=GcProgress)


def _sources_floor(metadata: str) -> int:
    """The oldest source read ts in an epoch's metadata (``sources``), 0 if it names none."""
    try:  # the contract's own parser; a job may have committed free text instead
        sources = EpochMetadata.from_json(metadata).sources
    except (ValueError, AttributeError, TypeError):
        return 0
    ts = [v for v in sources.values() if isinstance(v, int) and v > 0]
    return min(ts, default=0)


def job_holds(
    reader: Reader,
    rec: JobRecord,
    open_hold: Callable[[EpochRecord], OwnedHold] | None = None,
    now_ms: int = 0,
) -> list[Hold]:
    """What registered job ``rec`` may still read at (see the module docstring). With
    ``open_hold`` (the renewals of open epochs) and ``now_ms``, an open epoch whose hold lapsed
    holds nothing."""
    st = EpochManager.job_state_in(reader, rec.job)
    out: list[Hold] = []
    last = st["last_committed"]
    if last:
        raw = reader.get("meta", epoch_key(rec.job, last))
        info = EpochRecord.from_json(raw) if raw else None
        floor = _sources_floor(info.metadata) if info and info.metadata else 0
        if rec.is_view:
            floor = min(floor, last) if floor else last
        if floor:
            out.append(Hold("job", f"{rec.job} (last committed epoch {last})", floor))
    if st["open_epoch"]:
        raw = reader.get("meta", epoch_key(rec.job, st["open_epoch"]))
        info = EpochRecord.from_json(raw) if raw else None
        if info is not None and info.state == PREWRITE:
            ts = info.epoch if rec.is_view else info.start_ts - 1
            name = f"{rec.job} (open epoch {info.epoch})"
            if open_hold is not None:
                left_ms = open_hold(info).expires_ms - now_ms
                if left_ms <= 0:
                    return out  # lapsed: the next tick settles it
                name = (
                    f"{rec.job} (open epoch {info.epoch}; lapses in {left_ms / 1000:.0f}s "
                    "unless its owner renews it)"
                )
            out.append(Hold("job", name, ts))
    return out


class GcManager:
    """Computes the safepoint from the holds, moves it, and runs the collector thread."""

    def __init__(
        self,
        core: Core,
        retention_s: float = HISTORY_RETENTION_S,
        interval_s: float = DEFAULT_INTERVAL_S,
        pace: float = DEFAULT_PACE,
        epochs: EpochManager | None = None,
        max_leases: int = DEFAULT_MAX_LEASES,
        max_leases_per_holder: int = DEFAULT_MAX_LEASES_PER_HOLDER,
    ) -> None:
        if retention_s < 0:
            raise InvalidArgument(f"--retention must not be negative, got {retention_s}s")
        if interval_s < 0:
            raise InvalidArgument(f"--gc-interval must not be negative, got {interval_s}s")
        self.core, store = core, core.store
        self.store, self.tso = store, core.tso
        self.registry, self.barriers = core.registry, core.barriers
        self.retention_s, self.interval_s, self.pace = retention_s, interval_s, pace
        # The open epochs' renewals: a lapsed one holds nothing and is settled at the next tick.
        self.epochs = epochs
        # Called at every tick after lapsed epochs are settled (RevisionManager.settle_abandoned).
        self.after_settle: list[Callable[[], object]] = []
        self.enabled = interval_s > 0
        self.leases = Leases(store, core.tso, max_leases, max_leases_per_holder)
        # Replaced, never changed in place (``_update_progress``): a GcStatus handed out keeps
        # the counters it was given.
        self.progress = GcProgress(pass_safepoint=store.safepoint, pass_phase="done")
        self._progress_mu = threading.Lock()
        self._extra: list[Callable[[], list[Hold]]] = []
        # Serialises safepoint moves with lease acquisition and renewal: a lease granted at ts
        # is in the holds before the next move is computed, and a move is durable before a
        # lease below it is refused.
        self._mu = threading.RLock()
        self._cursor = GcCursor(phase="done")
        self._pass_started = 0.0
        self._last_full_pass: float | None = None  # monotonic start of the last full pass
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        store.gc_guard = self.check_safepoint

    # ------------------------------------------------------------------ holds

    def add_holds(self, fn: Callable[[], list[Hold]]) -> None:
        """Register another source of holds (called at every tick, under the GC lock)."""
        self._extra.append(fn)

    def holds(self) -> list[Hold]:
        """Every hold, oldest ts first; of the leases only the oldest (it alone can bind), so
        this costs O(log n) in the leases, plus the jobs and revisions."""
        now = self.tso.now()
        out = [
            Hold(
                "retention",
                f"now - {self.retention_s:g}s",
                max(1, compose(max(0, physical_ms(now) - int(self.retention_s * 1000)), 0)),
            )
        ]
        lease, count = self.leases.oldest()
        if lease is not None:
            more = f" and {count - 1} younger lease(s)" if count > 1 else ""
            out.append(Hold("lease", f"{lease.holder} ({lease.id}){more}", lease.ts))
        epochs, now_ms = self.epochs, self.tso.physical_ms()
        open_hold = epochs.open_hold if epochs is not None else None
        with self.store.storage.read_txn() as r:
            for rec in Registry.load(r).jobs.values():
                out += job_holds(r, rec, open_hold, now_ms)
        for fn in self._extra:
            out += fn()
        return sorted(out, key=lambda h: (h.ts, h.kind, h.name))

    def check_safepoint(self, safepoint: int) -> None:
        """Refuse (FAILED_PRECONDITION) a safepoint above a hold (``LocalStore.gc_guard``)."""
        with self._mu:
            first = self.holds()[0]
            if safepoint > first.ts:
                raise FailedPrecondition(
                    f"GC safepoint {safepoint} ({wall_text(safepoint)}) would pass the "
                    f"{first.kind} hold of {first.name} at {first.ts} ({wall_text(first.ts)})"
                )

    # ------------------------------------------------------------------ leases

    def acquire_lease(self, holder: str, ts: int, ttl_ms: int) -> Lease:
        """A lease on ``ts``; SnapshotTooOld if the safepoint already passed it."""
        with self._mu:
            self._check_not_collected(ts, holder)
            return self.leases.acquire(holder, ts, ttl_ms)

    def renew_lease(self, lease_id: str, ttl_ms: int, ts: int = 0) -> Lease:
        with self._mu:
            if ts:
                self._check_not_collected(ts, self.leases.get_live(lease_id).holder)
            return self.leases.renew(lease_id, ttl_ms, ts)

    def release_lease(self, lease_id: str) -> bool:
        return self.leases.release(lease_id)

    def _check_not_collected(self, ts: int, holder: str) -> None:
        self.store.check_not_collected(
            ts, f"lease for {holder!r}:", "take a snapshot at or above it"
        )

    # ------------------------------------------------------------------ the safepoint

    def tick(self) -> bool:
        """Sweep expired leases, move the safepoint to the oldest hold and prune the
        coordinator's records below it; whether the safepoint moved."""
        self.leases.sweep()
        self.settle_lapsed()
        with self._mu:
            target = self.holds()[0].ts
            moved = target > self.store.safepoint and self.store.advance_safepoint(target)
        sp = self.store.safepoint
        if sp:
            barriers, epochs = self.barriers.prune_below(sp), self.prune_epochs(sp)
            self._update_progress(
                lambda p: replace(
                    p,
                    barriers_removed=p.barriers_removed + barriers,
                    epoch_records_removed=p.epoch_records_removed + epochs,
                )
            )
        return moved

    def settle_lapsed(self) -> list[EpochRecord]:
        """Settle the open epochs whose owners stopped renewing them (and what hangs on them):
        they hold nothing from here on. A failure is logged, never the tick's."""
        if self.epochs is None:
            return []
        try:
            settled = self.epochs.settle_lapsed()
            for fn in self.after_settle:
                fn()
        except Exception:  # noqa: BLE001 - the next tick tries again; GC goes on meanwhile
            log.exception("settling lapsed epochs failed")
            return []
        return settled

    def release_job(self, job: str, owner: str = "") -> tuple[EpochRecord | None, list[Hold]]:
        """Settle ``job``'s open epoch now (``EpochManager.release``) and wake the collector:
        returns the epoch as settled (None: it had none open) and what the job still holds,
        which is what its committed epoch needs, for as long as it stays registered."""
        if self.epochs is None:
            raise FailedPrecondition("this GC manager does not know the epochs")
        settled = self.epochs.release(job, owner)
        if settled is not None:
            for fn in self.after_settle:
                fn()
        with self.store.storage.read_txn() as r:
            rec = Registry.load(r).jobs.get(job)
            left = [] if rec is None else job_holds(r, rec)
        self.collect_now()
        return settled, left

    def prune_epochs(self, safepoint: int) -> int:
        """Delete each job's epoch records older than its last committed epoch that ended below
        the safepoint (COMMITTED at a commit_ts, ABORTED at a start_ts below it). The last
        committed and any open epoch stay: resuming, ``GetEpoch(0)`` and feed positions need
        them."""
        doomed: list[bytes] = []
        with self.store.storage.read_txn() as r:
            for job, st in EpochManager.job_states_in(r).items():
                last = st["last_committed"]
                if not last:
                    continue
                for k, v in r.items_between("meta", epoch_key(job, 0), epoch_key(job, last)):
                    info = EpochRecord.from_json(v)
                    ended = info.commit_ts if info.state == COMMITTED else info.start_ts
                    if info.state != PREWRITE and ended < safepoint:
                        doomed.append(k)
                    if len(doomed) >= EPOCH_PRUNE_BATCH:
                        break
                if len(doomed) >= EPOCH_PRUNE_BATCH:
                    break
        if doomed:
            self.store.run_write(lambda ctx: _delete_meta(ctx, doomed))
        return len(doomed)

    def status(self, page_size: int = 0, after: str = "", holder: str = "") -> GcStatus:
        """The GC's state with one page of the leases (``Leases.page``: ids above ``after``,
        of ``holder`` if given): its size is bounded whatever the number of leases."""
        oldest, count = self.leases.oldest()
        return GcStatus(
            enabled=self.enabled,
            safepoint=self.store.safepoint,
            retention_s=self.retention_s,
            interval_s=self.interval_s,
            holds=self.holds(),
            leases=self.leases.page(after, page_size, holder),
            lease_count=count,
            oldest_lease_ts=oldest.ts if oldest is not None else 0,
            progress=self.progress,
        )

    # ------------------------------------------------------------------ the collector

    def start(self) -> None:
        """Run ticks and collection steps on a daemon thread (nothing when disabled)."""
        if not self.enabled:
            return
        self._thread = threading.Thread(target=self._run, name="gc", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def collect_now(self) -> None:
        """Wake the collector for a tick now (tests, ``snapview gc``)."""
        self._wake.set()

    def _run(self) -> None:
        next_tick = 0.0
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if now >= next_tick or self._wake.is_set():
                    self._wake.clear()
                    self.tick()
                    next_tick = now + self.interval_s
                    if self._cursor.done and self.store.safepoint > self.progress.pass_safepoint:
                        self._begin_pass()
                if self._cursor.done:
                    self._wake.wait(max(0.0, next_tick - time.monotonic()))
                    continue
                took, step = self._step()
                self._stop.wait(step_pause(took, step, self.pace))
            except Exception:  # noqa: BLE001 - keep collecting; a store error is logged, retried
                log.exception("GC step failed")
                self._stop.wait(1.0)

    def _begin_pass(self) -> None:
        now = time.monotonic()
        last = self._last_full_pass
        full = last is None or now - last >= FULL_PASS_INTERVAL_S
        if full:
            self._last_full_pass = now
        self._cursor = GcCursor() if full else GcCursor.incremental()
        self._pass_started = now
        sp, phase = self.store.safepoint, self._cursor.phase
        self._update_progress(lambda p: replace(p, pass_safepoint=sp, pass_phase=phase))

    def _step(self) -> tuple[float, GcStep]:
        """One step of the pass: how long it took, and the step."""
        t0 = time.monotonic()
        step = self.store.gc_step(self._cursor)
        took = time.monotonic() - t0
        self._cursor = step.next
        done = step.next.done
        pass_s, end_ms = time.monotonic() - self._pass_started, int(time.time() * 1000)

        def counted(p: GcProgress) -> GcProgress:
            return replace(
                p,
                steps=p.steps + 1,
                step_seconds=p.step_seconds + took,
                versions_removed=p.versions_removed + step.versions,
                records_examined=p.records_examined + step.examined,
                records_deleted=p.records_deleted + len(step.doomed),
                pass_phase=step.next.phase,
                passes=p.passes + int(done),
                last_pass_seconds=pass_s if done else p.last_pass_seconds,
                last_pass_end_ms=end_ms if done else p.last_pass_end_ms,
            )

        self._update_progress(counted)
        return took, step

    def _update_progress(self, change: Callable[[GcProgress], GcProgress]) -> None:
        """Replace ``progress`` by ``change`` of it, one change at a time (the collector's
        thread and a direct ``tick()`` may both count)."""
        with self._progress_mu:
            self.progress = change(self.progress)


def step_pause(took: float, step: GcStep, pace: float) -> float:
    """How long the collector sleeps after a step that took ``took`` seconds: ``pace`` times
    that, or PRODUCTIVE_PACE_FACTOR of it after a productive step (at least PRODUCTIVE_SHARE of
    the records examined were collectable), never under MIN_PAUSE_S."""
    productive = step.versions >= PRODUCTIVE_SHARE * max(1, step.examined)
    return max(MIN_PAUSE_S, took * pace * (PRODUCTIVE_PACE_FACTOR if productive else 1.0))


def _delete_meta(ctx: WriteContext, keys: list[bytes]) -> None:
    for k in keys:
        ctx.buf.delete("meta", k)
