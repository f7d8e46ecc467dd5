"""The bank views in a process of their own (a view job driver the nemesis can kill).

    python -m snapview.chaos.view_driver ADDRESS MASTER STOP_FILE

Prints ``STARTED`` once the three views run; stops them and exits 0 when STOP_FILE exists.
"""

from __future__ import annotations

import os
import sys
import time

from snapview.local_spark import local_session


def main() -> int:
    address, master, stop_file = sys.argv[1:4]

    from snapview.demos.bank import build_views

    spark = local_session(master)
    jobs = build_views(spark, address)
    print("STARTED", flush=True)
    while not os.path.exists(stop_file):
        for name, j in jobs.items():
            if not j.is_active():
                print(f"FAILED {name}: {j.failure_text()}", flush=True)
                return 1
        time.sleep(0.1)
    for j in jobs.values():
        j.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
