"""A change-feed -> EpochWriter stream restarted with its checkpoint deleted resumes from the
offsets the coordinator recorded with its last committed epoch: nothing lost, nothing repeated."""

from __future__ import annotations

import json
import shutil

from pyspark.sql import functions as F


def _run_copy(spark, address: str, ckpt: str) -> None:
    from spark_sink import EpochWriter

    feed = (
        spark.readStream.format("snapview")
        .option("coordinator", address)
        .option("table", "lc_src")
        .option("readChangeFeed", "true")
        .option("resumeFromJob", "copy")
        .load()
        .where(F.col("_change_type").isin("insert", "update_postimage"))
        .select("id", "v", "_commit_ts")
    )
    q = (
        feed.writeStream.foreachBatch(
            EpochWriter(address, table="lc_dst", mode="append", job="copy")
        )
        .option("checkpointLocation", ckpt)
        .start()
    )
    try:
        q.processAllAvailable()
    finally:
        q.stop()


def test_restart_without_checkpoint_resumes_from_coordinator(spark, server, client, tmp_path):
    client.create_table("lc_src", "id BIGINT, v STRING", primary_key=["id"])
    client.create_table("lc_dst", "id BIGINT, v STRING", primary_key=[])
    with client.transaction() as t:
        for i in range(50):
            t.put("lc_src", {"id": i, "v": "first"})
    ckpt = str(tmp_path / "ckpt")
    _run_copy(spark, server.address, ckpt)
    assert client.read("lc_dst").num_rows == 50
    meta = json.loads(client.jobs.get_epoch("copy", 0).metadata)
    assert meta["sources"]["feed"] >= t.commit_ts  # the feed's high-water is recorded
    with client.transaction() as t:
        for i in range(50, 80):
            t.put("lc_src", {"id": i, "v": "second"})
    shutil.rmtree(ckpt)  # the checkpoint is lost
    _run_copy(spark, server.address, ckpt)
    ids = sorted(r["id"] for r in client.read("lc_dst").to_pylist())
    assert ids == list(range(80)), f"{len(ids)} rows, expected 80 distinct"
