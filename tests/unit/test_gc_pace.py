"""GC's pace follows what it finds (issue 25's soak: a rewritten table's old version was collected
only about as fast as the next rewrite came, and the data file grew): after a step that found
much to collect the collector sleeps a third as long, after a walk over settled keys it keeps its
pace; a pass after nothing changed walks nothing. On a real LMDB store, with the server's own
GC manager."""

from __future__ import annotations

import pytest

from coordinator.server.barriers import Barriers
from coordinator.server.core import Core
from coordinator.server.gc import (
    DEFAULT_PACE,
    MIN_PAUSE_S,
    PRODUCTIVE_PACE_FACTOR,
    GcManager,
    step_pause,
)
from coordinator.server.registry import Registry
from coordinator.server.tso import TimestampOracle
from kvstore.actions.gc import GcCursor, GcStep
from kvstore.store import LocalStore
from kvstore.testing import Kv
from tests.conftest import wait_for

KEYS = 300


@pytest.fixture
def gc_and_kv(tmp_path):
    store = LocalStore(str(tmp_path / "lmdb"), sync=False)
    tso = TimestampOracle(store)
    store.use_clock(tso)
    registry = Registry(store)
    barriers = Barriers(store, tso, registry, 1.0)
    gc = GcManager(Core(store, tso, registry, barriers), retention_s=0, interval_s=0)
    try:
        yield gc, Kv(store), tso
    finally:
        store.close()


def _write_all(kv: Kv, tso: TimestampOracle, value: str) -> None:
    for k in range(KEYS):
        start = tso.now()
        kv.must_prewrite_put(k, value, k, start)
        kv.must_commit(k, start, tso.now())


def _first_step(gc: GcManager, tso: TimestampOracle) -> tuple[float, GcStep]:
    """The first step of a pass at a safepoint above everything written so far (the retention
    hold, now - 0 s, passes it within a millisecond)."""
    written = tso.now()
    wait_for(lambda: gc.tick() and gc.store.safepoint > written, 5, "the safepoint to move")
    gc._begin_pass()
    return gc._step()


def test_a_rewrite_makes_the_collector_hurry_and_settled_keys_do_not(gc_and_kv):
    gc, kv, tso = gc_and_kv
    _write_all(kv, tso, "a")
    _write_all(kv, tso, "b")  # every key rewritten: half the versions are history
    took, step = _first_step(gc, tso)
    assert step.versions >= KEYS // 2 and step.examined
    assert step_pause(took, step, DEFAULT_PACE) == pytest.approx(
        max(MIN_PAUSE_S, took * DEFAULT_PACE * PRODUCTIVE_PACE_FACTOR)
    )
    while not gc._cursor.done:  # finish the pass
        gc._step()
    # Nothing changed since: the next pass is incremental and has nothing to walk. A restarted
    # server's first pass is a full one, a walk over settled keys that keeps the pace.
    took, step = _first_step(gc, tso)
    assert step.examined == 0 and step.next.done
    restarted = GcManager(gc.core, retention_s=0, interval_s=0)
    took, step = _first_step(restarted, tso)
    assert step.versions == 0 and step.examined >= KEYS
    assert step_pause(took, step, DEFAULT_PACE) == max(MIN_PAUSE_S, took * DEFAULT_PACE)


def test_the_pause_rule_at_its_edges():
    done = GcCursor(phase="done")
    assert step_pause(0.01, GcStep([], 25, 100, done), 3.0) == pytest.approx(0.01)
    assert step_pause(0.01, GcStep([], 24, 100, done), 3.0) == pytest.approx(0.03)
    assert step_pause(0.0, GcStep([], 0, 0, done), 3.0) == MIN_PAUSE_S
