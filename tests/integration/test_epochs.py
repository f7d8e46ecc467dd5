"""Epoch transactions through the Coordinator service: idempotent per (job, epoch), persisted,
secondaries resolved after the primary, a crashed attempt rolled back on reopen."""

from __future__ import annotations

import os

import pytest

import coordinator
from coordinator.jobs import EpochState
from kvstore import actions
from kvstore.errors import Aborted, FailedPrecondition, NotFound
from kvstore.group_commit import WriteContext
from kvstore.mvcc.records import LockOp
from kvstore.storage import DEFAULT_MAP_SIZE, Reader, Storage, WriteBuffer
from snapview.embedded import EmbeddedServer


def _prewrite_rows(c, table: str, epoch_info, ids: list[int]) -> None:
    info = c.describe_table(table)
    muts = [
        (
            LockOp.PUT,
            info.key_codec.encode({"id": i}),
            info.row_codec.encode({"id": i, "epoch": epoch_info.epoch}),
        )
        for i in ids
    ]
    c.store.prewrite(muts, epoch_info.primary_key, epoch_info.start_ts)


def commit_behind_the_server(data_dir: str, start_ts: int, commit_ts: int, key: bytes) -> None:
    """Commit ``key`` of txn ``start_ts`` in the server's LMDB from this process, as the
    coordinator does before it records the epoch: the state a crash between the two leaves.
    (No RPC can do it: only the server decides an epoch's transaction.)"""
    storage = Storage(os.path.join(data_dir, "lmdb"), DEFAULT_MAP_SIZE, create=False)
    try:
        storage.env.set_mapsize(0)  # the size the server grew it to
        with storage.env.begin(write=True) as txn:
            ctx = WriteContext(Reader(storage, txn), WriteBuffer(txn, storage.cf))
            actions.commit_key(ctx, key, start_ts, commit_ts)
    finally:
        storage.close()


def test_epoch_commit_makes_secondaries_visible(client, table_name):
    """Rows prewritten under an epoch become visible, all at once, at its commit_ts."""
    client.create_table(table_name, "id BIGINT, epoch BIGINT", primary_key=["id"])
    job = f"job_{table_name}"
    e = client.jobs.open_transaction(job, 1)
    assert e.state is EpochState.PREWRITE and e.attempt == 1
    _prewrite_rows(client, table_name, e, list(range(100)))
    done = client.jobs.commit_transaction(job, 1, e.start_ts, metadata='{"offset": 7}')
    assert done.state is EpochState.COMMITTED and done.commit_ts > e.start_ts
    assert client.read(table_name, at=done.commit_ts).num_rows == 100
    assert client.read(table_name, at=done.commit_ts - 1).num_rows == 0
    assert client.jobs.get_epoch(job, 1).metadata == '{"offset": 7}'


def test_open_and_commit_are_idempotent(client, table_name):
    """Commit twice returns the same commit_ts; opening a committed epoch reports COMMITTED."""
    client.create_table(table_name, "id BIGINT, epoch BIGINT", primary_key=["id"])
    job = f"job_{table_name}"
    e = client.jobs.open_transaction(job, 5)
    _prewrite_rows(client, table_name, e, [1])
    a = client.jobs.commit_transaction(job, 5, e.start_ts)
    b = client.jobs.commit_transaction(job, 5, e.start_ts)
    assert a.commit_ts == b.commit_ts
    again = client.jobs.open_transaction(job, 5)
    assert again.state is EpochState.COMMITTED and again.commit_ts == a.commit_ts


def test_reopen_rolls_back_crashed_attempt(client, table_name):
    """Reopening an epoch left in PREWRITE rolls the old attempt back: its rows never appear,
    and committing the old attempt is refused."""
    client.create_table(table_name, "id BIGINT, epoch BIGINT", primary_key=["id"])
    job = f"job_{table_name}"
    first = client.jobs.open_transaction(job, 1)
    _prewrite_rows(client, table_name, first, [1, 2, 3])
    second = client.jobs.open_transaction(job, 1)  # the sink "crashed" and came back
    assert second.attempt == 2 and second.start_ts > first.start_ts
    _prewrite_rows(client, table_name, second, [4])
    with pytest.raises(FailedPrecondition, match="stale"):
        client.jobs.commit_transaction(job, 1, first.start_ts)
    client.jobs.commit_transaction(job, 1, second.start_ts)
    assert [r["id"] for r in client.read(table_name).to_pylist()] == [4]


def test_epoch_out_of_order_refused(client, table_name):
    """An epoch below the job's last committed one cannot be opened."""
    job = f"job_{table_name}"
    e = client.jobs.open_transaction(job, 10)
    client.jobs.commit_transaction(job, 10, e.start_ts)
    with pytest.raises(FailedPrecondition, match="out of order"):
        client.jobs.open_transaction(job, 9)
    with pytest.raises(NotFound, match="never opened"):
        client.jobs.commit_transaction(job, 11, 123)


def test_abort_discards_rows(client, table_name):
    """AbortTransaction rolls the attempt back; a later commit of it is ABORTED."""
    client.create_table(table_name, "id BIGINT, epoch BIGINT", primary_key=["id"])
    job = f"job_{table_name}"
    e = client.jobs.open_transaction(job, 1)
    _prewrite_rows(client, table_name, e, [1, 2])
    assert client.jobs.abort_transaction(job, 1, e.start_ts).state is EpochState.ABORTED
    with pytest.raises(Aborted):
        client.jobs.commit_transaction(job, 1, e.start_ts)
    assert client.read(table_name).num_rows == 0


