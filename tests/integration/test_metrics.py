"""Prometheus metrics of a real ``snapview serve --metrics-port 0`` (barrier interval 200 ms):
the scrape parses and has every family, values move as the run moves (barriers, the TSO, a view
job's lag once it stops committing, its epochs, failures), a busy metrics port is one error
line, a family that fails is left out without failing the scrape, and the Grafana dashboard and
docs/metrics.md name only (and, for the docs, every) metric the server exports."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.jobs import EpochMetadata, EpochState, JobState
from kvstore.mvcc.records import LockOp
from tests.conftest import cli, client_fixture, server_fixture, wait_for

ROOT = Path(__file__).resolve().parents[2]
# Every family the server exports (counter families without their _total).
FAMILIES = {
    "snapview_server_info": "gauge",
    "snapview_table_barrier_ts": "gauge",
    "snapview_table_barriers_behind": "gauge",
    "snapview_table_barrier_lag_seconds": "gauge",
    "snapview_table_e2e_delay_seconds": "gauge",
    "snapview_job_state": "gauge",
    "snapview_job_epoch_duration_seconds": "histogram",
    "snapview_job_epoch_step_seconds": "histogram",
    "snapview_job_epochs": "counter",
    "snapview_job_mutations": "counter",
    "snapview_job_failures": "counter",
    "snapview_tso_timestamps_issued": "counter",
    "snapview_barrier_newest_ts": "gauge",
    "snapview_barrier_newest_age_seconds": "gauge",
    "snapview_barrier_interval_seconds": "gauge",
    "snapview_store_group_commit_actions": "histogram",
    "snapview_store_locks": "gauge",
    "snapview_store_oldest_lock_age_seconds": "gauge",
    "snapview_store_lock_scan_truncated": "gauge",
    "snapview_store_used_bytes": "gauge",
    "snapview_store_map_size_bytes": "gauge",
    "snapview_store_file_size_bytes": "gauge",
    "snapview_store_filesystem_free_bytes": "gauge",
}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


srv = server_fixture("metrics", "--barrier-interval", "200ms", "--metrics-port", "0")
c = client_fixture("srv")


def scrape(url: str) -> dict:
    """The families of one scrape of ``url``, by name."""
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: dict, sample: str, **labels: str) -> float | None:
    """The value of the sample ``sample`` with (at least) ``labels``, or None."""
    family = re.sub(r"(_total|_bucket|_count|_sum)$", "", sample)
    for f in (fams.get(sample), fams.get(family)):
        for s in f.samples if f else ():
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def exported_names(fams: dict) -> set[str]:
    """Every sample name the families can carry (name_total, name_bucket, ...)."""
    return {f.name + sfx for f in fams.values() for sfx in SUFFIXES.get(f.type, ("",))}


def test_ready_line_names_the_metrics_address(srv):
    assert srv.metrics_address is not None
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", srv.metrics_address)
    assert srv.metrics_address.split(":")[2] != str(srv.port)


def test_scrape_parses_and_has_every_family(srv, c):
    fams = scrape(srv.metrics_address)
    for name, kind in FAMILIES.items():
        assert name in fams, name
        assert fams[name].type == kind, (name, fams[name].type)
    assert value(fams, "snapview_server_info", version="0.1.0") == 1
    assert value(fams, "snapview_barrier_interval_seconds") == pytest.approx(0.2)
    assert value(fams, "snapview_store_used_bytes") > 0
    assert value(fams, "snapview_store_file_size_bytes") > 0
    assert value(fams, "snapview_store_map_size_bytes") >= value(fams, "snapview_store_used_bytes")
    assert value(fams, "process_resident_memory_bytes") > 0
    groups = value(fams, "snapview_store_group_commit_actions_count")
    assert groups > 0
    assert value(fams, "snapview_store_group_commit_actions_bucket", le="+Inf") == groups
    assert value(fams, "snapview_store_group_commit_actions_sum") >= groups


def test_barriers_and_the_tso_move(srv, c, table_name):
    c.create_table(table_name, "id BIGINT, v BIGINT", primary_key=["id"])
    first = scrape(srv.metrics_address)
    b1 = value(first, "snapview_barrier_newest_ts")
    tso1 = value(first, "snapview_tso_timestamps_issued_total")
    t1 = value(first, "snapview_table_barrier_ts", table=table_name, kind="root")
    assert b1 > 0 and tso1 > 0 and t1 is not None
    for _ in range(5):
        c.tso()

    def moved():
        f = scrape(srv.metrics_address)
        t = value(f, "snapview_table_barrier_ts", table=table_name, kind="root")
        return f if value(f, "snapview_barrier_newest_ts") > b1 and t > t1 else None

    later = wait_for(moved, timeout=10, what="a newer barrier in the metrics")
    assert value(later, "snapview_tso_timestamps_issued_total") >= tso1 + 5
    assert value(later, "snapview_barrier_newest_age_seconds") < 5
    # A root table keeps up: its lag is a barrier or two at most.
    assert value(later, "snapview_table_barriers_behind", table=table_name) <= 2


def _commit_view_epoch(c, job: str, barrier: int, sources: dict[str, int]) -> None:
    """One epoch of a Spark-less view job: open at ``barrier``, commit with the metadata an
    incremental view's delta carries (strategy, mutations, step seconds)."""
    e = c.jobs.open_transaction(job, barrier)
    meta = EpochMetadata(
        sources=sources,
        fields={
            "barrier": barrier,
            "strategy": "incremental",
            "step": "delta",
            "changes": 2,
            "lookups": 1,
            "mutations": 3,
            "steps": {"open": 0.001, "delta": 0.02, "write": 0.003},
        },
    )
    c.jobs.commit_transaction(job, barrier, e.start_ts, meta.to_json())


