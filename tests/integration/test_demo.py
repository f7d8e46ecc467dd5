"""make demo's job, shortened: transfers from several processes, the total never changes."""

from __future__ import annotations

from coordinator.demo_bank import run_bank_demo


def test_bank_demo_total_unchanged():
    """The demo finishes with 0 violations over its snapshot reads and an exact final total."""
    lines: list[str] = []
    assert run_bank_demo(duration_s=3, accounts=200, writers=2, out=lines.append) == 0
    assert any(" violations=0" in ln for ln in lines)
    summary = lines[-1]
    assert summary.startswith("done:") and "final total 200000 (expected 200000)" in summary
    transfers = int(summary.split()[1])
    assert transfers > 0
