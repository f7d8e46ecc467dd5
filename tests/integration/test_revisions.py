"""Revisions against a real ``snapview serve``: rolling a root table back (to a ts and to a
barrier), a revision revised again, correction sets from pyarrow, the dry run, the audit
record, the refusals, writers fenced while a rollback is applied, the GC pin, and a kill -9 in
the middle of a revision (applied wholly or not at all)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pyarrow as pa
import pytest

import coordinator
from kvstore.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SchemaMismatch,
    SnapshotTooOld,
    TableNotFound,
)
from snapview.cli import main as cli_main
from snapview.embedded import EmbeddedServer
from tests.conftest import client_fixture, server_fixture, wait_for
from tests.integration.test_metrics import scrape, value

srv = server_fixture("revise", "--barrier-interval", "100ms")
c = client_fixture("srv")


def _rows(c, table, at=None) -> dict[int, int]:
    return {r["id"]: r["v"] for r in c.read(table, at=at).to_pylist()}


def _put(c, table, rows: dict[int, int | None]) -> int:
    with c.transaction() as t:
        for k, v in rows.items():
            if v is None:
                t.delete(table, {"id": k})
            else:
                t.put(table, {"id": k, "v": v})
    return t.commit_ts


def _quietly(fn, *args, **kw) -> None:
    try:
        fn(*args, **kw)
    except Exception:  # noqa: BLE001 - the server was killed under it
        pass


def _table(c, name, n=5) -> int:
    c.create_table(name, "id BIGINT, v BIGINT", primary_key=["id"])
    return _put(c, name, {i: i * 10 for i in range(n)})


def test_rollback_to_a_ts_restores_the_table_and_keeps_history(c):
    t0 = _table(c, "rb_ts")
    before = _rows(c, "rb_ts")
    bad = _put(c, "rb_ts", {1: 999, 2: None, 7: 70})  # update, delete, insert
    rev = c.revise("rb_ts", to_ts=t0, who="alice")
    assert rev.done and rev.kind == "rollback" and rev.who == "alice"
    assert (rev.restored, rev.removed) == (2, 1)  # 1 and 2 get their values back, 7 goes
    assert _rows(c, "rb_ts") == before
    assert _rows(c, "rb_ts", at=rev.commit_ts) == before
    # History is kept: the bad state is still readable AS OF, just below the revision.
    bad_state = _rows(c, "rb_ts", at=rev.commit_ts - 1)
    assert bad_state == _rows(c, "rb_ts", at=bad)
    assert bad_state[1] == 999 and 2 not in bad_state and bad_state[7] == 70
    assert rev.start_ts < rev.commit_ts and rev.commit_ts > bad


def test_a_revision_can_be_revised_again(c):
    t0 = _table(c, "rb_again")
    bad = _put(c, "rb_again", {0: -1, 9: 9})
    first = c.revise("rb_again", to_ts=t0)
    assert 9 not in _rows(c, "rb_again")
    # Undo the undo: back to the bad state, as one more revision.
    second = c.revise("rb_again", to_ts=bad)
    assert second.id > first.id
    assert _rows(c, "rb_again") == _rows(c, "rb_again", at=bad)
    assert (second.restored, second.removed) == (2, 0)
    third = c.revise("rb_again", to_ts=first.commit_ts)
    assert _rows(c, "rb_again") == _rows(c, "rb_again", at=t0)
    assert third.rows == 2


def test_rollback_to_a_barrier_and_the_revision_barrier(c):
    t0 = _table(c, "rb_bar")
    good = dict(_rows(c, "rb_bar"))
    b = wait_for(lambda: (x := c.snapshot(["rb_bar"], wait_s=5).barrier) > t0 and x, 5, "a barrier")
    _put(c, "rb_bar", {3: 333})
    rev = c.revise("rb_bar", to_barrier=b)
    assert rev.target_barrier == b and rev.target_ts == b
    assert _rows(c, "rb_bar") == good
    # The revision is visible everywhere from the first barrier at or above its commit.
    barrier = c.wait_revised(rev, timeout_s=10)
    assert barrier > rev.commit_ts
    assert c.revision(rev.id).barrier == barrier
    assert c.snapshot(["rb_bar"], barrier=barrier).read("rb_bar").num_rows == len(good)


def test_dry_run_counts_and_writes_nothing(c):
    t0 = _table(c, "rb_dry")
    _put(c, "rb_dry", {0: 5, 8: 8, 4: None})
    now = _rows(c, "rb_dry")
    n_before = len(c.revisions())
    dry = c.revise("rb_dry", to_ts=t0, dry_run=True)
    assert dry.state == "dry_run" and dry.id == 0
    assert (dry.restored, dry.removed) == (2, 1)
    assert _rows(c, "rb_dry") == now
    assert len(c.revisions()) == n_before  # not recorded


def test_audit_record_lists_every_revision(c):
    t0 = _table(c, "rb_audit")
    _put(c, "rb_audit", {1: 1})
    rev = c.revise("rb_audit", to_ts=t0, who="bob@ops")
    listed = c.revisions(table="rb_audit")
    assert [r.id for r in listed] == [rev.id]
    r = listed[0]
    assert (r.who, r.kind, r.state, r.target_ts, r.rows) == ("bob@ops", "rollback", "done", t0, 1)
    assert r.started_wall_ms <= r.ended_wall_ms and r.ended_wall_ms > 0
    # ``barrier`` is 0 until the first barrier after the commit is issued, which may happen
    # between the two calls; the rest of the record never changes.
    got = c.revision(rev.id)
    assert dataclasses.replace(got, barrier=0) == dataclasses.replace(r, barrier=0)
    assert r.barrier in (0, got.barrier)
    with pytest.raises(NotFound, match="revision 987654"):
        c.revision(987654)


def test_refusals(c, srv):
    t0 = _table(c, "rb_refuse")
    with pytest.raises(TableNotFound, match="no_such_table"):
        c.revise("no_such_table", to_ts=t0)
    with pytest.raises(InvalidArgument, match="exactly one"):
        c.revise("rb_refuse", to_ts=t0, to_barrier=t0)
    with pytest.raises(InvalidArgument, match="exactly one"):
        c.revise("rb_refuse")
    with pytest.raises(NotFound, match="never issued"):
        c.revise("rb_refuse", to_barrier=t0)  # a ts, not a barrier
    with pytest.raises(InvalidArgument, match="future"):
        c.revise("rb_refuse", to_ts=c.tso() + (1 << 40))
    # A view's table: its contents follow from its sources; rebuild it instead.
    c.create_table("rb_view", "id BIGINT, v BIGINT", primary_key=["id"], kind="view")
    c.jobs.register_job("rb_view_job", "rb_view", ["rb_refuse"], kind="view")
    with pytest.raises(FailedPrecondition, match="rebuild"):
        c.revise("rb_view", to_ts=t0)
    with pytest.raises(FailedPrecondition, match="not a view"):
        c.rebuild("rb_refuse")
    with pytest.raises(InvalidArgument, match="mode"):
        c.revise("rb_refuse", corrections=pa.table({"id": [1], "v": [1]}), mode="merge")
    with pytest.raises(SchemaMismatch, match="column 'v'"):
        c.revise("rb_refuse", corrections=pa.table({"id": [1]}))
    c.create_table("rb_append", "v BIGINT", primary_key=[])
    with pytest.raises(FailedPrecondition, match="append-only"):
        c.jobs.begin_corrections("rb_append", "upsert", "x", 0)
    assert all(r.table not in ("rb_refuse", "rb_append") for r in c.revisions())


def test_target_below_the_gc_safepoint_is_snapshot_too_old(tmp_path):
    with (
        EmbeddedServer(
            str(tmp_path / "d"),
            extra_args=[
                "--barrier-interval",
                "100ms",
                "--retention",
                "1s",
                "--gc-interval",
                "200ms",
            ],
        ) as s,
        coordinator.connect(s.address) as c,
    ):
        t0 = _table(c, "old")
        _put(c, "old", {1: 1})
        wait_for(lambda: c.gc_status().safepoint > t0, 15, "the safepoint to pass t0")
        with pytest.raises(SnapshotTooOld, match="'old'.*GC safepoint"):
            c.revise("old", to_ts=t0)
        assert c.revisions() == []


def test_corrections_from_pyarrow_upsert_and_delete(c):
    _table(c, "corr")
    fix = pa.table({"id": [1, 2, 50], "v": [-1, -2, 500]})
    dry = c.revise("corr", corrections=fix, dry_run=True)
    assert (dry.state, dry.restored) == ("dry_run", 3)
    assert _rows(c, "corr")[1] == 10
    rev = c.revise("corr", corrections=fix, who="carol")
    assert rev.done and rev.kind == "corrections" and rev.mode == "upsert" and rev.restored == 3
    got = _rows(c, "corr")
    assert (got[1], got[2], got[50]) == (-1, -2, 500)
    gone = c.revise("corr", corrections=pa.table({"id": [0, 50]}), mode="delete")
    assert gone.removed == 2 and 0 not in _rows(c, "corr") and 50 not in _rows(c, "corr")
    # Both are one transaction each: the table before and after, nothing in between.
    assert _rows(c, "corr", at=rev.commit_ts - 1)[1] == 10
    assert [r.kind for r in c.revisions(table="corr")] == ["corrections", "corrections"]


def test_writers_wait_for_the_fence_and_then_conflict_or_commit(tmp_path):
    """While a rollback holds the fence (a fail point keeps it up for 3 s), a writer of the
    table waits (its prewrite is retried) and commits afterwards; one that read a key the
    revision changed before the revision conflicts. A writer of another table never waits."""
    with (
        EmbeddedServer(
            str(tmp_path / "d"),
            extra_args=["--barrier-interval", "100ms"],
            env={"SNAPVIEW_FAILPOINTS": "revision.fenced=sleep(3000)"},
            metrics_port=0,
        ) as s,
        coordinator.connect(s.address) as c,
    ):
        t0 = _table(c, "fenced")
        _table(c, "other")
        _put(c, "fenced", {1: 111})
        old_txn = c.transaction()  # starts before the revision
        old_txn.put("fenced", {"id": 1, "v": 1})
        done: list = []
        th = threading.Thread(target=lambda: done.append(c.revise("fenced", to_ts=t0)))
        th.start()
        wait_for(lambda: any(r.state == "running" for r in c.revisions("fenced")), 5, "fence")
        fams = scrape(s.metrics_address)
        assert value(fams, "snapview_tables_fenced") == 1
        assert value(fams, "snapview_revisions", kind="rollback", state="running") == 1
        with pytest.raises(FailedPrecondition, match="being revised"):
            c.drop_table("fenced")
        t = time.monotonic()
        _put(c, "other", {1: 1})
        assert time.monotonic() - t < 2.0  # another table is not fenced (this one is for 3 s)
        t = time.monotonic()
        late = _put(c, "fenced", {42: 42})  # waits for the fence, then commits
        waited = time.monotonic() - t
        th.join(10)
        rev = done[0]
        assert waited > 0.3 and late > rev.commit_ts
        assert _rows(c, "fenced") == {**_rows(c, "fenced", at=t0), 42: 42}
        with pytest.raises(coordinator.WriteConflict):
            old_txn.commit()  # it read key 1 before the revision rewrote it
        fams = scrape(s.metrics_address)
        assert value(fams, "snapview_tables_fenced") == 0
        assert value(fams, "snapview_revisions", kind="rollback", state="done") == 1
        assert value(fams, "snapview_revision_rows_total", kind="rollback") == rev.rows == 1


def test_rollback_pins_its_target_against_gc(tmp_path):
    with (
        EmbeddedServer(
            str(tmp_path / "d"),
            extra_args=[
                "--barrier-interval",
                "100ms",
                "--retention",
                "1s",
                "--gc-interval",
                "200ms",
            ],
            env={"SNAPVIEW_FAILPOINTS": "revision.fenced=sleep(6000)"},
        ) as s,
        coordinator.connect(s.address) as c,
    ):
        t0 = _table(c, "pinned")
        lease = c.lease(t0, ttl_s=30, holder="test")  # keeps t0 until the revision pins it
        _put(c, "pinned", {1: 1})
        done: list = []
        th = threading.Thread(target=lambda: done.append(c.revise("pinned", to_ts=t0)))
        th.start()
        wait_for(
            lambda: any(h.kind == "revision" for h in c.gc_status().holds), 5, "the revision hold"
        )
        lease.release()
        hold = next(h for h in c.gc_status().holds if h.kind == "revision")
        assert hold.ts == t0 and "pinned" in hold.name
        time.sleep(1.5)  # several GC ticks past the retention: the pin must hold
        assert c.gc_status().safepoint <= t0
        target = _rows(c, "pinned", at=t0)  # readable while pinned; GC may pass t0 after
        th.join(10)
        assert done[0].done and _rows(c, "pinned") == target
        assert all(h.kind != "revision" for h in c.gc_status().holds)


@pytest.mark.parametrize("point", ["revision.fenced", "revision.prewritten", "revision.applied"])
def test_kill_9_in_the_middle_of_a_revision(tmp_path, point):
    """kill -9 of the server with the table fenced (before the write) or right after the write:
    after a restart the revision is wholly applied or not at all, its record says which, and
    the fence is gone."""
    data = str(tmp_path / "d")
    s = EmbeddedServer(
        data,
        extra_args=["--barrier-interval", "100ms"],
        env={"SNAPVIEW_FAILPOINTS": f"{point}=panic"},
    ).start()
    try:
        c = coordinator.connect(s.address)
        t0 = _table(c, "crash", n=200)
        _put(c, "crash", {i: -i for i in range(0, 200, 2)} | {500: 5})
        bad = _rows(c, "crash")
        target = _rows(c, "crash", at=t0)
        # The call dies with the server (its client would retry for 30 s: not waited for).
        threading.Thread(target=lambda: _quietly(c.revise, "crash", to_ts=t0), daemon=True).start()
        assert s.wait_dead(10)
        c.close()
    finally:
        s.stop()
    with (
        EmbeddedServer(data, extra_args=["--barrier-interval", "100ms"]) as s2,
        coordinator.connect(s2.address) as c2,
    ):
        [rec] = c2.revisions(table="crash")
        now = _rows(c2, "crash")
        if point != "revision.applied":  # before the primary committed
            assert rec.state == "aborted" and "stopped" in rec.error
            assert now == bad  # nothing of it applied
        else:
            assert rec.state == "done" and rec.rows == 100  # key 0 was 0 both ways
            assert now == target  # all of it applied
        t = time.monotonic()
        _put(c2, "crash", {7: 7})  # the fence is gone: a writer gets through at once
        assert time.monotonic() - t < 5  # not after 30 s of retries
        again = c2.revise("crash", to_ts=t0)
        assert again.done and _rows(c2, "crash") == target


def test_cli_revise_dry_run_revisions_and_refusals(c, srv, capsys):
    t0 = _table(c, "cli_rev")
    _put(c, "cli_rev", {1: -1, 77: 7})
    addr = ["--address", srv.address]
    assert cli_main(["revise", "cli_rev", "--to-ts", str(t0), "--dry-run", *addr]) == 0
    out = capsys.readouterr().out
    assert "would change 2 rows (1 restored, 1 removed); nothing written" in out
    assert _rows(c, "cli_rev")[77] == 7
    assert cli_main(["revise", "cli_rev", "--to-ts", str(t0), "--who", "dora", *addr]) == 0
    out = capsys.readouterr().out
    assert "revision " in out and "2 rows" not in out and "1 restored, 1 removed" in out
    assert "revised: the whole topology shows revision" in out and "(cli_rev)" in out
    assert 77 not in _rows(c, "cli_rev")
    assert cli_main(["revisions", "--table", "cli_rev", "--format", "json", *addr]) == 0
    [rec] = json.loads(capsys.readouterr().out)
    assert (rec["who"], rec["kind"], rec["state"], rec["rows"]) == ("dora", "rollback", "done", 2)
    assert rec["target_ts"] == t0 and rec["barrier"] > rec["commit_ts"] > 0
    assert cli_main(["revisions", *addr]) == 0
    assert "dora" in capsys.readouterr().out
    assert cli_main(["revise", "nope", "--to-ts", str(t0), *addr]) == 1
    assert "snapview: error:" in capsys.readouterr().err
    assert cli_main(["rebuild", "cli_rev", *addr]) == 1
    assert "not a view" in capsys.readouterr().err


def test_reserved_job_names_and_a_rebuild_whose_view_is_dropped(c):
    _table(c, "rb_gone_src")
    for name in ("revision/5", "rollback/1"):
        with pytest.raises(FailedPrecondition, match="coordinator's own"):
            c.jobs.register_job(name, "rb_gone_src", [], kind="sink")
        with pytest.raises(FailedPrecondition, match="coordinator's own"):
            c.jobs.open_transaction(name, 1, 3000)
    c.create_table("rb_gone", "id BIGINT, v BIGINT", primary_key=["id"], kind="view")
    c.jobs.register_job("rb_gone_job", "rb_gone", ["rb_gone_src"], kind="view")
    rev = c.rebuild("rb_gone", who="ops")  # its job never runs
    assert c.rebuild("rb_gone").id == rev.id  # one pending request per view
    c.drop_table("rb_gone")
    gone = c.revision(rev.id)
    assert gone.state == "aborted" and "dropped" in gone.error


def test_an_open_correction_set_holds_the_gc_safepoint(c):
    _table(c, "corr_hold")
    begun = c.jobs.begin_corrections("corr_hold", "upsert", "x", 0)
    holds = [h for h in c.gc_status().holds if h.kind == "revision"]
    assert any(
        h.ts == begun.epoch.start_ts - 1 and f"revision {begun.revision.id}" in h.name
        for h in holds
    ), holds
    c.jobs.abort_transaction(begun.epoch.job, 1, begun.epoch.start_ts)
    assert c.revision(begun.revision.id).state == "aborted"
    assert all(f"revision {begun.revision.id} " not in h.name for h in c.gc_status().holds)


def test_a_committed_revision_is_never_reported_failed_and_a_key_makes_revise_idempotent(
    tmp_path,
):
    """Resolving the secondaries fails after the primary committed (the fail point
    ``revision.applied=error``): the call answers with the DONE revision, not an error. A call
    repeating its key answers with that same revision and undoes nothing written in between;
    another key runs a second revision; a key is refused for another target."""
    with (
        EmbeddedServer(
            str(tmp_path / "d"),
            extra_args=["--barrier-interval", "100ms", "--gc-interval", "200ms"],
            env={"SNAPVIEW_FAILPOINTS": "revision.applied=error"},
        ) as s,
        coordinator.connect(s.address) as c,
    ):
        t0 = _table(c, "applied")
        _put(c, "applied", {1: -1, 9: 9})
        rev = c.revise("applied", to_ts=t0, key="fix-1")
        assert rev.done and rev.key == "fix-1" and rev.commit_ts
        assert c.revision(rev.id).state == "done"
        assert _rows(c, "applied") == _rows(c, "applied", at=t0)
        _put(c, "applied", {2: 222})  # acknowledged after the revision
        again = c.revise("applied", to_ts=t0, key="fix-1")
        assert (again.id, again.commit_ts) == (rev.id, rev.commit_ts)
        assert _rows(c, "applied")[2] == 222  # not rolled back by the retry
        with pytest.raises(InvalidArgument, match="different key"):
            c.revise("applied", to_ts=rev.commit_ts, key="fix-1")
        other = c.revise("applied", to_ts=t0, key="fix-2")
        assert other.id != rev.id and other.done and _rows(c, "applied")[2] == 20
        assert [r.key for r in c.revisions("applied")] == ["fix-2", "fix-1"]
        # The CLI: `--key` again prints the key's revision instead of running another.
        addr = ["--address", s.address, "--no-wait", "--format", "json"]
        for _ in range(2):
            assert cli_main(["revise", "applied", "--to-ts", str(t0), "--key", "k3", *addr]) == 0
        assert len([r for r in c.revisions("applied") if r.key == "k3"]) == 1
