"""Shrinking a failing walk: delta debugging (Zeller's ddmin) over the op list.

Each trial replays a candidate subsequence on a fresh server and data dir; it "still fails" when
it breaks the same invariant (the violation's ``invariant``, e.g. ``view_equals_query`` or
``error:txn:TableNotFound``). Ops replay meaningfully in any subsequence (see ``ops``), so a
chunk can be dropped anywhere. Shrinking stops at a 1-minimal sequence or when the time budget
runs out, returning the shortest failing sequence found so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from tests.lifecycle.ops import Op


def shrink(
    ops: list[Op],
    invariant: str,
    cfg,
    spark_factory: Callable[[], object] | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> list[Op]:
    """The shortest subsequence of ``ops`` found within ``cfg.shrink_s`` that still breaks
    ``invariant`` (``ops`` itself if none shorter does)."""
    from tests.lifecycle.walk import execute

    deadline = time.monotonic() + cfg.shrink_s
    trials = 0
    # A trial runs `snapview check` only when that is what failed (a subprocess per check).
    trial_cfg = replace(cfg, run_check=invariant in ("check", "error:final check"))

    def fails(candidate: list[Op]) -> bool:
        nonlocal trials
        trials += 1
        t0 = time.monotonic()
        res = execute(candidate, trial_cfg, spark_factory)
        same = res.failure is not None and res.failure.invariant == invariant
        verdict = "fails" if same else "passes"
        log(
            f"  shrink trial {trials}: {len(candidate)} ops -> {verdict} ({time.monotonic() - t0:.1f}s)"
        )
        return same

    best = list(ops)
    n = 2
    while len(best) >= 2 and time.monotonic() < deadline:
        size = -(-len(best) // n)
        chunks = [best[i : i + size] for i in range(0, len(best), size)]
        reduced = False
        # Drop later chunks first: the failing op is last, and what leads up to it is early.
        for k in reversed(range(len(chunks))):
            if time.monotonic() >= deadline:
                break
            candidate = [op for j, c in enumerate(chunks) if j != k for op in c]
            if candidate and fails(candidate):
                best, n, reduced = candidate, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(best):
                break
            n = min(n * 2, len(best))
    log(f"shrunk {len(ops)} -> {len(best)} ops in {trials} trials")
    return best
