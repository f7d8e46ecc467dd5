"""An epoch's secondaries are resolved after its commit in bounded steps (EpochManager.
_resolve_secondaries), so a large epoch never holds the store's writer for the whole of it;
a durable record per epoch lets a restart finish every resolution a crash cut short. Real LMDB
store and TSO."""

from __future__ import annotations

import pytest

from coordinator.server.epochs import EpochManager
from coordinator.server.meta import RESOLVING_PREFIX
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


def _markers(store: LocalStore) -> list[bytes]:
    with store.storage.read_txn() as r:
        return [k for k, _ in r.iter_prefix("meta", RESOLVING_PREFIX)]


def test_the_record_of_an_epoch_being_resolved_goes_with_its_last_step(parts):
    """The commit writes the epoch's ``resolving/`` record; the step that resolves its last
    lock deletes it."""
    store, kv, epochs = parts
    _epoch(kv, epochs, 1, range(2 * PER_REQUEST))
    wait_for(lambda: _locks(store) == 0, 30, "every secondary resolved")
    wait_for(lambda: not _markers(store), 5, "the resolving record deleted")


def test_a_restart_finishes_every_epoch_the_steps_left(parts, monkeypatch):
    """Resolution cut short (as by a crash) for two epochs of one job, one after the other:
    recover() at the next start finishes both, not only the job's last committed epoch, and
    leaves no record behind."""
    store, kv, epochs = parts
    store.finisher.close()  # a dead process finishes nothing: what is left waits for recover()
    real = actions.resolve_locks_step
    cut = [True]

    def step(ctx, start_ts, commit_ts, limit):
        if cut[0]:
            raise RuntimeError("the process died here")
        return real(ctx, start_ts, commit_ts, limit)

    monkeypatch.setattr(actions, "resolve_locks_step", step)
    total = 2 * PER_REQUEST
    first = _epoch(kv, epochs, 1, range(total))
    _epoch(kv, epochs, 2, range(total, 2 * total))
    assert _locks(store) == 2 * total  # nothing resolved
    assert len(_markers(store)) == 2
    cut[0] = False
    assert EpochManager(store, epochs.tso).recover() == 2 * total
    assert _locks(store) == 0 and _markers(store) == []
    for k in (0, total - 1):
        kv.must_get(k, first, "e1")
