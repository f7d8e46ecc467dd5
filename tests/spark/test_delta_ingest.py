"""scripts/examples/delta_ingest.py: a Delta table (written by delta-rs) brought into snapview
exactly once, through a kill -9 mid-epoch, a death between a version's two epochs and re-runs.

Spark's own ``readStream.format("delta")`` cannot run here (its connector is not installable
offline); docs/delta.md says so. This is the path without it."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import coordinator
from scripts.examples import delta_ingest
from tests.conftest import server_fixture

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "examples", "delta_ingest.py")
CDF = {"delta.enableChangeDataFeed": "true"}


srv = server_fixture("delta")


def _rows(*rows):
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "owner": [r[1] for r in rows],
            "balance": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


def _delta(path) -> list:
    return sorted(pa.table(DeltaTable(path).to_pyarrow_table()).to_pylist(), key=str)


def _mine(c, table) -> list:
    return sorted(c.read(table).to_pylist(), key=str)


def _committed_batches(c, job) -> list[int]:
    newest = c.jobs.get_epoch(job, 0).epoch
    epochs = [c.jobs.get_epoch(job, e) for e in range(1, newest + 1)]
    return [delta_ingest._bid(e) for e in epochs if e.committed]


def test_cdf_table_exactly_once_through_crashes(spark, srv, tmp_path, monkeypatch):
    path, quiet = str(tmp_path / "acct"), (lambda _: None)
    c = coordinator.connect(srv.address)
    c.create_table("acct", "id BIGINT, owner STRING, balance BIGINT", primary_key=["id"])
    write_deltalake(path, _rows((1, "ann", 10), (2, "bob", 20), (3, "cy", 30)), configuration=CDF)
    assert delta_ingest.ingest(spark, srv.address, path, "acct", out=quiet) == 1  # the snapshot
    assert _mine(c, "acct") == _delta(path)

    write_deltalake(path, _rows((4, "dee", 40)), mode="append")  # version 1
    (  # version 2: updates 2, inserts 5, deletes 1: its deletes, then its upserts
        DeltaTable(path)
        .merge(
            _rows((2, "bob", 25), (5, "eve", 50), (1, "ann", 0)),
            "s.id = t.id",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_delete("s.balance = 0")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )

    # kill -9 after version 1's rows are prewritten, before its epoch commits
    job = subprocess.run(
        [sys.executable, SCRIPT, srv.address, path, "acct"],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": ROOT,
            "SNAPVIEW_FAILPOINTS": "sink.before_commit=panic_group",
        },
        capture_output=True,
        text=True,
        timeout=180,
        start_new_session=True,  # its own process group: the fail point takes the JVM too
    )
    assert job.returncode == -9, job.stderr[-3000:]
    assert delta_ingest.ingested(c, "acct") == (1, 3)  # version 1's epoch is open, uncommitted

    # a death between version 2's deletes (committed) and its upserts
    write = delta_ingest._write

    def dies_before_batch_5(writer, spark, rows, bid):
        if bid == 5:
            raise KeyboardInterrupt("killed")
        write(writer, spark, rows, bid)

    monkeypatch.setattr(delta_ingest, "_write", dies_before_batch_5)
    with pytest.raises(KeyboardInterrupt):
        delta_ingest.ingest(spark, srv.address, path, "acct", out=quiet)
    monkeypatch.undo()
    assert delta_ingest.ingested(c, "acct") == (4, 4)
    # version 1 (redone after the kill) and version 2's deletes: the documented middle state
    assert _mine(c, "acct") == sorted(
        [{"id": 2, "owner": "bob", "balance": 20}]
        + [{"id": 3, "owner": "cy", "balance": 30}, {"id": 4, "owner": "dee", "balance": 40}],
        key=str,
    )

    assert delta_ingest.ingest(spark, srv.address, path, "acct", out=quiet) == 1  # batch 5
    assert _mine(c, "acct") == _delta(path)
    assert delta_ingest.ingest(spark, srv.address, path, "acct", out=quiet) == 0
    assert _committed_batches(c, "acct") == [1, 3, 4, 5]  # each part of each version once
    c.close()


def test_append_only_table_without_cdf(spark, srv, tmp_path):
    """No change data feed: each version's added files, into an append-only table (duplicates
    would show); an OPTIMIZE changes nothing; a delete is refused, naming the version."""
    path, quiet = str(tmp_path / "log"), (lambda _: None)
    c = coordinator.connect(srv.address)
    c.create_table("log", "id BIGINT, owner STRING, balance BIGINT", primary_key=[])
    write_deltalake(path, _rows((1, "ann", 10), (2, "bob", 20)), partition_by=["owner"])
    assert delta_ingest.ingest(spark, srv.address, path, "log", out=quiet) == 1
    write_deltalake(path, _rows((3, "ann", 30)), mode="append")
    write_deltalake(path, _rows((4, "cy", 40), (5, "bob", 50)), mode="append")
    write_deltalake(path, _rows((6, "ann", 60)), mode="append")
    assert DeltaTable(path).optimize.compact()["numFilesRemoved"] > 0  # version 4
    assert delta_ingest.ingest(spark, srv.address, path, "log", out=quiet) == 3
    assert delta_ingest.ingest(spark, srv.address, path, "log", out=quiet) == 0
    assert _mine(c, "log") == _delta(path)
    DeltaTable(path).delete("id = 1")
    with pytest.raises(ValueError, match="version 5 .*removed data"):
        delta_ingest.ingest(spark, srv.address, path, "log", out=quiet)
    c.close()
