"""An open epoch is a hold with an owner (issue 24, item 8): once its writer stops renewing it
(no heartbeat) for the server's ``--epoch-ttl``, it stops holding the GC safepoint and is settled
through its primary; ``snapview jobs release JOB`` does the same on request. Against a real
``snapview serve`` with a 1 s epoch TTL and a safepoint that moves every 200 ms."""

from __future__ import annotations

import json
import time

import pytest

import coordinator
from coordinator.server.revisions import RevisionManager
from kvstore.errors import Aborted, NotFound
from kvstore.mvcc.records import LockOp
from kvstore.store import LocalStore
from tests.conftest import cli, client_fixture, server_fixture, wait_for
from tests.integration.test_epochs import commit_behind_the_server

EPOCH_TTL_S = 1.0
LOCK_TTL_MS = 500  # shorter than the server's TTL: the server's binds


# History of half a second and a safepoint that moves every 200 ms: every wait is short.
srv = server_fixture(
    "epoch_holds", *f"--retention 500ms --gc-interval 200ms --epoch-ttl {EPOCH_TTL_S}s".split()
)
c = client_fixture("srv")


def _sink(c, name):
    c.create_table(name, "id BIGINT, v BIGINT", primary_key=["id"])
    c.jobs.register_job(name, name, [], kind="sink")
    return name


def _open(c, job, batch, owner, rows=()):
    """Open the epoch of ``batch`` under ``owner`` and prewrite ``rows`` ({id: v}) into it."""
    e = c.jobs.open_transaction(job, 0, LOCK_TTL_MS, batch=batch, owner=owner)
    info = c.describe_table(job)
    muts = [
        (LockOp.PUT, info.key_codec.encode({"id": k}), info.row_codec.encode({"id": k, "v": v}))
        for k, v in rows
    ]
    if muts:
        c.prewrite(muts, e.primary_key, e.start_ts, LOCK_TTL_MS)
    return e


def _holds_of(c, job):
    return [h for h in c.gc_status().holds if h.kind == "job" and h.name.startswith(f"{job} (")]


def _rows(c, table):
    return {r["id"]: r["v"] for r in c.read(table).to_pylist()}


def test_an_epoch_nobody_renews_stops_holding_and_the_next_attempt_succeeds(c, table_name):
    """A writer opens an epoch, prewrites a row and goes away (no heartbeat, no abort): after
    the epoch TTL the safepoint passes it, the epoch is recorded ABORTED (its row never became
    visible), and the job's next run opens the next epoch and commits it."""
    job = _sink(c, table_name)
    stale = _open(c, job, "q1:0", "run-1", [(1, 10)])
    assert any("open epoch" in h.name for h in _holds_of(c, job))
    wait_for(lambda: c.gc_status().safepoint > stale.start_ts, 10 * EPOCH_TTL_S, "the safepoint")
    assert not _holds_of(c, job)
    assert c.jobs.get_epoch(job, stale.epoch).state.value == "aborted"
    with pytest.raises(Aborted):
        c.jobs.commit_transaction(job, stale.epoch, stale.start_ts)
    nxt = _open(c, job, "q2:0", "run-2", [(1, 11)])
    assert nxt.epoch == stale.epoch  # the aborted epoch is the next to write, as a fresh one
    done = c.jobs.commit_transaction(job, nxt.epoch, nxt.start_ts)
    assert done.committed and _rows(c, job) == {1: 11}


def test_a_renewed_epoch_keeps_holding(c, table_name):
    """Heartbeats renew the hold: an epoch kept alive for two and a half TTLs still holds the safepoint
    below its start and commits."""
    job = _sink(c, table_name)
    e = _open(c, job, "q1:0", "run-1", [(1, 1)])
    for _ in range(int(2.5 * EPOCH_TTL_S / 0.25)):
        c.jobs.heartbeat_transaction(job, e.epoch, e.start_ts, LOCK_TTL_MS)
        assert c.gc_status().safepoint < e.start_ts
        time.sleep(0.25)  # a heartbeat's pace, not a wait for a condition
    assert c.jobs.commit_transaction(job, e.epoch, e.start_ts, "").committed
    assert _rows(c, job) == {1: 1}


