"""A running MaterializedView reports its liveness, and stops by itself when its table is
dropped (issue 12, item 5)."""

from __future__ import annotations

import coordinator
from coordinator.errors import BarrierNotReached
from coordinator.jobs import JobState
from spark_sink import MaterializedView
from tests.conftest import server_fixture, wait_for

life_server = server_fixture("life", "--barrier-interval", "200ms")


def _state(c, job):
    return {j.job: j for j in c.jobs.list_jobs()}[job].state


def test_running_view_reports_then_stops_when_its_table_is_dropped(spark, life_server):
    c = coordinator.connect(life_server.address)
    try:
        c.create_table("life_src", "id BIGINT, x BIGINT", primary_key=["id"])
        with c.transaction() as t:
            t.put("life_src", {"id": 1, "x": 5})
        view = (
            MaterializedView.builder(spark)
            .coordinator(life_server.address)
            .query("SELECT id, x * 2 AS y FROM life_src")
            .target("life_view")
            .primary_key("id")
            .trigger_interval("100 milliseconds")
            .build()
        )
        assert _state(c, view.job) is JobState.NOT_STARTED
        job = view.start()
        try:
            wait_for(lambda: _state(c, view.job) is JobState.RUNNING, 30, "a running report")
            # Another client drops the view (nothing reads it, so no cascade is needed): its job
            # is unregistered, learns it at its next report and stops itself.
            r = c.drop_table("life_view")
            assert r.unregistered_jobs == (view.job,)
            wait_for(lambda: not job.is_active(), 30, "the dropped view's job to stop")
        finally:
            job.stop()
        assert view.job not in {j.job for j in c.jobs.list_jobs()}
    finally:
        c.close()


def test_stopped_view_reports_stopped(spark, life_server):
    c = coordinator.connect(life_server.address)
    try:
        c.create_table("life_src2", "id BIGINT, x BIGINT", primary_key=["id"])
        view = (
            MaterializedView.builder(spark)
            .coordinator(life_server.address)
            .query("SELECT id, x FROM life_src2")
            .target("life_view2")
            .primary_key("id")
            .trigger_interval("100 milliseconds")
            .build()
        )
        job = view.start()
        wait_for(lambda: _state(c, view.job) is JobState.RUNNING, 30, "a running report")
        job.stop()
        assert _state(c, view.job) is JobState.STOPPED
    finally:
        c.close()


def test_views_service_restarts_a_failed_job_and_stops_cleanly(spark, life_server):
    """The ``views run`` loop: a job that fails (an error fail point before its commit) is
    restarted once the fault is gone and catches up; setting the stop event stops it cleanly."""
    import threading

    from kvstore import failpoints
    from snapview.views_service import serve as serve_views

    c = coordinator.connect(life_server.address)
    events: list[str] = []
    stop = threading.Event()
    try:
        c.create_table("svc_src", "id BIGINT, x BIGINT", primary_key=["id"])
        view = (
            MaterializedView.builder(spark)
            .coordinator(life_server.address)
            .query("SELECT id, x FROM svc_src")
            .target("svc_view")
            .primary_key("id")
            .trigger_interval("100 milliseconds")
            .build()
        )
        failpoints.arm("view.before_commit=error")
        runner = threading.Thread(target=serve_views, args=([view], stop, 0.1, events.append, 0.2))
        runner.start()
        try:
            wait_for(lambda: any("failed" in e for e in events), 60, "the job to fail")
            wait_for(lambda: _state(c, view.job) is JobState.FAILED, 30, "a FAILED report")
            failpoints.arm("")  # the fault is gone: the restarted job works
            wait_for(lambda: any("restarted" in e for e in events), 60, "a restart")
            with c.transaction() as t:
                t.put("svc_src", {"id": 7, "x": 70})
            ts = c.tso()

            def caught_up() -> bool:
                try:
                    snap = c.snapshot(["svc_view"])
                except BarrierNotReached:  # no version yet
                    return False
                rows = snap.read("svc_view").to_pylist()
                return snap.barrier >= ts and rows == [{"id": 7, "x": 70}]

            wait_for(caught_up, 60, "the restarted view to catch up")
        finally:
            failpoints.arm("")
            stop.set()
            runner.join(90)
        assert not runner.is_alive()
        assert events[-1] == "view svc_view: stopped", events
        assert _state(c, view.job) is JobState.STOPPED
    finally:
        c.close()


VIEWS_FILE = """
from spark_sink import MaterializedView


def views(spark, address):
    return [
        MaterializedView.builder(spark)
        .coordinator(address)
        .query("SELECT id, x + 1 AS y FROM run_src")
        .target("run_view")
        .primary_key("id")
        .trigger_interval("200 milliseconds")
    ]
"""


def test_views_run_serves_a_file_until_sigterm(tmp_path, life_server):
    """``snapview views run FILE`` starts the file's views in its own process, keeps them
    fresh, and on SIGTERM stops them cleanly (state STOPPED) and exits 0."""
    import signal
    import subprocess
    import sys

    c = coordinator.connect(life_server.address)
    path = tmp_path / "views.py"
    path.write_text(VIEWS_FILE)
    proc = None
    try:
        c.create_table("run_src", "id BIGINT, x BIGINT", primary_key=["id"])
        with c.transaction() as t:
            t.put("run_src", {"id": 1, "x": 41})
        proc = subprocess.Popen(
            [sys.executable, "-m", "snapview", "views", "run", str(path)]
            + ["--address", life_server.address],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        def has_row() -> bool:
            try:
                return c.snapshot(["run_view"]).read("run_view").to_pylist() == [{"id": 1, "y": 42}]
            except Exception:  # noqa: BLE001 - no table or no version yet
                return False

        wait_for(has_row, 180, "the served view to compute")
        job = {j.sink: j for j in c.jobs.list_jobs()}["run_view"]
        assert job.state is JobState.RUNNING
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        assert "view run_view: started" in out and "stopped 1 view(s)" in out, out
        assert {j.sink: j for j in c.jobs.list_jobs()}["run_view"].state is JobState.STOPPED
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        c.close()
