"""Barriers, view versions, the job registry and consistent-snapshot planning, against a real
``snapview serve`` (barrier interval 100 ms)."""

from __future__ import annotations

import json

import pytest

import coordinator
from coordinator.errors import BarrierNotReached, SecondWriter, TopologyCycle
from coordinator.jobs import EpochState
from kvstore.errors import InvalidArgument, NotFound, TableNotFound
from kvstore.mvcc.records import LockOp
from snapview.embedded import EmbeddedServer
from tests.conftest import client_fixture, server_fixture, wait_for

fast = server_fixture("barriers", "--barrier-interval", "100ms")
c = client_fixture("fast")


def _root(c, name):
    c.create_table(name, "id BIGINT, v BIGINT", primary_key=["id"])
    return name


def _view(c, name, sources, job=None):
    c.create_table(name, "id BIGINT, v BIGINT", primary_key=["id"], kind="view")
    c.jobs.register_job(job or name, name, sources, kind="view", query="select ...")
    return name


def commit_epoch(c, job, barrier, rows=()):
    """Commit view job ``job``'s epoch for ``barrier`` writing ``rows`` into its sink."""
    e = c.jobs.open_transaction(job, barrier)
    if rows:
        sink = c.topology()
        sink = next(j.sink for j in sink.jobs if j.job == job)
        info = c.describe_table(sink)
        muts = [
            (LockOp.PUT, info.key_codec.encode({"id": r["id"]}), info.row_codec.encode(r))
            for r in rows
        ]
        c.prewrite(muts, e.primary_key, e.start_ts)
    return c.jobs.commit_transaction(job, barrier, e.start_ts)


def test_barriers_advance_when_nothing_changes(c, table_name):
    t = _root(c, table_name)
    b1 = c.snapshot([t], wait_s=5).barrier
    b2 = wait_for(
        lambda: (s := c.snapshot([t]).barrier) > b1 and s, timeout=10, what="a newer barrier"
    )
    assert b2 > b1


def test_root_snapshot_holds_exactly_the_commits_at_or_below_its_barrier(c, table_name):
    t = _root(c, table_name)
    with c.transaction() as txn:
        txn.put(t, {"id": 1, "v": 1})
    first = txn.commit_ts
    snap = wait_for(
        lambda: (s := c.snapshot([t])).barrier > first and s, timeout=10, what="barrier"
    )
    with c.transaction() as txn:
        txn.put(t, {"id": 2, "v": 2})
    assert snap.read_ts(t) == snap.barrier
    rows = snap.read(t).to_pylist()
    expect = [{"id": 1, "v": 1}] + ([{"id": 2, "v": 2}] if txn.commit_ts <= snap.barrier else [])
    assert rows == expect
    # the same snapshot reads the same rows later
    assert snap.read(t).to_pylist() == rows


def test_second_writer_and_cycles_are_refused(c, table_name):
    a, b, v = _root(c, table_name + "_a"), _root(c, table_name + "_b"), table_name + "_v"
    _view(c, v, [a])
    with pytest.raises(SecondWriter) as e:
        c.jobs.register_job("other_job", v, [b], kind="view")
    assert e.value.code == "ALREADY_EXISTS"
    assert v in str(e.value) and "other_job" in str(e.value) and repr(v) in str(e.value)
    # the same job again is fine (a restart), even with other sources
    c.jobs.register_job(v, v, [a, b], kind="view")
    # v2 reads v; making v read v2 would be a cycle
    v2 = _view(c, table_name + "_v2", [v])
    with pytest.raises(TopologyCycle) as e:
        c.jobs.register_job(v, v, [a, v2], kind="view")
    assert e.value.code == "FAILED_PRECONDITION"
    assert v2 in str(e.value) and f"{v} <- {v2} <- {v}" in str(e.value)
    with pytest.raises(TopologyCycle):
        c.jobs.register_job(v, v, [v], kind="view")
    # nothing changed by the refusals
    jobs = {j.job: j for j in c.topology().jobs}
    assert list(jobs[v].sources) == [a, b] and jobs[v].sink == v
    with pytest.raises(TableNotFound):
        c.jobs.register_job("j_missing", v2 + "_nope", [a])
    c.jobs.unregister_job(v2)
    c.jobs.register_job("new_writer", v2, [v], kind="view")  # free again after unregistering