def test_a_lapsed_epoch_whose_primary_committed_stays_committed(srv, c, table_name):
    """Settling goes through the primary: an epoch whose primary committed (its writer died
    right after) is recorded COMMITTED, never rolled back; exactly once."""
    job = _sink(c, table_name)
    e = _open(c, job, "q1:0", "run-1", [(1, 7)])
    # the moment of truth, then silence (behind the server: no RPC decides an epoch)
    commit_behind_the_server(srv.data_dir, e.start_ts, c.tso(), e.primary_key)
    wait_for(
        lambda: c.jobs.get_epoch(job, e.epoch).committed, 10 * EPOCH_TTL_S, "the epoch settled"
    )
    assert _rows(c, job) == {1: 7}
    nxt = _open(c, job, "q2:0", "run-2", [(1, 8)])
    assert nxt.epoch == e.epoch + 1
    c.jobs.commit_transaction(job, nxt.epoch, nxt.start_ts)
    assert _rows(c, job) == {1: 8}


def test_jobs_release_settles_the_open_epoch_at_once(srv, c, table_name):
    """``snapview jobs release JOB`` rolls the job's open epoch back at once (no TTL to wait
    for), says so and what the job still holds; a second release finds nothing open; an unknown
    job is an error naming it; ``--unregister`` frees the rest."""
    job = _sink(c, table_name)
    first = _open(c, job, "q1:0", "run-1")
    c.jobs.commit_transaction(job, first.epoch, first.start_ts, '{"sources": {"feed": 5}}')
    e = _open(c, job, "q1:1", "run-1", [(1, 1)])
    # Kept alive, so only the release can end it.
    c.jobs.heartbeat_transaction(job, e.epoch, e.start_ts, 60_000)
    addr = ["--address", srv.address]
    leases = cli("leases", *addr).stdout
    assert f"{job} (open epoch {e.epoch}; lapses in" in leases, leases
    assert "snapview jobs release JOB" in leases, leases
    r = cli("jobs", "release", job, *addr)
    assert r.returncode == 0, r.stderr
    assert f"open epoch {e.epoch}" in r.stdout and "rolled back" in r.stdout, r.stdout
    assert "still holds the GC safepoint" in r.stdout, r.stdout  # its feed position
    assert c.jobs.get_epoch(job, e.epoch).state.value == "aborted"
    assert not any("open epoch" in h.name for h in _holds_of(c, job))
    with pytest.raises(Aborted):
        c.jobs.commit_transaction(job, e.epoch, e.start_ts)
    assert _rows(c, job) == {}
    again = cli("jobs", "release", job, "--format", "json", *addr)
    assert again.returncode == 0 and json.loads(again.stdout)["released"] is False
    missing = cli("jobs", "release", f"{job}_none", *addr)
    assert missing.returncode != 0 and f"{job}_none" in missing.stderr
    gone = cli("jobs", "release", job, "--unregister", *addr)
    assert gone.returncode == 0 and "unregistered" in gone.stdout, gone.stdout
    wait_for(lambda: not _holds_of(c, job), 5, "the job's holds to go")


def test_release_by_owner_leaves_another_owners_epoch(c, table_name):
    """A stopping writer releases only the epoch it opened (``owner``), never a newer run's."""
    job = _sink(c, table_name)
    e = _open(c, job, "q1:0", "run-2")
    assert not c.jobs.release_job(job, owner="run-1").released
    assert c.jobs.get_epoch(job, e.epoch).state.value == "prewrite"
    r = c.jobs.release_job(job, owner="run-2")
    assert r.released and r.epoch.start_ts == e.start_ts
    with pytest.raises(NotFound, match="never"):
        c.jobs.release_job("never_ran")


def test_a_late_task_of_an_aborted_writer_can_neither_reopen_nor_take_over(c, table_name):
    """Spark cancels a failed write's tasks asynchronously: a task of the aborted write may ask
    for its epoch after the abort. It is refused (Aborted, naming the job and the writer),
    before the next write opens (it would reopen the aborted batch) and after (opening the
    job's next epoch would roll the next write's attempt back). A run that takes a batch over
    retires the run it replaced the same way; other writers are untouched."""
    job = _sink(c, table_name)
    failed = _open(c, job, "save:a", "writer-a", [(1, 1)])
    c.jobs.abort_transaction(job, failed.epoch, failed.start_ts)
    with pytest.raises(Aborted, match=rf"{job}.*writer-a"):
        _open(c, job, "save:a", "writer-a")  # before the next write
    assert c.jobs.get_epoch(job, failed.epoch).state.value == "aborted"
    nxt = _open(c, job, "save:b", "writer-b", [(2, 2)])
    with pytest.raises(Aborted, match="writer-a"):
        _open(c, job, "save:a", "writer-a")  # after it: it must not roll writer-b back
    assert c.jobs.get_epoch(job, nxt.epoch).start_ts == nxt.start_ts
    assert c.jobs.commit_transaction(job, nxt.epoch, nxt.start_ts).committed
    assert _rows(c, job) == {2: 2}
    # A restarted run replays batch q:3 of a run that died with it open: it takes it over.
    dead = _open(c, job, "q:3", "run-old", [(3, 3)])
    replay = _open(c, job, "q:3", "run-new", [(3, 4)])
    assert replay.epoch == dead.epoch and replay.start_ts != dead.start_ts
    with pytest.raises(Aborted, match="run-old"):
        _open(c, job, "q:3", "run-old")  # the old run's zombie task
    assert c.jobs.commit_transaction(job, replay.epoch, replay.start_ts).committed
    assert _rows(c, job) == {2: 2, 3: 4}


