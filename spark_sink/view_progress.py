"""What a view job did: ``Progress`` (a strategy's counters, updated by the epoch runner of
``spark_sink.view_epoch``), ``ViewProgress`` (their frozen report, ``ViewJob.progress()``) and
``Laps`` (one epoch's seconds per step)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kvstore.mvcc.timestamp import physical_ms


@dataclass
class Progress:
    """What a view job did since it started (the strategy's counters; ``ViewJob.progress()``
    turns them into a ViewProgress)."""

    first_barrier: int = 0  # the first barrier this run committed
    last_barrier: int = 0
    barriers: int = 0  # epochs committed by this run
    recomputed: int = 0  # ... of which ran the query
    unchanged: int = 0  # ... of which no source had changed (recorded without writing)
    skipped: int = 0  # barriers found already committed (a replay)
    mutations: int = 0
    last_epoch_s: float = 0.0  # the last committed epoch, = sum(last_steps.values())
    last_steps: dict = field(default_factory=dict)  # seconds per step of that same epoch
    recompute_seconds: list[float] = field(default_factory=list)  # epochs that ran the query
    # The last committed epoch: how it was made (full_recompute, build or delta), change rows
    # read, keyed reads made, mutations written.
    last_strategy: str = ""
    last_changes: int = 0
    last_lookups: int = 0
    last_mutations: int = 0
    last_why: str = ""

    def as_dict(self) -> dict:
        return {
            "first_barrier": self.first_barrier,
            "last_barrier": self.last_barrier,
            "barriers": self.barriers,
            "recomputed": self.recomputed,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
            "mutations": self.mutations,
            "last_epoch_s": round(self.last_epoch_s, 4),
            "last_steps": {k: round(v, 4) for k, v in self.last_steps.items()},
            "last_strategy": self.last_strategy,
            "last_changes": self.last_changes,
            "last_lookups": self.last_lookups,
            "last_mutations": self.last_mutations,
            "last_why": self.last_why,
        }


class Laps:
    """Consecutive steps of one epoch: ``lap(name)`` charges the time since the previous lap to
    ``name``, so the steps always add up to the whole epoch."""

    def __init__(self) -> None:
        self._t = time.perf_counter()
        self.steps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.steps[name] = self.steps.get(name, 0.0) + now - self._t
        self._t = now

    def elapsed(self) -> float:
        """Seconds since the epoch began (the laps so far and the time since the last)."""
        return sum(self.steps.values()) + time.perf_counter() - self._t


def _wall(ts: int) -> datetime | None:
    return datetime.fromtimestamp(physical_ms(ts) / 1000, tz=UTC) if ts else None


@dataclass(frozen=True)
class ViewProgress:
    """``ViewJob.progress()``: what a view job did since it started and where the coordinator
    says it is. Barriers are TSO timestamps; each ``*_wall`` beside one is its wall time (UTC,
    the timestamp's physical part), None for 0 (none yet). ``last_epoch_s`` is the duration of the
    last committed epoch of this run and equals the sum of ``last_steps`` (seconds per step of
    that same epoch: ``open``, then, if it ran the query, ``load``, ``analyze`` and either
    ``run``, ``diff``, ``write`` (every source small: the driver path) or ``run_diff_write`` (the
    executor path: the query, the key check, the diff and the prewrites in one Spark pipeline),
    then ``commit``). ``p["barriers"]`` works as well as ``p.barriers``."""

    job: str
    target: str
    strategy: str
    active: bool
    committed_barrier: int  # the coordinator's last committed epoch of the job (0: none)
    first_barrier: int  # the first barrier this run committed (0: none yet)
    last_barrier: int
    barriers: int  # epochs committed by this run
    recomputed: int  # ... of which ran the query
    unchanged: int  # ... of which no source had changed (recorded without running it)
    skipped: int  # barriers found already committed (a replay)
    mutations: int
    last_epoch_s: float
    last_steps: Mapping[str, float]
    # How the last committed epoch was made: "full_recompute", or for an incremental view
    # "build" (the whole query, at its first barrier) or "delta"; the change rows it read, the
    # keyed reads it made and the mutations it wrote.
    last_strategy: str = ""
    last_changes: int = 0
    last_lookups: int = 0
    last_mutations: int = 0
    # Why the last epoch was made that way: for an incremental view under ``auto``, the cost
    # choice with its figures (estimated delta vs build seconds), or why a build was needed.
    last_why: str = ""

    @property
    def committed_barrier_wall(self) -> datetime | None:
        return _wall(self.committed_barrier)

    @property
    def first_barrier_wall(self) -> datetime | None:
        return _wall(self.first_barrier)

    @property
    def last_barrier_wall(self) -> datetime | None:
        return _wall(self.last_barrier)

    @property
    def barrier_wall_ms(self) -> int:
        """The wall time of ``committed_barrier``, in ms since the epoch (0 for none)."""
        return physical_ms(self.committed_barrier) if self.committed_barrier else 0

    def __getitem__(self, key: str) -> object:
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def __str__(self) -> str:
        def at(ts: int) -> str:
            w = _wall(ts)
            return f"{ts} ({w.isoformat(timespec='milliseconds')})" if w else "none"

        steps = ", ".join(f"{k} {v:.3f}s" for k, v in self.last_steps.items())
        return "\n".join(
            [
                f"view {self.target} (job {self.job}, {self.strategy}, "
                f"{'active' if self.active else 'stopped'})",
                f"  committed barrier: {at(self.committed_barrier)}",
                f"  this run:          {self.barriers} epochs from {at(self.first_barrier)} to "
                f"{at(self.last_barrier)}: {self.recomputed} recomputed, {self.unchanged} "
                f"unchanged, {self.skipped} skipped (already committed), {self.mutations} "
                "mutations",
                f"  last epoch:        {self.last_epoch_s:.3f}s ({steps or 'none yet'})",
                f"                     {self.last_strategy or 'none'}: {self.last_changes} "
                f"change rows read, {self.last_lookups} keyed reads, {self.last_mutations} "
                "mutations",
                f"                     why: {self.last_why or '-'}",
            ]
        )
