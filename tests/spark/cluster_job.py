"""The driver that tests/spark/test_standalone_cluster.py runs as a subprocess against a Spark
standalone cluster, set up as docs/cluster.md tells a user to:

    python -m tests.spark.cluster_job spark://127.0.0.1:PORT

The connection comes from the environment (SNAPVIEW_ADDRESS, SNAPVIEW_TOKEN_FILE,
SNAPVIEW_TLS_CA: a server with TLS and a token), PYSPARK_PYTHON names the interpreter every
executor runs, and SNAPVIEW_DIRECT=off is set here and, through spark.executorEnv, on every
executor. It writes a root table with EpochWriter, maintains a view (a join and an aggregate),
changes the sources twice (a transaction, an EpochWriter upsert), and at each barrier it awaits
compares the view with Spark's batch result of its query over the sources as of that barrier. It prints one ``RESULT {json}`` line for the test."""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import SparkSession

import coordinator
import spark_sink
from coordinator import ConnectionSettings
from spark_sink import EpochWriter, MaterializedView

# A join and an aggregate, kept incrementally (strategy auto): its first barrier is a build whose
# diff and prewrites run on the executors, later ones are deltas.
VIEW = "v_named"
QUERY = (
    "SELECT a.g, n.name, COUNT(*) AS n, SUM(a.v) AS s FROM acc a JOIN names n ON a.g = n.g "
    "GROUP BY a.g, n.name"
)
ROWS = 20_000


def session(master: str, executor_memory: str = "512m") -> SparkSession:
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spark = (
        SparkSession.builder.master(master)
        .appName("snapview-standalone-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", executor_memory)
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        # start only once both executors are there, so both workers run tasks
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "60s")
        .config("spark.executorEnv.PYTHONPATH", here)
        .config("spark.executorEnv.SNAPVIEW_DIRECT", "off")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_result(spark: SparkSession, settings: ConnectionSettings, snap) -> list:
    """Spark's batch result of the view's query over the sources as of ``snap``'s barrier (the
    sources as temporary views of the driver's session; each view job has a session of its
    own)."""
    for t in ("acc", "names"):
        df = (
            spark.read.format("snapview")
            .options(**settings.spark_options())
            .option("table", t)
            .option("at", str(snap.read_ts(t)))
            .load()
        )
        df.createOrReplaceTempView(t)
    return sorted(tuple(r) for r in spark.sql(QUERY).collect())


def main() -> None:
    master = sys.argv[1]
    t0 = time.monotonic()
    settings = ConnectionSettings.from_env()  # SNAPVIEW_ADDRESS, _TOKEN_FILE, _TLS_CA
    spark = session(master)
    out: dict = {"app_id": spark.sparkContext.applicationId, "driver_pid": os.getpid(), "steps": {}}
    spark_sink.register(spark)
    sc = spark.sparkContext

    def step(name: str) -> None:  # seconds since the start, also on stderr as it happens
        out["steps"][name] = round(time.monotonic() - t0, 1)
        print(f"cluster_job: {name} at {out['steps'][name]} s", file=sys.stderr, flush=True)

    step("session")

    c = coordinator.connect(settings)
    c.create_table("acc", "id BIGINT, g BIGINT, v BIGINT", primary_key=["id"])
    c.create_table("names", "g BIGINT, name STRING", primary_key=["g"])
    with c.transaction() as t:
        for g in range(10):
            t.put("names", {"g": g, "name": f"group {g}"})
    # an EpochWriter write: 4 partitions prewritten by the executors
    df = spark.range(0, ROWS, numPartitions=4).selectExpr("id", "id % 10 AS g", "id AS v")
    EpochWriter(settings, table="acc")(df, 0)
    step("epoch_writer")

    job = (
        MaterializedView.builder(spark)
        .connection(settings)
        .query(QUERY)
        .target(VIEW)
        .trigger_interval("200 milliseconds")
        .build()
        .start()
    )
    step("started")
    checked: list[dict] = []
    try:
        for rnd in range(3):
            if rnd == 1:  # one transaction: an update, a delete, an insert in a new group
                with c.transaction() as t:
                    t.put("acc", {"id": 1, "g": 3, "v": 1_000_000})
                    t.delete("acc", {"id": 2})
                    t.put("acc", {"id": ROWS + 1, "g": 11, "v": 5})
                    t.put("names", {"g": 11, "name": "group 11"})
                    t.put("names", {"g": 4, "name": "four"})
            elif rnd == 2:  # an EpochWriter upsert of 1,000 rows (moved to group 12) by executors
                up = spark.range(0, 1000, numPartitions=2).selectExpr(
                    "id", "12 AS g", "id * 2 AS v"
                )
                with c.transaction() as t:
                    t.put("names", {"g": 12, "name": "group 12"})
                EpochWriter(settings, table="acc")(up, 1)
            b = job.await_barrier(c.tso(), timeout=60)
            snap = c.snapshot(["acc", "names", VIEW], barrier=b)
            got = sorted(tuple(r.values()) for r in snap.read(VIEW).to_pylist())
            want = spark_result(spark, settings, snap)
            checked.append({"round": rnd, "barrier": b, "rows": len(got), "equal": got == want})
            if got != want:
                out["mismatch"] = {"barrier": b, "got": got[:20], "want": want[:20]}
            step(f"round{rnd}")
        p = job.progress()
        out["progress"] = {"strategy": p.strategy, "barriers": p.barriers, "text": str(p)}
    finally:
        job.stop()
    out["checked"] = checked
    out["failure"] = job.failure_text()

    # where tasks ran: each Python worker's pid, the pids above it (the executor JVM, the Worker
    # that launched it, ...) and what SNAPVIEW_DIRECT it saw
    def where(_):
        from tests.spark.standalone import ancestors

        return [(os.getpid(), ancestors(os.getpid()), os.environ.get("SNAPVIEW_DIRECT"))]

    out["tasks"] = sc.parallelize(range(8), 8).mapPartitions(where).collect()
    infos = sc._jsc.sc().statusTracker().getExecutorInfos()  # the driver's own entry included
    out["executors"] = sorted(f"{i.host()}:{i.port()}" for i in infos)
    step("done")
    c.close()
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
