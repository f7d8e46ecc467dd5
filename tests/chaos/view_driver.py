"""The bank views in a process of their own (a view job driver the nemesis can kill).

    python -m tests.chaos.view_driver ADDRESS MASTER STOP_FILE

Prints ``STARTED`` once the three views run; stops them and exits 0 when STOP_FILE exists.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    address, master, stop_file = sys.argv[1:4]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from demos.bank import build_views

    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jobs = build_views(spark, address)
    print("STARTED", flush=True)
    while not os.path.exists(stop_file):
        for name, j in jobs.items():
            if not j.query.isActive:
                print(f"FAILED {name}: {j.error or j.query.exception()}", flush=True)
                return 1
        time.sleep(0.1)
    for j in jobs.values():
        j.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
