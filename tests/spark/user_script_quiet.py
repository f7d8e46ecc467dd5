"""A clean run: local session (which leaves the environment alone); two views built, started and
stopped at the session's own log level (ERROR), then, after the line ``MARK`` on stderr, two
more at WARN (a user's own choice: Spark's warnings may show, snapview's must not). Prints
``ok 2`` for each half.

python user_script_quiet.py HOST:PORT
"""

import os
import sys

import coordinator
from snapview.local_spark import local_session
from spark_sink import MaterializedView

MARK = "--- from here at WARN ---"

addr = sys.argv[1]
c = coordinator.connect(addr)
c.create_table("q_src", "id BIGINT, grp INT, v BIGINT", primary_key=["id"])
with c.transaction() as t:
    for i in range(10):
        t.put("q_src", {"id": i, "grp": i % 3, "v": i})
env = dict(os.environ)
spark = local_session()
# PySpark's own context exports SPARK_AUTH_SOCKET_TIMEOUT and SPARK_BUFFER_SIZE; nothing else
changed = {k for k in {*env, *os.environ} if env.get(k) != os.environ.get(k)}
assert all(k.startswith("SPARK_") for k in changed), f"local_session changed {sorted(changed)}"


def views(suffix: str) -> None:
    jobs = [
        MaterializedView.builder(spark)
        .coordinator(addr)
        .query(sql)
        .target(target + suffix)
        .primary_key(key)
        .trigger_interval("200 milliseconds")
        .build()
        .start()
        for sql, target, key in [
            ("SELECT grp, SUM(v) AS total FROM q_src GROUP BY grp", "q_by_grp", "grp"),
            ("SELECT id, v FROM q_src WHERE v > 3", "q_big", "id"),
        ]
    ]
    ts = c.tso()
    barriers = [job.await_barrier(ts, timeout=120) for job in jobs]
    for job in jobs:
        job.stop()
    print("ok", len(barriers), flush=True)


views("")
print(MARK, file=sys.stderr, flush=True)
spark.sparkContext.setLogLevel("WARN")
views("_warn")
spark.stop()
c.close()
