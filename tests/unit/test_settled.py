"""Self-test of the GC soak's size check (tests/settled.py): it fails a store that keeps growing
and passes one that steps onto a plateau."""

from __future__ import annotations

from tests.settled import settled_failure, slack_for


def _samples(size_at, run_s: float) -> list[tuple[float, int, int]]:
    return [(t, size_at(t), size_at(t)) for t in range(2, int(run_s) + 1, 2)]


def test_a_store_that_does_not_collect_fails():
    # What no GC looks like in the short run: the base plus 40 KB a second.
    msg = settled_failure(_samples(lambda t: 500_000 + 40_000 * t, 46), 45)
    assert msg is not None and "grew to" in msg and "46s" in msg


def test_a_slow_leak_fails_a_long_run():
    # 4 KB a second (a record per barrier that is never pruned) over 5 minutes.
    assert settled_failure(_samples(lambda t: 1_800_000 + 4_000 * t, 300), 300) is not None


def test_the_step_seen_in_ci_passes_the_short_run():
    # CI, 45 s: 1.74 MB from 16 s, 1.93 MB from 38 s.
    assert settled_failure(_samples(lambda t: 1_740_000 if t < 38 else 1_940_000, 46), 45) is None


def test_a_plateau_passes_and_the_reference_waits_for_it():
    # Filling until 30 s, flat after: a 150 s run compares from 50 s.
    assert settled_failure(_samples(lambda t: min(t, 30) * 60_000 + 100_000, 150), 150) is None


def test_the_slack_is_tighter_for_a_long_run():
    assert slack_for(45) > slack_for(300)


def test_too_few_samples_is_a_failure_not_a_pass():
    assert settled_failure([(2.0, 1, 1), (4.0, 1, 1)], 45) is not None
