"""Executors in separate processes (local-cluster). They run on the server's host, so their
writes may take the direct LMDB path; test_standalone_cluster.py turns it off (SNAPVIEW_DIRECT)
and checks that executors then reach the store over gRPC only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from snapview.embedded import EmbeddedServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

JOB = r"""
import json, os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
import spark_sink
from spark_sink import EpochWriter
addr = sys.argv[1]
spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
         .config("spark.ui.enabled", "false").config("spark.executorEnv.PYTHONPATH", os.getcwd())
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark_sink.register(spark)
df = spark.range(0, 20000, numPartitions=4).selectExpr("id", "concat('v', id) as v")
EpochWriter(addr, table="lc", mode="upsert")(df, 0)
back = (spark.read.format("snapview").option("coordinator", addr).option("table", "lc")
        .option("rowsPerPartition", 5000).load())
pids = back.rdd.mapPartitions(lambda it: [os.getpid()]).collect()
print("RESULT " + json.dumps({"count": back.count(), "sum": back.groupBy().sum("id").first()[0],
                              "parts": back.rdd.getNumPartitions(), "pids": pids,
                              "driver": os.getpid()}))
spark.stop()
"""


def test_read_and_write_with_executors_in_other_processes(tmp_path):
    """EpochWriter writes and the source reads through executors that are separate JVMs."""
    with EmbeddedServer(str(tmp_path / "data")) as srv:
        import coordinator

        c = coordinator.connect(srv.address)
        c.create_table("lc", "id BIGINT, v STRING", primary_key=["id"])
        c.close()
        r = subprocess.run(
            [sys.executable, "-c", JOB, srv.address],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        assert line, r.stderr[-3000:]
        res = json.loads(line[0][7:])
        assert res["count"] == 20000 and res["sum"] == sum(range(20000))
        assert res["parts"] >= 4
        assert res["driver"] not in res["pids"]
