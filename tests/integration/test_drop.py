"""A drop takes everything of its tables with it (issue 24, items 4 and 9): the writer jobs'
epochs, progress and view versions, so a table or view recreated under the same name starts
clean; a job still running learns that its table was dropped (JobDropped naming it), its open
epoch can no longer commit, and nothing of it is left for ``snapview check`` to find."""

from __future__ import annotations

import pytest

from coordinator.errors import JobDropped
from coordinator.jobs import EpochState
from kvstore.direct import DirectPrewriter
from kvstore.errors import NotFound, TableNotFound
from kvstore.mvcc.records import LockOp
from tests.conftest import cli, client_fixture, wait_for

c = client_fixture("server")


def _rows(info, ids: list[int], v: int = 1) -> list:
    return [
        (LockOp.PUT, info.key_codec.encode({"id": i}), info.row_codec.encode({"id": i, "v": v}))
        for i in ids
    ]


def _sink_epoch(c, job: str, table: str, batch: str, owner: str, ids: list[int]):
    """One committed epoch of sink ``job`` writing ``ids`` into ``table``."""
    e = c.jobs.open_transaction(job, 0, batch=batch, owner=owner)
    assert e.state is EpochState.PREWRITE
    c.prewrite(_rows(c.describe_table(table, refresh=True), ids), e.primary_key, e.start_ts)
    return c.jobs.commit_transaction(job, e.epoch, e.start_ts)


def _view_epoch(c, job: str, view: str, ids: list[int]):
    """One committed epoch of view ``job`` at the next barrier it may take."""
    plans = wait_for(lambda: c.jobs.plan_barriers(job).barriers, 10, "a barrier to plan")
    e = c.jobs.open_transaction(job, plans[0].barrier)
    c.prewrite(_rows(c.describe_table(view, refresh=True), ids), e.primary_key, e.start_ts)
    return c.jobs.commit_transaction(job, e.epoch, e.start_ts)


def _create(c, root: str, view: str, sink_job: str, view_job: str) -> None:
    c.create_table(root, "id BIGINT, v BIGINT", primary_key=["id"])
    c.create_table(view, "id BIGINT, v BIGINT", primary_key=["id"], kind="view")
    c.jobs.register_job(sink_job, root, [], kind="sink")
    c.jobs.register_job(view_job, view, [root], kind="view", query=f"SELECT * FROM {root}")


def _holds(c) -> str:
    return " ".join(h.name for h in c.gc_status().holds)


def test_recreated_tables_and_jobs_start_clean(c, table_name):
    """Drop a root (cascade, taking its view) whose sink and view jobs committed epochs; the
    same names created and registered again have no epochs, no view versions, no holds: the
    sink's first batch is not deduplicated against the dropped table's, the view job plans from
    its first barrier."""
    root, view = f"{table_name}_r", f"{table_name}_v"
    sink_job, view_job = f"{table_name}-sink", f"{table_name}-view"
    _create(c, root, view, sink_job, view_job)
    first = _sink_epoch(c, sink_job, root, "q:0", "run-1", [1, 2])
    _view_epoch(c, view_job, view, [1, 2])
    assert view_job in _holds(c)
    old_ids = {c.describe_table(t).id for t in (root, view)}

    r = c.drop_table(root, cascade=True)
    assert set(r.unregistered_jobs) == {sink_job, view_job}
    assert sink_job not in _holds(c) and view_job not in _holds(c)
    with pytest.raises(JobDropped, match=repr(root)):  # a job still running learns it
        c.jobs.get_epoch(sink_job, first.epoch)

    _create(c, root, view, sink_job, view_job)
    assert not old_ids & {c.describe_table(t).id for t in (root, view)}  # new ids
    with pytest.raises(NotFound) as e:
        c.jobs.get_epoch(sink_job, 0)
    assert not isinstance(e.value, JobDropped)  # registered again: a new job, no epochs
    assert c.jobs.plan_barriers(view_job).last_committed == 0
    row = {d.table: d for d in c.delay().tables}[view]
    assert row.barrier == 0  # no view version of the dropped view survives
    again = c.jobs.open_transaction(sink_job, 0, batch="q:0", owner="run-2")
    assert again.state is EpochState.PREWRITE and again.epoch == 1  # not a replay of batch q:0
    c.prewrite(_rows(c.describe_table(root), [7]), again.primary_key, again.start_ts)
    done = c.jobs.commit_transaction(sink_job, 1, again.start_ts)
    assert [x["id"] for x in c.read(root, at=done.commit_ts).to_pylist()] == [7]
    assert _view_epoch(c, view_job, view, [7]).epoch > 0