def test_a_writer_whose_open_epoch_another_batch_settled_is_retired(c, table_name):
    """Another writer's batch opening the job's next epoch rolls back the open attempt of the
    first writer and retires it too: its late task cannot then open an epoch and roll the
    second writer's attempt back in turn."""
    job = _sink(c, table_name)
    _open(c, job, "save:x", "writer-x", [(1, 1)])
    y = _open(c, job, "save:y", "writer-y", [(2, 2)])
    with pytest.raises(Aborted, match="writer-x"):
        _open(c, job, "save:x", "writer-x")
    assert c.jobs.commit_transaction(job, y.epoch, y.start_ts).committed
    assert _rows(c, job) == {2: 2}


def test_an_abandoned_correction_set_is_aborted(c, table_name):
    """A correction set begun and then abandoned (its client went away) holds the safepoint
    only for the epoch TTL; then its epoch is rolled back and its record ends ABORTED, with
    nobody asking about it."""
    c.create_table(table_name, "id BIGINT, v BIGINT", primary_key=["id"])
    begun = c.jobs.begin_corrections(table_name, "upsert", "test", LOCK_TTL_MS)
    rid, start = begun.revision.id, begun.epoch.start_ts
    assert any(h.kind == "revision" and f"revision {rid} " in h.name for h in c.gc_status().holds)
    wait_for(lambda: c.gc_status().safepoint > start, 10 * EPOCH_TTL_S, "the safepoint")
    assert c.revision(rid).state == "aborted"


def test_an_abandoned_correction_set_is_settled_by_the_gc_tick_across_a_kill(tmp_path):
    """A correction set begun, one row prewritten, and then the server killed with -9: after the
    restart the set holds the safepoint for one epoch TTL (renewals live in memory: it counts as
    renewed at the start), then the GC tick settles it with nobody listing or asking about
    revisions. Checked in the store itself once the server stopped: the record is ABORTED and
    the row's lock is gone."""
    from snapview.embedded import EmbeddedServer

    args = f"--retention 500ms --gc-interval 200ms --epoch-ttl {EPOCH_TTL_S}s".split()
    srv = EmbeddedServer(str(tmp_path / "data"), extra_args=args).start()
    try:
        with coordinator.connect(srv.address) as c:
            c.create_table("fixes", "id BIGINT, v BIGINT", primary_key=["id"])
            begun = c.jobs.begin_corrections("fixes", "upsert", "test", LOCK_TTL_MS)
            info = c.describe_table("fixes")
            key = info.key_codec.encode({"id": 1})
            put = (LockOp.PUT, key, info.row_codec.encode({"id": 1, "v": 1}))
            c.prewrite([put], begun.epoch.primary_key, begun.epoch.start_ts, LOCK_TTL_MS)
        srv.kill()
        rid, start = begun.revision.id, begun.epoch.start_ts
        assert _stored(tmp_path, rid, key) == ("running", True)
        srv.start()
        with coordinator.connect(srv.address) as c:
            held = [h for h in c.gc_status().holds if f"revision {rid} " in h.name]
            assert held and held[0].ts == start - 1  # held again after the restart...
            wait_for(lambda: c.gc_status().safepoint > start, 10 * EPOCH_TTL_S, "the safepoint")
    finally:
        srv.stop()
    assert _stored(tmp_path, rid, key) == ("aborted", False)  # ...and settled by the tick alone


def _stored(tmp_path, rid, key) -> tuple[str, bool]:
    """Revision ``rid``'s state and whether ``key`` is locked, read from the stopped server's
    store as it is (no settling on the way, as GetRevision and ListRevisions do)."""
    store = LocalStore(str(tmp_path / "data" / "lmdb"), sync=False)
    try:
        with store.storage.read_txn() as r:
            rec = RevisionManager.load(r, rid)
            assert rec is not None
            return rec.state, r.get_lock(key) is not None
    finally:
        store.close()
