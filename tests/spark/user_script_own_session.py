"""A user's script: their own SparkSession, whatever PYSPARK_PYTHON says."""

import sys

from pyspark.sql import SparkSession

import coordinator
from spark_sink import MaterializedView

addr, target = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
job = (
    MaterializedView.builder(spark)
    .coordinator(addr)
    .query("SELECT id, balance FROM wp_src")
    .target(target)
    .build()
    .start()
)
c = coordinator.connect(addr)
b = job.await_barrier(c.tso(), timeout=120)
rows = c.snapshot([target], barrier=b).read(target).num_rows
job.stop()
spark.stop()
print(f"ok rows={rows}")
