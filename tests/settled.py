"""The check that a data directory stopped growing, shared by the GC soak and its self-test.

Why a slack that depends on the run's length: the data directory of a GC'd store does not stay
at one size, it settles onto a plateau. Its height is the live data plus every version still
held (the retention, a leased snapshot's hold) and LMDB's pages not yet reusable while a read
transaction is open, so it moves with the write rate over the last hold window: the 45 s run of
``make test`` was seen to step from 1.74 to 1.94 MB at 38 s (CI, a busy machine whose writer sped
up once Spark's view job settled) and then stay, and a 150 s run to sit at 1.85-1.92 MB from
50 s to the end. A store that does not collect grows by everything written: 40 commits a second
of 5 rows of ~200 bytes is ~1 MB in the 25 s a short run compares over, over 50% of its size.
So a short run allows 25% (a plateau step passes, no collection fails) and a run of two minutes or
more, compared from a third of its length where the plateau is reached, allows 10%.
"""

from __future__ import annotations

# The samples: (seconds since the start, data dir bytes, LMDB used bytes).
Sample = tuple[float, int, int]

LONG_RUN_S = 120.0


def slack_for(run_s: float) -> float:
    """The fraction the end may exceed the reference sample by, for a run of ``run_s``."""
    return 0.10 if run_s >= LONG_RUN_S else 0.25


def settled_failure(sizes: list[Sample], run_s: float, from_s: float = 20.0) -> str | None:
    """None when the data directory stopped growing; else a message listing every sample.

    The reference is the first sample at or after ``max(from_s, run_s / 3)`` (once the longest
    hold has been through a whole cycle); the end is the last sample. The end may exceed the
    reference by ``slack_for(run_s)``."""
    ref = next((s for s in sizes if s[0] >= max(run_s / 3, from_s)), None)
    if ref is None or ref is sizes[-1]:
        return f"too few samples to compare: {_listed(sizes)}"
    end = sizes[-1]
    if end[1] <= ref[1] * (1 + slack_for(run_s)):
        return None
    return (
        f"data dir {ref[1] / 1e6:.2f} MB at {ref[0]:.0f}s grew to {end[1] / 1e6:.2f} MB at "
        f"{end[0]:.0f}s (over {slack_for(run_s):.0%}): {_listed(sizes)}"
    )


def _listed(sizes: list[Sample]) -> str:
    return ", ".join(f"{t:.0f}s {d / 1e6:.2f}/{u / 1e6:.2f} MB" for t, d, u in sizes)
