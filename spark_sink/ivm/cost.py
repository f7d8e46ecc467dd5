"""The choice, per epoch, among the three ways to maintain a view under ``auto``: a delta on the
driver, a delta on the executors (``spark_sink.ivm.executor_delta``) and a build, from costs
measured on this view.

A delta's time grows with the barrier's change; a build's with the sources. The model keeps the
last MAX_SAMPLES delta epochs of each delta path as (changed keys, seconds) and fits
``seconds = a * keys ** b`` when they span several sizes (``power``), else ``fixed + per_key *
keys`` with a prior (``fit``), and the last build's seconds. The executor path's prior has a
larger fixed cost (a Spark job of three stages: about 2 s on our 2-core machines) and a smaller
cost per key (the work is spread over the executors' cores, and no row passes through the
driver), so it takes over from the driver's delta past a few tens of thousands of changed keys
until its own measurements say otherwise. Before an epoch, the changed keys of every source are
counted on the server up to the break-even count (``ChangeBoundary``, a count of change-index
entries: cheap), and the epoch is a build exactly when the cheaper delta's estimate reaches the
build's. All measurements are kept in each epoch's metadata, so a restarted job chooses as well
as the one before it. Until a view has measured a path the priors below stand in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

PRIOR_FIXED_S = 0.05  # an epoch's fixed cost (open, commit) on our 2-core machines
PRIOR_PER_KEY_S = 100e-6  # a changed key through the delta rules (bench_views: 1.2k keys, 0.13 s)
PRIOR_KEYS = 1_000  # the weight of the prior, in measured keys
PRIOR_EXECUTOR_FIXED_S = 2.0  # a Spark job: changes read, two shuffles, prewrites from the tasks
PRIOR_EXECUTOR_PER_KEY_S = 40e-6  # the driver's per-key cost over the executors' cores, and less
MAX_SAMPLES = 16
MAX_COUNT = 10_000_000  # the most changed keys counted before an epoch


@dataclass
class Samples:
    """One delta path's measured epochs, (changed keys, seconds), the newest last, and its
    priors."""

    points: list[tuple[int, float]] = field(default_factory=list)
    prior_fixed_s: float = PRIOR_FIXED_S
    prior_per_key_s: float = PRIOR_PER_KEY_S

    def record(self, keys: int, seconds: float) -> None:
        self.points = [*self.points, (keys, seconds)][-MAX_SAMPLES:]

    def fit(self) -> tuple[float, float]:
        """(fixed seconds, seconds per changed key) of an epoch on this path. The fixed cost is
        bounded by the fastest epoch; the per-key cost pools every sample's time above it with
        the prior counted as PRIOR_KEYS keys, so a few tiny epochs (whose time is all fixed
        cost) cannot make a large change look free, and many keys measured outweigh the
        prior."""
        fixed = min([self.prior_fixed_s] + [t for _, t in self.points])
        above = sum(max(0.0, t - fixed) for _, t in self.points)
        keys = sum(n for n, _ in self.points)
        return fixed, (above + self.prior_per_key_s * PRIOR_KEYS) / (keys + PRIOR_KEYS)

    def power(self) -> tuple[float, float] | None:
        """(a, b) of ``seconds = a * keys ** b`` fitted in log-log space when the samples span
        sizes at least 3x apart, else None. A delta's cost per key falls as the change grows
        (one request reads many keys; an aggregate's groups saturate: 100,000 changes of a
        10,000-group view touch each group once), so a line through small epochs overestimates a
        large one (bench_views --crossover: 1,000 keys 0.19 s, 10,000 keys 1.05 s, 100,000 keys
        4.45 s). b is kept within [0.5, 1]."""
        pts = [(math.log(n), math.log(t)) for n, t in self.points if n > 0 and t > 0]
        if len(pts) < 2:
            return None
        xs = [x for x, _ in pts]
        if max(xs) - min(xs) < math.log(3):
            return None
        mx = sum(xs) / len(xs)
        my = sum(y for _, y in pts) / len(pts)
        b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x in xs)
        b = min(1.0, max(0.5, b))
        return math.exp(my - b * mx), b

    def seconds(self, keys: int) -> float:
        """The estimated seconds of an epoch on this path over ``keys`` changed keys."""
        pw = self.power()
        if pw is not None and keys > 0:
            a, b = pw
            return a * keys**b
        fixed, per_key = self.fit()
        return fixed + per_key * keys

    def break_even(self, build_s: float) -> int:
        """The fewest changed keys for which an epoch on this path is estimated to take at
        least ``build_s``."""
        pw = self.power()
        if pw is not None:
            a, b = pw
            n = (build_s / a) ** (1 / b)
        else:
            fixed, per_key = self.fit()
            n = (build_s - fixed) / per_key
        return max(1, min(MAX_COUNT, int(n) + 1))


def _executor_samples(points: list[tuple[int, float]] | None = None) -> Samples:
    return Samples(list(points or []), PRIOR_EXECUTOR_FIXED_S, PRIOR_EXECUTOR_PER_KEY_S)


@dataclass
class CostModel:
    """The measured costs of one view's epochs: its driver deltas, its executor deltas and its
    last build."""

    driver: Samples = field(default_factory=Samples)
    build_s: float | None = None  # the last build's seconds
    executors: Samples = field(default_factory=_executor_samples)

    @classmethod
    def from_fields(cls, fields: dict) -> CostModel:
        c = fields.get("cost") or {}
        return cls(
            Samples([(int(n), float(t)) for n, t in c.get("deltas", [])]),
            c.get("build_s"),
            _executor_samples([(int(n), float(t)) for n, t in c.get("executors", [])]),
        )

    def as_field(self) -> dict:
        out: dict = {
            "deltas": [[n, round(t, 4)] for n, t in self.driver.points],
            "build_s": self.build_s,
        }
        if self.executors.points:
            out["executors"] = [[n, round(t, 4)] for n, t in self.executors.points]
        return out

    @property
    def deltas(self) -> list[tuple[int, float]]:
        """The driver's measured delta epochs."""
        return self.driver.points

    def record_delta(self, keys: int, seconds: float) -> None:
        self.driver.record(keys, seconds)

    def record_executor_delta(self, keys: int, seconds: float) -> None:
        self.executors.record(keys, seconds)

    def record_build(self, seconds: float) -> None:
        self.build_s = seconds

    def fit(self) -> tuple[float, float]:
        """The driver delta's (fixed seconds, seconds per key) (``Samples.fit``)."""
        return self.driver.fit()

    def power(self) -> tuple[float, float] | None:
        """The driver delta's power law (``Samples.power``)."""
        return self.driver.power()

    def delta_s(self, keys: int) -> float:
        """The estimated seconds of a delta epoch on the driver over ``keys`` changed keys."""
        return self.driver.seconds(keys)

    def executor_delta_s(self, keys: int) -> float:
        """The estimated seconds of a delta epoch on the executors over ``keys`` changed keys."""
        return self.executors.seconds(keys)

    def break_even(self, executors: bool = False) -> int:
        """The fewest changed keys for which a build is estimated to be no slower than a delta
        on the driver (or, with ``executors``, than the cheaper of the two delta paths)."""
        if self.build_s is None:
            return MAX_COUNT
        n = self.driver.break_even(self.build_s)
        if executors:
            n = max(n, self.executors.break_even(self.build_s))
        return n


def rule() -> str:
    """The rule, for ``explain()``."""
    return (
        "auto, per barrier: count the changed keys (up to the break-even count); a delta on "
        "the driver and one on the executors are each estimated from this view's recent epochs "
        "on that path (a x keys^b, or fixed + per_key x keys), a build at its last build's "
        "time; the cheapest runs, and progress().last_why says which and why"
    )
