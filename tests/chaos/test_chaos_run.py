"""The short seeded chaos run of `make test` (`make chaos` runs the long one)."""

from __future__ import annotations

from tests.chaos.nemesis import FAULTS
from tests.chaos.runner import ChaosConfig, run


def test_short_seeded_bank_run_is_valid():
    lines: list[str] = []
    faults = tuple(f for f in FAULTS if f != "kill-executor")  # local[2]: no executor processes
    s = run(ChaosConfig(duration=70, seed=11, fault_every=6, faults=faults), out=lines.append)
    assert s.valid, "\n".join(lines)
    assert sum(s.faults.values()) >= 5 and len(s.faults) >= 3, s.faults
    assert s.reads >= 100 and s.view_versions >= 30
    assert s.ops["transfer ok"] >= 300
    assert lines[-1] == "VALID"