def test_a_running_sink_gets_a_clear_error_when_its_table_is_recreated(c, table_name):
    """A sink still running when its table is dropped and created again (by someone else) is
    refused its next epoch, naming the table, rather than writing into the new table with the
    old table's epoch history."""
    t, job = table_name, f"{table_name}-sink"
    c.create_table(t, "id BIGINT, v BIGINT", primary_key=["id"])
    c.jobs.register_job(job, t, [], kind="sink")
    _sink_epoch(c, job, t, "q:0", "run-1", [1])
    c.drop_table(t)
    c.create_table(t, "id BIGINT, v BIGINT", primary_key=["id"])
    with pytest.raises(JobDropped, match=f"table {t!r} was dropped"):
        c.jobs.open_transaction(job, 0, batch="q:1", owner="run-1")
    assert c.read(t).num_rows == 0


def test_drop_under_an_open_epoch_fences_its_writers(server, c, table_name):
    """A view job's open epoch has prewritten rows when its source is dropped with cascade: the
    job's commit is refused (JobDropped naming the view), later prewrites into the dropped
    table are refused naming it (through the server and directly into LMDB), a transaction
    with a lock in the dropped table and its primary elsewhere was rolled back with the drop,
    and ``snapview check`` finds nothing orphaned."""
    root, view = f"{table_name}_r", f"{table_name}_v"
    other = f"{table_name}_o"
    _create(c, root, view, f"{table_name}-sink", f"{table_name}-view")
    job = f"{table_name}-view"
    _view_epoch(c, job, view, [1])
    plans = wait_for(lambda: c.jobs.plan_barriers(job).barriers, 10, "a barrier to plan")
    e = c.jobs.open_transaction(job, plans[0].barrier)
    info = c.describe_table(view)
    c.prewrite(_rows(info, [2, 3]), e.primary_key, e.start_ts)
    # A transaction writing the view's table (a secondary) and another table (its primary).
    o = c.create_table(other, "id BIGINT, v BIGINT", primary_key=["id"])
    ts = c.tso()
    (primary_mut,) = _rows(o, [1])
    c.prewrite([primary_mut, *_rows(info, [9])], primary_mut[1], ts)
    st = c.status()
    direct = DirectPrewriter(st.lmdb_path, st.map_size_bytes)

    c.drop_table(root, cascade=True)

    with pytest.raises(JobDropped, match=f"table {view!r} was dropped"):
        c.jobs.commit_transaction(job, e.epoch, e.start_ts)
    with pytest.raises(JobDropped):
        c.jobs.heartbeat_transaction(job, e.epoch, e.start_ts, 3000)
    with pytest.raises(TableNotFound, match=f"table {view!r} .*was dropped"):
        c.prewrite(_rows(info, [4]), e.primary_key, e.start_ts)
    with pytest.raises(TableNotFound, match=f"table {view!r} .*was dropped"):
        direct.prewrite(info, _rows(info, [5]), e.primary_key, c.tso(), 3000)
    direct.close()
    with pytest.raises(Exception, match="rolled back|not found|lock"):
        c.store.commit(ts, c.tso(), [primary_mut[1]])
    assert c.read(other).num_rows == 0
    r = cli("check", "--data-dir", server.data_dir)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_view_whose_job_was_unregistered_first_still_takes_its_epochs(c, table_name):
    """``unregister_job`` keeps a job's epochs; dropping its view afterwards takes them (the job
    its newest view version names), so a view built again under the names starts at epoch 1."""
    root, view = f"{table_name}_r", f"{table_name}_v"
    sink_job, view_job = f"{table_name}-sink", f"{table_name}-view"
    _create(c, root, view, sink_job, view_job)
    _view_epoch(c, view_job, view, [1])
    c.jobs.unregister_job(view_job)
    assert c.drop_table(view).unregistered_jobs == ()
    c.create_table(view, "id BIGINT, v BIGINT", primary_key=["id"], kind="view")
    c.jobs.register_job(view_job, view, [root], kind="view", query=f"SELECT * FROM {root}")
    assert c.jobs.plan_barriers(view_job).last_committed == 0
