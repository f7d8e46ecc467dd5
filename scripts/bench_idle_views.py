"""What views cost while nothing changes: CPU of every process over a window, side by side.

    .venv/bin/python scripts/bench_idle_views.py [--views 3] [--runs 3] [--window 20]

One server (barrier interval 1 s) and one local[2] session. Nothing writes to the source, so
every barrier is an empty epoch for each view.

1. ``jobs``: --views view jobs (``MaterializedView ... .start()``, trigger 200 ms), each a
   GROUP BY over a 1,000-row table, as snapview runs them: a thread of the driver per job.
2. ``streams``: --views Structured Streaming queries over ``format("snapview_barriers")`` with a
   ``foreachBatch`` that collects each batch's rows and does nothing else (trigger 200 ms): the
   skeleton of a view job before it became a thread (issue 27's last stop), without any epoch.

Each is settled for 10 s after every view holds a barrier, then the CPU time of every process on
the machine is read from /proc at the start and end of --window seconds, --runs windows each,
the phases taking turns. Printed: the median share of one core per kind of process (Spark's
JVM, the snapview server, this driver, other Python processes Spark started), and the ratio of
the totals. The machine's other load counts too: run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import coordinator  # noqa: E402
from snapview.demos.bank import create_accounts  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview.local_spark import local_session  # noqa: E402

SQL = "SELECT branch, SUM(balance) AS total, COUNT(*) AS n FROM accounts GROUP BY branch"
KINDS = ("jvm", "server", "driver", "spark python", "other")


def _cpu_ticks() -> dict[int, tuple[int, str]]:
    """{pid: (user + system clock ticks, command line)} of every process readable now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline") as f:
                cmd = f.read().replace("\0", " ")
        except OSError:
            continue
        out[int(name)] = (int(fields[11]) + int(fields[12]), cmd)
    return out


def _kind(pid: int, cmd: str) -> str:
    if pid == os.getpid():
        return "driver"
    if "java" in cmd.split(" ")[0]:
        return "jvm"
    if "snapview.cli serve" in cmd:
        return "server"
    if "pyspark" in cmd:
        return "spark python"
    return "other"


def _window(seconds: float) -> dict[str, float]:
    """Share of one core per kind of process over ``seconds``."""
    hz = os.sysconf("SC_CLK_TCK")
    a = _cpu_ticks()
    t0 = time.monotonic()
    time.sleep(seconds)
    b = _cpu_ticks()
    dt = time.monotonic() - t0
    share = dict.fromkeys(KINDS, 0.0)
    for pid, (ticks, cmd) in b.items():
        if pid in a:
            share[_kind(pid, cmd)] += (ticks - a[pid][0]) / hz / dt
    return share


def _start_jobs(spark, address: str, n: int) -> list:
    from spark_sink import MaterializedView

    jobs = []
    for i in range(n):
        b = MaterializedView.builder(spark).coordinator(address).query(SQL).target(f"idle_v{i}")
        jobs.append(b.primary_key("branch").trigger_interval("200 milliseconds").build().start())
    return jobs


def _start_streams(spark, address: str, n: int) -> list:
    from spark_source import register_source
    from spark_source.barrier_source import BarrierDataSource

    register_source(spark, BarrierDataSource)
    streams = []
    for i in range(n):
        df = (
            spark.readStream.format("snapview_barriers")
            .option("coordinator", address)
            .option("job", f"idle_v{i}")
            .load()
        )
        q = (
            df.writeStream.foreachBatch(lambda d, _id: d.collect())
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        streams.append(q)
    return streams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--views", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=float, default=20.0)
    args = ap.parse_args()
    results: dict[str, list[dict[str, float]]] = {"jobs": [], "streams": []}
    with EmbeddedServer(extra_args=["--barrier-interval", "1s"]) as srv:
        c = coordinator.connect(srv.address)
        create_accounts(c, 1000)
        spark = local_session(app_name="bench-idle-views")
        for run in range(args.runs):
            for phase in ("jobs", "streams"):
                if phase == "jobs":
                    jobs = _start_jobs(spark, srv.address, args.views)
                    ts = c.tso()
                    for j in jobs:
                        j.await_barrier(ts, timeout=300)
                else:
                    streams = _start_streams(spark, srv.address, args.views)
                    for q in streams:
                        q.processAllAvailable()
                time.sleep(10)
                share = _window(args.window)
                results[phase].append(share)
                print(
                    f"run {run + 1} {phase:7}: "
                    + ", ".join(f"{k} {100 * v:.1f}%" for k, v in share.items())
                    + f", total {100 * sum(share.values()):.1f}% of one core",
                    flush=True,
                )
                if phase == "jobs":
                    for j in jobs:
                        j.stop()
                else:
                    for q in streams:
                        q.stop()
        spark.stop()
    print(
        f"\n{args.views} idle views, barrier interval 1 s, medians of {args.runs} windows of "
        f"{args.window:g} s (share of one core):"
    )
    print(f"{'':16}{'jobs (threads)':>16}{'streams':>12}")
    med = {p: {k: statistics.median(r[k] for r in rs) for k in KINDS} for p, rs in results.items()}
    totals = {p: statistics.median(sum(r.values()) for r in rs) for p, rs in results.items()}
    for k in KINDS:
        print(f"{k:16}{100 * med['jobs'][k]:15.1f}%{100 * med['streams'][k]:11.1f}%")
    print(f"{'total':16}{100 * totals['jobs']:15.1f}%{100 * totals['streams']:11.1f}%")
    print(f"streams / jobs: {totals['streams'] / max(totals['jobs'], 1e-9):.1f}x the CPU")


if __name__ == "__main__":
    main()
