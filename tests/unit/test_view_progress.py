"""ViewJob.progress()'s ViewProgress: typed, readable, barriers with wall times beside them."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from kvstore.mvcc.timestamp import compose
from spark_sink import ViewProgress

MS = 1_795_000_000_123  # 2026-11-18T...


def progress(**over) -> ViewProgress:
    base = dict(
        job="bb",
        target="branch_balance",
        strategy="full_recompute",
        active=True,
        committed_barrier=compose(MS, 7),
        first_barrier=compose(MS - 5000, 1),
        last_barrier=compose(MS, 7),
        barriers=6,
        recomputed=2,
        unchanged=4,
        skipped=0,
        mutations=10,
        last_epoch_s=0.5,
        last_steps={"open": 0.1, "commit": 0.4},
    )
    base.update(over)
    return ViewProgress(**base)


def test_fields_dict_access_and_wall_times():
    p = progress()
    assert p["barriers"] == p.barriers == 6 and p["last_steps"] == {"open": 0.1, "commit": 0.4}
    with pytest.raises(KeyError):
        p["nope"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.barriers = 1  # type: ignore[misc]
    assert p.barrier_wall_ms == MS
    assert p.committed_barrier_wall == datetime.fromtimestamp(MS / 1000, tz=UTC)
    assert p.first_barrier_wall == datetime.fromtimestamp((MS - 5000) / 1000, tz=UTC)
    assert progress(committed_barrier=0).committed_barrier_wall is None
    assert progress(committed_barrier=0).barrier_wall_ms == 0
    assert p.as_dict()["committed_barrier"] == compose(MS, 7)


def test_str_is_readable():
    s = str(progress())
    wall = datetime.fromtimestamp(MS / 1000, tz=UTC).isoformat(timespec="milliseconds")
    assert s.splitlines()[0] == "view branch_balance (job bb, full_recompute, active)"
    assert f"committed barrier: {compose(MS, 7)} ({wall})" in s
    assert "6 epochs" in s and "2 recomputed, 4 unchanged" in s
    assert "last epoch:        0.500s (open 0.100s, commit 0.400s)" in s
    assert "none yet" in str(progress(last_steps={}, first_barrier=0))
