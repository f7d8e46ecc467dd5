"""Timestamp barriers (FLIP-276) and the version every table has at each of them.

The coordinator issues a barrier every ``--barrier-interval``: a fresh TSO timestamp ``T``,
recorded with its wall time. Then:

- a **root table** has barrier T once its resolved ts is >= T (no commit at or below T can still
  appear); its read ts at T is T itself;
- a **view** (a table written by a MaterializedView job) has barrier T once its job committed the
  epoch for T. The view's read ts at T is that epoch's commit ts, recorded in the same LMDB
  transaction that commits the epoch's primary (``record_view_barrier`` runs inside the commit
  action), so a view can never be committed at T without the record, or the other way round.

Records live in the ``meta`` CF:

    barrier/<T>              {"wall_ms"}                                   one per issued barrier
    vbar/<table>\\0<T>        {"read_ts", "wall_ms", "changed", "prev", "job"}
    vbar-newest/<table>      T                                             the view's newest

Barriers and view records older than ``retention_s`` are pruned (a view keeps its newest).
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
import time
from collections import deque

from coordinator.server.meta import (
    BARRIER_PREFIX,
    VIEW_NEWEST_PREFIX,
    ViewVersion,
    barrier_key,
    barrier_of_key,
    view_newest_key,
    view_version_key,
    view_version_prefix,
)
from coordinator.server.registry import Registry, Topology
from coordinator.server.tso import TimestampOracle
from kvstore.actions.resolve_locks import has_secondaries
from kvstore.errors import InvalidArgument
from kvstore.failpoints import fail_point
from kvstore.group_commit import WriteContext
from kvstore.storage import Reader
from kvstore.store import LocalStore

log = logging.getLogger("snapview.barriers")
# Barrier and view records are kept this long when GC is off (with GC on they are pruned below
# the safepoint instead: GcManager.tick).
RECORD_RETENTION_S = 3600.0
# How many barrier reaches per root table the barrier thread remembers (for `delay`'s critical
# paths): at the default 1 s interval, the last ~8 minutes.
ROOT_HISTORY = 512


def _now_ms() -> int:
    return int(time.time() * 1000)


def issued_barriers(reader: Reader) -> dict[int, int]:
    """Every recorded barrier and the wall ms it was issued at, oldest first."""
    return {
        barrier_of_key(k): json.loads(v)["wall_ms"]
        for k, v in reader.iter_prefix("meta", BARRIER_PREFIX)
    }


def view_barriers(reader: Reader, table: str) -> list[int]:
    """The barriers at which view ``table`` has a recorded version, oldest first."""
    return [barrier_of_key(k) for k, _ in reader.iter_prefix("meta", view_version_prefix(table))]


class Barriers:
    """Issues barriers and answers which barriers each table has. Thread-safe."""

    def __init__(
        self,
        store: LocalStore,
        tso: TimestampOracle,
        registry: Registry,
        interval_s: float = 1.0,
        retention_s: float | None = RECORD_RETENTION_S,
    ) -> None:
        if interval_s <= 0:
            raise InvalidArgument(f"barrier interval must be positive, got {interval_s}s")
        self.store, self.tso, self.registry = store, tso, registry
        self.interval_s = interval_s
        self.retention_s = retention_s
        self._mu = threading.Lock()
        self._issue_lock = threading.Lock()
        # root table -> (barrier seen reached, wall ms when first seen), oldest first; for
        # `delay`. Only the barrier thread appends; _roots_mu guards reads against appends.
        self._root_reached: dict[str, deque[tuple[int, int]]] = {}
        self._root_ids: dict[str, int] = {}  # the id of the table each history is of
        self._roots_mu = threading.Lock()
        with store.storage.read_txn() as r:
            self._wall: dict[int, int] = issued_barriers(r)  # barrier -> wall ms issued
        self._issued: list[int] = list(self._wall)  # in order (LMDB keys are big-endian)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ issuing

    def issue(self) -> int:
        """Issue a barrier now: a fresh timestamp, durably recorded before it is announced."""
        # _issue_lock keeps barriers in ts order; _mu is never held across a store write, because
        # epoch actions (run by the group committer) take it to check a barrier.
        with self._issue_lock:
            ts = self.tso.now()
            wall = _now_ms()
            self.store.run_write(
                lambda ctx: ctx.buf.put(
                    "meta", barrier_key(ts), json.dumps({"wall_ms": wall}).encode()
                )
            )
            with self._mu:
                self._issued.append(ts)
                self._wall[ts] = wall
        fail_point("barrier.issued")
        return ts

    def start(self) -> None:
        """Issue one barrier now and then one every interval, on a daemon thread."""
        self.issue()
        self._thread = threading.Thread(target=self._run, name="barriers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        next_at = time.monotonic() + self.interval_s
        next_prune = time.monotonic() + 60
        poll = min(0.05, self.interval_s / 4)
        while not self._stop.wait(max(0.0, min(poll, next_at - time.monotonic()))):
            try:
                now = time.monotonic()
                if now >= next_at:
                    self.issue()
                    next_at += self.interval_s
                    if next_at < now:  # fell behind (a long pause): do not burst
                        next_at = now + self.interval_s
                self._track_roots()
                if now >= next_prune:
                    self.prune()
                    next_prune = now + 60
            except Exception:  # noqa: BLE001 - keep issuing; a store error is logged and retried
                log.exception("barrier tick failed")

    def _track_roots(self) -> None:
        newest = self.newest()
        if not newest:
            return
        topo = self.registry.topology()
        tables = self.store.list_tables()
        with self._roots_mu:
            # A dropped table's history goes; a table created again under its name (another
            # id) starts its own.
            live = {info.name: info.id for info in tables}
            for name in [n for n, i in self._root_ids.items() if live.get(n) != i]:
                self._root_reached.pop(name, None)
                del self._root_ids[name]
        for info in tables:
            if self.is_view_table(info.name, info.kind, topo):
                continue
            seen = self.root_reached(info.name)[0]
            if seen >= newest:
                continue
            b = self.root_newest(info.name)
            if b > seen:
                with self._roots_mu:
                    self._root_ids[info.name] = info.id
                    hist = self._root_reached.setdefault(info.name, deque(maxlen=ROOT_HISTORY))
                    hist.append((b, _now_ms()))

    def prune(self) -> int:
        """Drop barriers (and view versions) older than the retention; a view keeps its newest.
        (Only when GC is off: with GC on, ``prune_below`` follows the safepoint instead.)"""
        if self.retention_s is None:
            return 0
        cutoff_ms = _now_ms() - int(self.retention_s * 1000)
        with self._mu:
            old = [t for t in self._issued if self._wall[t] < cutoff_ms]
        return self._prune(old)

    def prune_below(self, safepoint: int) -> int:
        """Drop barriers below the GC safepoint, and view versions at them (a view keeps its
        newest): nothing can be read there any more. Returns how many records went."""
        with self._mu:
            i = bisect.bisect_left(self._issued, safepoint)
            old = self._issued[:i]
        return self._prune(old)

    def _prune(self, old: list[int]) -> int:
        with self._mu:
            if not old or len(old) == len(self._issued):
                old = old[:-1]  # never drop the newest barrier
            if not old:
                return 0
            cut = old[-1] + 1

        def act(ctx: WriteContext) -> int:
            n = 0
            for t in old:
                ctx.buf.delete("meta", barrier_key(t))
            for k, v in list(ctx.reader.iter_prefix("meta", VIEW_NEWEST_PREFIX)):
                table = k[len(VIEW_NEWEST_PREFIX) :].decode()
                newest = int(v)
                p = view_version_prefix(table)
                for vk, _ in ctx.reader.items_between("meta", p, view_version_key(table, cut)):
                    if barrier_of_key(vk) != newest:
                        ctx.buf.delete("meta", vk)
                        n += 1
            return n

        n = self.store.run_write(act)
        with self._mu:
            drop = set(old)
            self._issued = [t for t in self._issued if t not in drop]
            for t in drop:
                self._wall.pop(t, None)
        return len(old) + n

    # ------------------------------------------------------------------ queries

    def newest(self) -> int:
        with self._mu:
            return self._issued[-1] if self._issued else 0

    def wall_ms(self, ts: int) -> int:
        with self._mu:
            return self._wall.get(ts, 0)

    def is_issued(self, ts: int) -> bool:
        with self._mu:
            return ts in self._wall

    def issued_after(self, after: int, upto: int = 0, limit: int = 64) -> list[int]:
        """Issued barriers in (after, upto] (upto 0: no bound), oldest first, at most ``limit``."""
        with self._mu:
            i = bisect.bisect_right(self._issued, after)
            out = self._issued[i : i + limit]
        return [t for t in out if not upto or t <= upto]

    def issued_at_or_below(self, ts: int, limit: int) -> list[int]:
        """Issued barriers <= ts, newest first, at most ``limit``."""
        with self._mu:
            i = bisect.bisect_right(self._issued, ts)
            return self._issued[max(0, i - limit) : i][::-1]

    def count_after(self, ts: int) -> int:
        with self._mu:
            return len(self._issued) - bisect.bisect_right(self._issued, ts)

    def root_newest(self, table: str, resolved: int | None = None) -> int:
        """The newest barrier a root table has: the newest issued barrier <= its resolved ts."""
        r = self.store.resolved_ts(table) if resolved is None else resolved
        got = self.issued_at_or_below(r, 1)
        return got[0] if got else 0

    def root_reached(self, table: str) -> tuple[int, int]:
        """The newest barrier the barrier thread saw root ``table`` reach, and the wall ms when
        it first saw it; (0, 0) if never."""
        with self._roots_mu:
            hist = self._root_reached.get(table)
            return hist[-1] if hist else (0, 0)

    def root_reached_at(self, table: str, barrier: int) -> int:
        """The wall ms at which root ``table`` reached ``barrier``, as the barrier thread saw it
        (to within one poll, <= 50 ms): when it first saw the table at ``barrier`` or later,
        having seen it below ``barrier`` before. 0 when not known: not remembered (older than
        ROOT_HISTORY reaches, or before this process started) or not reached yet."""
        with self._roots_mu:
            hist = list(self._root_reached.get(table, ()))
        i = bisect.bisect_left(hist, (barrier, 0))
        return hist[i][1] if 0 < i < len(hist) else 0

    @staticmethod
    def is_view_table(table: str, kind: str, topo: Topology) -> bool:
        """View semantics (versions only at committed barriers) for tables of kind view and for
        any table a MaterializedView job writes."""
        if kind == "view":
            return True
        w = topo.writer_of(table)
        return w is not None and w.is_view

    @staticmethod
    def view_version(reader: Reader, table: str, ts: int) -> ViewVersion | None:
        raw = reader.get("meta", view_version_key(table, ts))
        return None if raw is None else ViewVersion.from_json(ts, raw)

    @staticmethod
    def view_newest(reader: Reader, table: str) -> int:
        raw = reader.get("meta", view_newest_key(table))
        return int(raw) if raw else 0

    # ------------------------------------------------------------------ epoch hooks

    def check_open(self, reader: Reader, job: str, epoch: int) -> None:
        """A view job's epochs are barriers: refuse to open one that was never issued."""
        rec = self.registry.get_in(reader, job)
        if rec is not None and rec.is_view and not self.is_issued(epoch):
            raise InvalidArgument(
                f"job {job!r} maintains view {rec.sink!r}: epoch {epoch} is not an issued "
                f"barrier (newest barrier: {self.newest()})"
            )

    def record_view_barrier(
        self, ctx: WriteContext, job: str, epoch: int, start_ts: int, commit_ts: int, primary: bytes
    ) -> None:
        """Inside the commit action of (job, epoch): record the view's version at barrier
        ``epoch`` (its read ts is ``commit_ts``). A no-op for jobs that are not views."""
        rec = self.registry.get_in(ctx.reader, job)
        if rec is None or not rec.is_view:
            return
        # Did the epoch write anything besides its primary? Its locks are still indexed under
        # start_ts (the secondaries are resolved after the primary's commit).
        changed = has_secondaries(ctx.reader, start_ts, primary)
        table = rec.sink
        prev = self.view_newest(ctx.reader, table)
        version = ViewVersion(epoch, commit_ts, _now_ms(), changed, prev, job)
        ctx.buf.put("meta", view_version_key(table, epoch), version.to_json())
        if epoch > prev:
            ctx.buf.put("meta", view_newest_key(table), str(epoch).encode())
        fail_point("epoch.barrier.recorded")
