"""The choice, per epoch, between a delta and a build for a view maintained under ``auto``, from
costs measured on this view.

A delta's time grows with the barrier's change; a build's with the sources. The model keeps the
last MAX_SAMPLES delta epochs as (changed keys, seconds) and fits ``seconds = a * keys ** b``
when they span several sizes (``CostModel.power``), else ``fixed + per_key * keys`` with a prior
(``CostModel.fit``), and the last build's seconds. Before an epoch, the changed keys of every source are
counted on the server up to the break-even count (``ChangeBoundary``, a count of change-index
entries: cheap), and the epoch is a build exactly when the delta's estimate reaches the build's.
Both measurements are kept in each epoch's metadata, so a restarted job chooses as well as the
one before it. Until a view has measured a delta the priors below stand in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

PRIOR_FIXED_S = 0.05  # an epoch's fixed cost (open, commit) on our 2-core machines
PRIOR_PER_KEY_S = 100e-6  # a changed key through the delta rules (bench_views: 1.2k keys, 0.13 s)
PRIOR_KEYS = 1_000  # the weight of the prior, in measured keys
MAX_SAMPLES = 16
MAX_COUNT = 10_000_000  # the most changed keys counted before an epoch


@dataclass
class CostModel:
    deltas: list[tuple[int, float]] = field(default_factory=list)  # (changed keys, seconds)
    build_s: float | None = None  # the last build's seconds

    @classmethod
    def from_fields(cls, fields: dict) -> CostModel:
        c = fields.get("cost") or {}
        return cls([(int(n), float(t)) for n, t in c.get("deltas", [])], c.get("build_s"))

    def as_field(self) -> dict:
        return {"deltas": [[n, round(t, 4)] for n, t in self.deltas], "build_s": self.build_s}

    def record_delta(self, keys: int, seconds: float) -> None:
        self.deltas = [*self.deltas, (keys, seconds)][-MAX_SAMPLES:]

    def record_build(self, seconds: float) -> None:
        self.build_s = seconds

    def fit(self) -> tuple[float, float]:
        """(fixed seconds, seconds per changed key) of a delta epoch. The fixed cost is bounded
        by the fastest delta; the per-key cost pools every sample's time above it with the prior
        counted as PRIOR_KEYS keys, so a few tiny epochs (whose time is all fixed cost) cannot
        make a large change look free, and many keys measured outweigh the prior."""
        fixed = min([PRIOR_FIXED_S] + [t for _, t in self.deltas])
        above = sum(max(0.0, t - fixed) for _, t in self.deltas)
        keys = sum(n for n, _ in self.deltas)
        return fixed, (above + PRIOR_PER_KEY_S * PRIOR_KEYS) / (keys + PRIOR_KEYS)

    def power(self) -> tuple[float, float] | None:
        """(a, b) of ``seconds = a * keys ** b`` fitted in log-log space when the samples span
        sizes at least 3x apart, else None. A delta's cost per key falls as the change grows
        (one request reads many keys; an aggregate's groups saturate: 100,000 changes of a
        10,000-group view touch each group once), so a line through small epochs overestimates a
        large one (bench_views --crossover: 1,000 keys 0.19 s, 10,000 keys 1.05 s, 100,000 keys
        4.45 s). b is kept within [0.5, 1]."""
        pts = [(math.log(n), math.log(t)) for n, t in self.deltas if n > 0 and t > 0]
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

    def delta_s(self, keys: int) -> float:
        """The estimated seconds of a delta epoch over ``keys`` changed keys."""
        pw = self.power()
        if pw is not None and keys > 0:
            a, b = pw
            return a * keys**b
        fixed, per_key = self.fit()
        return fixed + per_key * keys

    def break_even(self) -> int:
        """The fewest changed keys for which a build is estimated to be no slower."""
        if self.build_s is None:
            return MAX_COUNT
        pw = self.power()
        if pw is not None:
            a, b = pw
            n = (self.build_s / a) ** (1 / b)
        else:
            fixed, per_key = self.fit()
            n = (self.build_s - fixed) / per_key
        return max(1, min(MAX_COUNT, int(n) + 1))


def rule() -> str:
    """The rule, for ``explain()``."""
    return (
        "auto, per barrier: count the changed keys (up to the break-even count); a delta is "
        "estimated from this view's recent delta epochs (a x keys^b, or fixed + per_key x keys), "
        "a build at its last build's time; the cheaper runs, and progress().last_why says which "
        "and why"
    )
