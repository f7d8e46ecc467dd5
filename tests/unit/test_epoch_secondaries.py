"""An epoch's secondaries are resolved after its commit in bounded steps (EpochManager.
_resolve_secondaries), so a large epoch never holds the store's writer for the whole of it,
and a job's next commit finishes what is left in its own write. Real LMDB store and TSO."""

from __future__ import annotations

import pytest

from coordinator.server.epochs import EpochManager
from coordinator.server.tso import TimestampOracle
from kvstore import actions
from kvstore.mvcc import LockOp
from kvstore.store import LocalStore
from kvstore.testing import Kv
from tests.conftest import wait_for

REQUESTS, PER_REQUEST = 4, 5_000  # four bulk prewrites: four lock ranges of 5,000 locks


@pytest.fixture
def parts(tmp_path):
    store = LocalStore(str(tmp_path / "lmdb"), sync=False)
    tso = TimestampOracle(store)
    store.use_clock(tso)
    try:
        yield store, Kv(store), EpochManager(store, tso)
    finally:
        store.close()


def _locks(store: LocalStore) -> int:
    """Locks in the table, counted inside a write: ordered with the writer's queue."""
    return store.committer.run(lambda ctx: sum(1 for _ in ctx.reader.iter_range("lock", b"", None)))


def _epoch(kv: Kv, epochs: EpochManager, epoch: int, ks: range) -> int:
    e = epochs.open("job", epoch)
    for i in range(ks.start, ks.stop, PER_REQUEST):
        part = range(i, min(i + PER_REQUEST, ks.stop))
        kv.store.prewrite(
            [(LockOp.PUT, kv.key(k), kv.row(k, f"e{epoch}")) for k in part],
            e.primary_key,
            e.start_ts,
        )
    return epochs.commit("job", epoch, e.start_ts).commit_ts


def test_a_large_epochs_secondaries_leave_the_writer_to_others_between_steps(parts):
    """A write queued right after the commit runs while most of the epoch's locks are still
    there (one write for all of them made it wait for every one); then all resolve, and every
    row reads at the commit ts."""
    store, kv, epochs = parts
    total = REQUESTS * PER_REQUEST
    commit_ts = _epoch(kv, epochs, 1, range(total))
    left = _locks(store)
    assert 0 < left < total, f"{left} of {total} locks left when the next write ran"
    wait_for(lambda: _locks(store) == 0, 30, "every secondary resolved")
    for k in (0, PER_REQUEST, total - 1):
        kv.must_get(k, commit_ts, "e1")


def test_the_jobs_next_commit_finishes_what_the_steps_left(parts, monkeypatch):
    """With the steps stalled, the job's next commit resolves the last epoch's locks in its own
    write: only a job's newest committed epoch can ever have locks left (recover() finishes
    those after a crash)."""
    store, kv, epochs = parts
    real = actions.resolve_locks_step
    stalled = [True]

    def step(ctx, start_ts, commit_ts, limit):
        return (0, True) if stalled[0] else real(ctx, start_ts, commit_ts, limit)

    monkeypatch.setattr(actions, "resolve_locks_step", step)
    total = 2 * PER_REQUEST
    first = _epoch(kv, epochs, 1, range(total))
    assert _locks(store) == total  # nothing resolved: the steps are stalled
    _epoch(kv, epochs, 2, range(total, total + 1))
    try:
        assert _locks(store) <= 1  # epoch 1's all gone; at most epoch 2's own secondary
        for k in (0, total - 1):
            kv.must_get(k, first, "e1")
    finally:
        stalled[0] = False
    wait_for(lambda: _locks(store) == 0, 30, "epoch 2's secondaries resolved")
