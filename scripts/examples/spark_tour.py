"""The README's Spark tour as one script: python scripts/examples/spark_tour.py [HOST:PORT]"""

import sys
import tempfile

import coordinator
import spark_sink
from snapview.local_spark import local_session
from spark_sink import EpochWriter

addr = sys.argv[1] if len(sys.argv) > 1 else "localhost:50051"
client = coordinator.connect(addr)
have = {t.name for t in client.tables()}
if "accounts" not in have:
    client.create_table("accounts", "id BIGINT, branch INT, balance BIGINT", primary_key=["id"])
if "accounts_log" not in have:  # append-only: hidden row ids
    client.create_table("accounts_log", "id BIGINT, balance BIGINT", primary_key=[])
t0 = client.tso()
with client.transaction() as txn:
    for i in range(1, 6):
        txn.put("accounts", {"id": i, "branch": i % 2, "balance": 100 * i})
t1 = client.tso()

# local[2]; Python workers run this interpreter; no UI or progress bars; Spark's logs at ERROR
spark = local_session()
spark_sink.register(spark)  # format("snapview") for reads and writes in this session

# a snapshot at a timestamp (default: latest), in primary-key range partitions read in parallel
df = (
    spark.read.format("snapview")
    .option("coordinator", addr)
    .option("table", "accounts")
    .option("at", t1)
    .load()
)
df.filter("id in (1, 2, 3)").show()  # Spark filters the rows read (none pushed: design.md §6.1)

# net changes in (t0, t1], Delta-CDF style: _change_type (insert, update_preimage,
# update_postimage, delete) and _commit_ts
changes = (
    spark.read.format("snapview")
    .option("coordinator", addr)
    .option("table", "accounts")
    .option("changes_from", t0)
    .option("changes_to", t1)
    .load()
)
changes.select("id", "balance", "_change_type").show()

# the change feed as a stream: a snapshot first, then changes; offsets are timestamps bounded
# by the table's resolved ts; maxRowsPerTrigger bounds a batch without splitting a transaction
feed = (
    spark.readStream.format("snapview")
    .option("coordinator", addr)
    .option("table", "accounts")
    .option("readChangeFeed", "true")
    .load()
)

# exactly-once sink: one store transaction (epoch) per micro-batch; mode: upsert | delete | append
# (or: .writeStream.format("snapview").option("coordinator", addr).option("table", ...)
#      .option("mode", "append"))
with tempfile.TemporaryDirectory() as path:
    q = (
        feed.select("id", "balance")
        .writeStream.foreachBatch(EpochWriter(addr, table="accounts_log", mode="append"))
        .option("checkpointLocation", path)
        .start()
    )
    q.processAllAvailable()
    q.stop()
print("accounts_log rows:", client.read("accounts_log").num_rows)

# a one-off load: save() is one epoch, exactly once, and every save() is its own epoch (from
# Python: EpochWriter(addr, table="accounts_log", mode="append").load(df)); Spark's
# .mode("append") writes as the option mode says; .mode("overwrite") is refused
(
    spark.createDataFrame([(6, 600), (7, 700)], "id BIGINT, balance BIGINT")
    .write.format("snapview")
    .option("coordinator", addr)
    .option("table", "accounts_log")
    .option("mode", "append")
    .mode("append")
    .save()
)
print("accounts_log rows after the load:", client.read("accounts_log").num_rows)

spark.stop()
client.close()