def test_a_view_job_moves_its_metrics_and_its_lag_rises_when_it_stops(srv, c, table_name):
    src, view = table_name + "_s", table_name + "_v"
    job = view
    c.create_table(src, "id BIGINT, v BIGINT", primary_key=["id"])
    c.create_table(view, "id BIGINT, v BIGINT", primary_key=["id"], kind="view")
    c.jobs.register_job(job, view, [src], kind="view", query="select ...")
    c.jobs.report_job(job, JobState.RUNNING)

    # Commit three epochs at issued barriers, in the order the barrier plan gives them.
    committed = 0
    while committed < 3:
        plans = wait_for(
            lambda: c.jobs.plan_barriers(job).barriers, timeout=10, what="a barrier to process"
        )
        for p in plans[: 3 - committed]:
            _commit_view_epoch(c, job, p.barrier, {r.table: r.read_ts for r in p.reads})
            committed += 1
    fams = scrape(srv.metrics_address)
    assert value(fams, "snapview_job_epoch_duration_seconds_count", job=job) == 3
    assert value(fams, "snapview_job_epochs_total", job=job, strategy="delta") == 3
    assert value(fams, "snapview_job_mutations_total", job=job) == 9
    assert value(fams, "snapview_job_epoch_step_seconds_count", job=job, step="delta") == 3
    assert value(fams, "snapview_job_epoch_step_seconds_sum", job=job, step="delta") == (
        pytest.approx(0.06)
    )
    assert value(fams, "snapview_job_state", job=job, state="running") == 1
    assert value(fams, "snapview_job_state", job=job, state="failed") == 0
    behind = value(fams, "snapview_table_barriers_behind", table=view, kind="view")
    assert behind is not None
    assert value(fams, "snapview_table_e2e_delay_seconds", table=view, kind="view") >= 0

    # The job stops committing: its lag in barriers (and seconds) rises with every barrier.
    def lagging():
        f = scrape(srv.metrics_address)
        n = value(f, "snapview_table_barriers_behind", table=view, kind="view")
        return f if n >= behind + 3 else None

    f = wait_for(lagging, timeout=10, what="the paused view's lag to rise by 3 barriers")
    assert value(f, "snapview_table_barrier_lag_seconds", table=view, kind="view") > 0.2
    # Its epoch count stays where it was.
    assert value(f, "snapview_job_epoch_duration_seconds_count", job=job) == 3

    # Failures: an aborted attempt, then a FAILED report (counted once, not per report).
    b = c.jobs.plan_barriers(job).barriers[0].barrier
    e = c.jobs.open_transaction(job, b)
    assert c.jobs.abort_transaction(job, b, e.start_ts).state == EpochState.ABORTED
    c.jobs.report_job(job, JobState.FAILED, "boom")
    c.jobs.report_job(job, JobState.FAILED, "boom again")
    f = scrape(srv.metrics_address)
    assert value(f, "snapview_job_failures_total", job=job, reason="attempt_aborted") == 1
    assert value(f, "snapview_job_failures_total", job=job, reason="reported_failed") == 1
    assert value(f, "snapview_job_state", job=job, state="failed") == 1
    # The open attempt's primary was a lock while it lived; none is left.
    assert value(f, "snapview_store_locks") == 0