def test_view_epochs_are_barriers_and_record_their_version(c, table_name):
    src = _root(c, table_name + "_s")
    v = _view(c, table_name + "_v", [src])
    with pytest.raises(InvalidArgument) as e:
        c.jobs.open_transaction(v, 12345)
    assert "not an issued barrier" in str(e.value) and repr(v) in str(e.value)

    with pytest.raises(BarrierNotReached):
        c.snapshot([src, v])  # the view has no version yet
    plan = c.jobs.plan_barriers(v)
    assert len(plan.barriers) == 1 and plan.last_committed == 0
    b1 = plan.barriers[0].barrier
    assert [(r.table, r.read_ts) for r in plan.barriers[0].reads] == [(src, b1)]
    done = commit_epoch(c, v, b1, [{"id": 1, "v": 10}])
    assert done.state is EpochState.COMMITTED

    snap = c.snapshot([src, v])
    assert snap.barrier == b1
    assert snap.read_ts(v) == done.commit_ts and snap.read_ts(src) == b1
    assert snap.read(v).to_pylist() == [{"id": 1, "v": 10}]

    # the next barriers come in order; nothing changed in src, so they say so
    wait_for(
        lambda: len(c.jobs.plan_barriers(v).barriers) >= 3, timeout=10, what="3 pending barriers"
    )
    plans = c.jobs.plan_barriers(v).barriers
    bs = [p.barrier for p in plans]
    assert bs == sorted(bs) and bs[0] > b1
    assert not any(r.changed for p in plans for r in p.reads)

    # an empty epoch records the barrier; a commit into src shows as a change
    e2 = commit_epoch(c, v, bs[0])
    with c.transaction() as txn:
        txn.put(src, {"id": 1, "v": 1})
    wait_for(
        lambda: [p for p in c.jobs.plan_barriers(v).barriers if p.barrier > txn.commit_ts],
        timeout=10,
        what="a barrier past the commit",
    )
    plans = c.jobs.plan_barriers(v).barriers
    # exactly the first barrier at or above the commit ts carries the change
    first_after = min(p.barrier for p in plans if p.barrier >= txn.commit_ts)
    assert {p.barrier for p in plans if p.reads[0].changed} == {first_after}
    snap2 = c.snapshot([src, v])
    assert snap2.barrier == bs[0] and snap2.read_ts(v) == e2.commit_ts
    # an older barrier is still readable, exactly as it was
    old = c.snapshot([src, v], barrier=b1)
    assert old.read_ts(v) == done.commit_ts
    # a committed barrier opened again says so (a replay skips it) and is not redone
    again = c.jobs.open_transaction(v, b1)
    assert again.state is EpochState.COMMITTED and again.commit_ts == done.commit_ts


def test_snapshot_modes_and_bad_requests(c, table_name):
    t = _root(c, table_name)
    latest = c.snapshot([t], mode="latest")
    assert latest.barrier == 0 and latest.read_ts(t) > 0
    with pytest.raises(InvalidArgument) as e:
        c.snapshot([t], mode="eventually")
    assert "eventually" in str(e.value)
    with pytest.raises(TableNotFound) as e:
        c.snapshot([t, "no_such_table"])
    assert "no_such_table" in str(e.value)
    with pytest.raises(NotFound):
        c.snapshot([t], barrier=7)
    with pytest.raises(InvalidArgument):
        c.snapshot([])
    with pytest.raises(NotFound) as e:
        c.snapshot([t], wait_s=1).read_ts("other")
    assert "other" in str(e.value)


def test_delay_reports_views_and_roots(c, table_name):
    src = _root(c, table_name + "_s")
    v = _view(c, table_name + "_v", [src])
    b = c.jobs.plan_barriers(v).barriers[0].barrier
    commit_epoch(c, v, b)
    wait_for(lambda: c.delay().newest_barrier > b, timeout=10, what="a newer barrier")
    rows = {d.table: d for d in c.delay().tables}
    assert rows[v].kind == "view" and rows[v].job == v and rows[v].barrier == b
    assert rows[v].barriers_behind >= 1 and rows[v].barrier_lag_ms > 0
    assert rows[v].e2e_delay_ms >= 0
    assert rows[src].kind == "root" and rows[src].barrier > b


def test_barriers_and_view_versions_survive_kill_9(tmp_path):
    srv = EmbeddedServer(str(tmp_path / "d"), extra_args=["--barrier-interval", "50ms"]).start()
    try:
        c = coordinator.connect(srv.address)
        src = _root(c, "s")
        v = _view(c, "v", [src])
        b = c.jobs.plan_barriers(v).barriers[0].barrier
        done = commit_epoch(c, v, b, [{"id": 7, "v": 7}])
        c.close()
        srv.kill()
        srv.start()
        c = coordinator.connect(srv.address)
        snap = c.snapshot([v])
        assert snap.barrier == b and snap.read_ts(v) == done.commit_ts
        assert snap.read(v).to_pylist() == [{"id": 7, "v": 7}]
        nxt = wait_for(
            lambda: c.jobs.plan_barriers(v).barriers, timeout=10, what="barriers after restart"
        )
        assert nxt[0].barrier > b
        assert {j.job for j in c.topology().jobs} == {v}
        c.close()
    finally:
        srv.stop()


def test_cli_topology_and_delay(fast, c, table_name):
    from tests.integration.test_server import cli

    src = _root(c, table_name + "_s")
    v = _view(c, table_name + "_v", [src])
    v2 = _view(c, table_name + "_w", [v])
    addr = ["--coordinator", fast.address]
    topo = json.loads(cli("topology", *addr, "--json").stdout)
    jobs = {j["job"]: j for j in topo["jobs"]}
    assert jobs[v2]["sources"] == [v] and jobs[v]["sources"] == [src]
    writers = {t["table"]: t["writer"] for t in topo["tables"]}
    assert writers[v] == v and writers[src] == ""
    dot = cli("topology", *addr, "--dot").stdout
    assert dot.startswith("digraph") and f'"{src}" -> "{v}" [label="{v}"];' in dot
    assert f'"{v}" -> "{v2}"' in dot
    text = cli("topology", *addr).stdout
    assert f"{src} -> {v}" in text
    b = c.jobs.plan_barriers(v).barriers[0].barrier
    commit_epoch(c, v, b)
    delay = json.loads(cli("delay", *addr, "--json").stdout)
    rows = {r["table"]: r for r in delay["tables"]}
    assert rows[v]["barrier"] == b and rows[v2]["barrier"] == 0
    assert delay["newest_barrier"] >= b
    assert "e2e_ms" in cli("delay", *addr).stdout