def test_expired_epoch_is_rolled_back_by_readers(client, table_name):
    """A dead job's epoch: once its TTL runs out a reader rolls it back, and its commit is
    then refused with ABORTED (never half applied)."""
    client.create_table(table_name, "id BIGINT, epoch BIGINT", primary_key=["id"])
    job = f"job_{table_name}"
    e = client.jobs.open_transaction(job, 1, lock_ttl_ms=1)
    _prewrite_rows(client, table_name, e, [1, 2])
    assert client.read(table_name).num_rows == 0  # the reader resolves the expired locks
    with pytest.raises(Aborted, match="TTL"):
        client.jobs.commit_transaction(job, 1, e.start_ts)
    again = client.jobs.open_transaction(job, 1)
    assert again.state is EpochState.PREWRITE and again.attempt == 2


def test_heartbeat_keeps_epoch_alive(client, table_name):
    """HeartbeatTransaction extends the primary's TTL so readers wait instead of rolling back."""
    job = f"job_{table_name}"
    e = client.jobs.open_transaction(job, 1, lock_ttl_ms=50)
    client.jobs.heartbeat_transaction(job, 1, e.start_ts, ttl_ms=60_000)
    st = client.store.check_txn_status(e.primary_key, e.start_ts)
    assert st.status == "locked" and st.lock.ttl_ms >= 60_000


def test_stale_attempt_is_settled_through_its_primary(tmp_path):
    """Epoch records persist across kill -9. An attempt whose primary committed (but whose
    secondaries and record were not finished) is settled as committed, never rolled back, when
    the job moves on: the decision is read from the primary, not guessed."""
    srv = EmbeddedServer(str(tmp_path / "d")).start()
    try:
        c = coordinator.connect(srv.address)
        c.create_table("t", "id BIGINT, epoch BIGINT", primary_key=["id"])
        e = c.jobs.open_transaction("j", 1)
        _prewrite_rows(c, "t", e, list(range(10)))
        # commit only the primary, as if the coordinator died before resolve_locks
        commit_ts = c.tso()
        commit_behind_the_server(srv.data_dir, e.start_ts, commit_ts, e.primary_key)
        e2 = c.jobs.open_transaction("j", 2)
        c.close()
        srv.kill()
        srv.start()
        c = coordinator.connect(srv.address)
        assert c.jobs.get_epoch("j", 2).state is EpochState.PREWRITE
        assert c.jobs.get_epoch("j", 2).start_ts == e2.start_ts
        assert c.jobs.get_epoch("j", 1).state is EpochState.COMMITTED
        assert c.jobs.get_epoch("j", 1).commit_ts == commit_ts
        assert c.read("t").num_rows == 10
        c.close()
    finally:
        srv.stop()


def test_a_commit_computed_after_a_stale_epoch_is_refused(client, table_name):
    """A delta names the epoch it was computed after (``after_epoch``); if the job committed
    past it meanwhile (another run of the job), the commit is refused with Aborted and nothing
    of it is visible, so a change is never applied twice."""
    job = f"{table_name}-after"
    first = client.jobs.open_transaction(job, 1)
    client.jobs.commit_transaction(job, 1, first.start_ts, '{"after_epoch": 0}')
    second = client.jobs.open_transaction(job, 2)
    client.jobs.commit_transaction(job, 2, second.start_ts, '{"after_epoch": 1}')
    stale = client.jobs.open_transaction(job, 3)
    with pytest.raises(Aborted, match="after epoch 1.*newest committed epoch is 2"):
        client.jobs.commit_transaction(job, 3, stale.start_ts, '{"after_epoch": 1}')
    assert client.jobs.get_epoch(job, 3).state is not EpochState.COMMITTED
    again = client.jobs.open_transaction(job, 3)
    assert client.jobs.commit_transaction(job, 3, again.start_ts, '{"after_epoch": 2}').committed


def test_an_auto_epoch_carries_its_batch_and_owner(client, table_name):
    """An auto-numbered epoch's batch and owner come back from the server in every answer about
    it: open, heartbeat, commit, get, and a release's settled epoch."""
    job = f"job_{table_name}"
    e = client.jobs.open_transaction(job, 0, batch="q:7", owner="run-1")
    beat = client.jobs.heartbeat_transaction(job, e.epoch, e.start_ts, ttl_ms=60_000)
    done = client.jobs.commit_transaction(job, e.epoch, e.start_ts)
    for answer in (e, beat, done, client.jobs.get_epoch(job, e.epoch)):
        assert (answer.batch, answer.owner) == ("q:7", "run-1"), answer
    nxt = client.jobs.open_transaction(job, 0, batch="q:8", owner="run-2")
    assert nxt.epoch == e.epoch + 1 and (nxt.batch, nxt.owner) == ("q:8", "run-2")
    released = client.jobs.release_job(job)
    assert released.epoch is not None and released.epoch.state is EpochState.ABORTED
    assert (released.epoch.batch, released.epoch.owner) == ("q:8", "run-2")
