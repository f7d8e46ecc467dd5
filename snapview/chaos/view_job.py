"""A MaterializedView job in its own process, for crash tests.

    python -m snapview.chaos.view_job ADDRESS TARGET QUERY PRIMARY_KEY STOP_FILE

Builds and starts the view, prints ``STARTED``, and runs until STOP_FILE exists; then stops the
job and exits 0. Tests kill it (SNAPVIEW_FAILPOINTS ... panic_group, which takes the JVM too) and
start it again.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from snapview.local_spark import local_session

if TYPE_CHECKING:
    from spark_sink import ViewJob


def main() -> int:
    address, target, query, pk, stop_file = sys.argv[1:6]

    from spark_sink import MaterializedView

    spark = local_session("local[1]", shuffle_partitions=1)
    job = (
        MaterializedView.builder(spark)
        .coordinator(address)
        .query(query)
        .target(target)
        .primary_key(pk)
        .trigger_interval("100 milliseconds")
        .build()
        .start()
    )
    print("STARTED", flush=True)
    while not os.path.exists(stop_file):
        if not job.is_active():
            print(f"FAILED {job.failure_text()}", flush=True)
            return 1
        time.sleep(0.05)
    job.stop()
    print("STOPPED", json_progress(job), flush=True)
    spark.stop()
    return 0


def json_progress(job: ViewJob) -> str:
    import json

    return json.dumps(job.strategy.progress.as_dict())


if __name__ == "__main__":
    sys.exit(main())
