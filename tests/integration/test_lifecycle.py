"""Job lifecycle (issue 12, item 5): jobs report their liveness, and dropping a table that views
read is refused unless asked to cascade; a dropped view's job is unregistered."""

from __future__ import annotations

import pytest

from coordinator.jobs import JobState
from kvstore.errors import FailedPrecondition, NotFound
from tests.conftest import cli, wait_for


@pytest.fixture
def topo(client, table_name):
    """root -> v1 (job j1) -> v2 (job j2), and root -> v3 (job j3)."""
    root, v1, v2, v3 = (f"{table_name}_{s}" for s in ("root", "v1", "v2", "v3"))
    client.create_table(root, "id BIGINT, x BIGINT", primary_key=["id"])
    for v in (v1, v2, v3):
        client.create_table(v, "id BIGINT, x BIGINT", primary_key=["id"], kind="view")
    j = f"{table_name}-job"
    client.jobs.register_job(f"{j}1", v1, [root], kind="view", query="SELECT * FROM root")
    client.jobs.register_job(f"{j}2", v2, [v1], kind="view", query="SELECT * FROM v1")
    client.jobs.register_job(f"{j}3", v3, [root], kind="view", query="SELECT * FROM root")
    return root, v1, v2, v3, [f"{j}1", f"{j}2", f"{j}3"]


def _job(client, name):
    return {j.job: j for j in client.jobs.list_jobs()}[name]


def test_states_from_reports(client, topo):
    *_, jobs = topo
    j = jobs[0]
    assert _job(client, j).state is JobState.NOT_STARTED  # built, never started
    client.jobs.report_job(j, JobState.RUNNING, ttl_ms=60_000)
    info = _job(client, j)
    assert info.state is JobState.RUNNING and info.reported_wall_ms > 0
    client.jobs.report_job(j, JobState.FAILED, "ValueError: boom")
    info = _job(client, j)
    assert info.state is JobState.FAILED and info.last_error == "ValueError: boom"
    client.jobs.report_job(j, JobState.STOPPED)
    assert _job(client, j).state is JobState.STOPPED
    # A running job that stops reporting (its driver died) shows as lost after its TTL.
    client.jobs.report_job(j, JobState.RUNNING, ttl_ms=200)
    wait_for(lambda: _job(client, j).state is JobState.LOST, 10, "the job to show as lost")


def test_delay_names_the_job_state_and_counts_a_never_computed_view_behind(client, topo):
    root, v1, *_ = topo
    wait_for(lambda: client.delay().newest_barrier > 0, 10, "a barrier")
    newest = client.delay().newest_barrier

    def row():
        return {d.table: d for d in client.delay().tables}[v1]

    wait_for(lambda: client.delay().newest_barrier > newest, 10, "another barrier")
    assert row().job_state == "not_started"
    assert row().barrier == 0 and row().barriers_behind >= 1


def test_drop_of_a_table_views_read_is_refused_unless_cascade(client, topo):
    root, v1, v2, v3, jobs = topo
    with pytest.raises(FailedPrecondition) as e:
        client.drop_table(root)
    msg = str(e.value)
    assert repr(root) in msg and jobs[0] in msg and jobs[2] in msg and "cascade" in msg
    assert root in {t.name for t in client.tables()}  # nothing dropped
    with pytest.raises(FailedPrecondition, match=jobs[1]):
        client.drop_table(v1)  # v2 reads v1
    r = client.drop_table(root, cascade=True)
    assert r and set(r.also_dropped) == {v1, v2, v3}
    assert r.also_dropped.index(v2) < r.also_dropped.index(v1)  # dependents first
    assert set(r.unregistered_jobs) == set(jobs)
    assert not {root, v1, v2, v3} & {t.name for t in client.tables()}
    assert not set(jobs) & {j.job for j in client.jobs.list_jobs()}
    with pytest.raises(NotFound):  # a job still running learns that it was dropped
        client.jobs.report_job(jobs[0], JobState.RUNNING)


def test_dropping_a_view_unregisters_its_job(client, topo):
    root, v1, v2, v3, jobs = topo
    r = client.drop_table(v3)
    assert r and r.also_dropped == () and r.unregistered_jobs == (jobs[2],)
    assert jobs[2] not in {j.job for j in client.jobs.list_jobs()}
    assert client.drop_table(v3, if_exists=True).dropped is False


def _cli(server, *args: str):
    return cli(*args, "--address", server.address)


def test_cli_jobs_and_drop(server, client, topo):
    """``snapview jobs`` lists each job's state; ``snapview drop`` refuses a table views read in
    one line, and with --cascade drops it and everything downstream."""
    import json

    root, v1, v2, v3, jobs = topo
    client.jobs.report_job(jobs[0], JobState.FAILED, "ValueError: boom")
    r = _cli(server, "jobs", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = {row["job"]: row for row in json.loads(r.stdout)}
    assert rows[jobs[0]]["state"] == "failed" and rows[jobs[0]]["last_error"] == "ValueError: boom"
    assert rows[jobs[1]]["state"] == "not_started"
    text = _cli(server, "jobs").stdout
    assert jobs[0] in text and "failed" in text and "ValueError: boom" in text
    r = _cli(server, "drop", root)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "cascade" in r.stderr and jobs[2] in r.stderr
    r = _cli(server, "drop", root, "--cascade")
    assert r.returncode == 0, r.stderr
    assert f"dropped {root}" in r.stdout and f"dropped {v2}" in r.stdout
    assert f"unregistered job {jobs[0]}" in r.stdout
    assert not {root, v1, v2, v3} & {t.name for t in client.tables()}