def test_open_locks_and_their_age(srv, c, table_name):
    c.create_table(table_name, "id BIGINT, v BIGINT", primary_key=["id"])
    info = c.describe_table(table_name)
    start = c.tso()
    key = info.key_codec.encode({"id": 1})
    c.prewrite([(LockOp.PUT, key, info.row_codec.encode({"id": 1, "v": 1}))], key, start)
    try:
        f = wait_for(
            lambda: (
                (f := scrape(srv.metrics_address))
                and value(f, "snapview_store_oldest_lock_age_seconds") >= 0.1
                and f
            ),
            timeout=10,
            what="the lock to age",
        )
        assert value(f, "snapview_store_locks") >= 1
        assert value(f, "snapview_store_lock_scan_truncated") == 0
    finally:
        c.store.rollback(start, [key])
    f = scrape(srv.metrics_address)
    assert value(f, "snapview_store_locks") == 0
    assert value(f, "snapview_store_oldest_lock_age_seconds") == 0


def test_busy_metrics_port_is_one_error_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        d = tmp_path / "data"
        r = subprocess.run(
            [sys.executable, "-m", "snapview", "serve", "--data-dir", str(d), "--port", "0"]
            + ["--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"snapview: error: cannot bind the metrics port 127.0.0.1:{port}")
    assert "in use" in lines[0]
    assert not d.exists()


def test_serve_help_shows_metrics_port_default_off():
    r = cli("serve", "--help")
    assert r.returncode == 0
    assert "--metrics-port PORT" in r.stdout and "(default: off)" in " ".join(r.stdout.split())


def test_a_failing_family_is_left_out_not_the_scrape(tmp_path, caplog):
    """In process: a source that raises is logged; every other family is still served. After
    stop() the collector reads nothing."""
    from coordinator.server.serve import ServeConfig, SnapviewServer

    server = SnapviewServer(ServeConfig(str(tmp_path / "d"), port=0, metrics_port=0, sync=False))
    try:
        server.start()
        assert server.metrics is not None and server.metrics_address is not None

        def broken():
            raise RuntimeError("this family is broken")
            yield  # pragma: no cover - a generator, like the real sources

        server.metrics.add_source(broken)
        with caplog.at_level(logging.ERROR, logger="snapview.metrics"):
            fams = scrape(server.metrics_address)
        assert set(FAMILIES) <= set(fams)
        assert "this family is broken" in caplog.text
    finally:
        server.stop()
    # Stopped: the store is closed, and the collector reads it no more.
    assert list(server.metrics.collect()) == []


def _dashboard_names() -> set[str]:
    dash = json.loads((ROOT / "docs/grafana/snapview-dashboard.json").read_text())
    exprs: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("expr", "query", "definition") and isinstance(v, str):
                    exprs.append(v)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(dash)
    assert exprs, "the dashboard has no queries"
    return {m for e in exprs for m in re.findall(r"\b(?:snapview|process)_[a-z0-9_]+", e)}


def test_dashboard_names_only_exported_metrics(srv):
    names = _dashboard_names()
    exported = exported_names(scrape(srv.metrics_address))
    assert names, "the dashboard names no metric"
    assert names <= exported, sorted(names - exported)
    # The panels the dashboard promises.
    for needed in (
        "snapview_table_barriers_behind",
        "snapview_table_e2e_delay_seconds",
        "snapview_job_epoch_duration_seconds_bucket",
        "snapview_tso_timestamps_issued_total",
        "snapview_store_group_commit_actions_bucket",
        "snapview_store_locks",
        "snapview_store_used_bytes",
    ):
        assert needed in names, needed


def test_docs_list_every_exported_metric(srv):
    doc = (ROOT / "docs/metrics.md").read_text()
    for name, f in scrape(srv.metrics_address).items():
        shown = name + "_total" if f.type == "counter" else name
        assert f"`{shown}`" in doc, shown
