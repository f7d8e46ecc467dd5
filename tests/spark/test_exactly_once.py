"""Exactly-once through kill -9: a subprocess runs the streaming query into an append-only
table (a batch applied twice would show as duplicate rows), dies at a fault point, and is
restarted on the same checkpoint. Each time, every input row is in the table exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import coordinator
from snapview.embedded import EmbeddedServer

FILES, ROWS = 4, 50
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _inputs(path) -> None:
    path.mkdir()
    for f in range(FILES):
        (path / f"f{f}.json").write_text(
            "".join(json.dumps({"id": f * ROWS + i, "v": f"r{f}"}) + "\n" for i in range(ROWS))
        )


def _start_job(address: str, tmp_path, failpoints: str = "") -> subprocess.Popen:
    env = {**os.environ, "SNAPVIEW_FAILPOINTS": failpoints}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "snapview.chaos.stream_job",
            address,
            str(tmp_path / "in"),
            str(tmp_path / "ckpt"),
            "events",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )  # its own process group: a kill takes the JVM too


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, 9)
    except ProcessLookupError:
        pass
    p.wait(30)


def _check_exactly_once(address: str) -> None:
    c = coordinator.connect(address)
    ids = sorted(r["id"] for r in c.read("events").to_pylist())
    c.close()
    assert ids == list(range(FILES * ROWS)), (
        f"{len(ids)} rows for {FILES * ROWS} inputs; duplicates: "
        f"{sorted({i for i in ids if ids.count(i) > 1})[:10]}"
    )


@pytest.mark.parametrize("failpoint", ["sink.prewrite.mid", "sink.before_commit"])
def test_kill9_of_the_query_at_fault_point(tmp_path, failpoint):
    """The query process group dies mid-prewrite / after prewrite before commit; the restarted
    query rolls the attempt back, redoes the batch, and nothing is lost or doubled."""
    _inputs(tmp_path / "in")
    with EmbeddedServer(str(tmp_path / "data")) as srv:
        c = coordinator.connect(srv.address)
        c.create_table("events", "id BIGINT, v STRING", primary_key=[])
        c.close()
        job = _start_job(srv.address, tmp_path, f"{failpoint}=panic_group")
        assert job.wait(180) == -9, "the fail point did not kill the query"
        assert "DONE" not in job.stdout.read()
        job = _start_job(srv.address, tmp_path)
        try:
            assert job.wait(180) == 0
        finally:
            _kill_group(job)
        _check_exactly_once(srv.address)


def test_kill9_of_the_server_after_primary_commit(tmp_path):
    """The server dies after an epoch's primary commit, before its secondaries are resolved; the
    query is killed too. After both restart, the epoch counts as committed (its secondaries are
    resolved on recovery), the replayed batch is skipped, and the rest is applied once."""
    _inputs(tmp_path / "in")
    srv = EmbeddedServer(
        str(tmp_path / "data"), env={"SNAPVIEW_FAILPOINTS": "epoch.commit.after_primary=panic"}
    )
    srv.start()
    job = None
    try:
        c = coordinator.connect(srv.address)
        c.create_table("events", "id BIGINT, v STRING", primary_key=[])
        c.close()
        job = _start_job(srv.address, tmp_path)
        assert srv.wait_dead(180), "the server fail point never fired"
        _kill_group(job)
        srv.env = {}
        srv.start()
        deadline = time.monotonic() + 30
        c = coordinator.connect(srv.address)
        while c.read("events").num_rows != ROWS:  # batch 0, committed at the primary
            assert time.monotonic() < deadline
        c.close()
        job = _start_job(srv.address, tmp_path)
        assert job.wait(180) == 0
        _check_exactly_once(srv.address)
    finally:
        if job is not None:
            _kill_group(job)
        srv.stop()
