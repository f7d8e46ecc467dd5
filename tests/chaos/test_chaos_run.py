"""The short seeded chaos run of `make test` (`make chaos` runs the long one)."""

from __future__ import annotations

import pytest

from snapview.chaos.nemesis import FAULTS
from snapview.chaos.runner import ChaosConfig, run


# 128 to 186 s on an idle 2-core machine; with another Spark session busy beside it, more than
# the suite's 300 s (the run's own waits are bounded: it stops by itself).
@pytest.mark.timeout(900)
def test_short_seeded_bank_run_is_valid():
    lines: list[str] = []
    faults = tuple(f for f in FAULTS if f != "kill-executor")  # local[2]: no executor processes
    s = run(ChaosConfig(duration=70, seed=11, fault_every=5, faults=faults), out=lines.append)
    report = "\n".join(lines)  # every assertion shows the run's report
    assert s.valid, report
    # The next fault waits for recovery from the last, and a killed view driver takes 20-35 s to
    # come back on 2 cores: 4 to 7 faults fit in 70 s, depending on the machine's load.
    assert sum(s.faults.values()) >= 4 and len(s.faults) >= 3, report
    assert s.reads >= 100 and s.view_versions >= 30, report
    assert s.ops["transfer ok"] >= 300, report
    assert lines[-1] == "VALID", report
