"""Automatic GC under a steady update workload: writer latency, GC throughput, data-dir size.

    .venv/bin/python scripts/bench_gc.py [--runs 3] [--keys 2000] [--rate 200] [--writers 3]
                                         [--duration 600] [--quick] [--skip-latency]
                                         [--skip-size] [--concurrent]

The recorded figures (docs/performance.md, "GC") come from
``scripts/bench_gc.py --runs 3`` (latency and throughput) and
``scripts/bench_gc.py --skip-latency --duration 600`` (data-dir size).

Every part runs real ``snapview serve`` processes on 127.0.0.1 (``EmbeddedServer``), each on a
fresh data dir. The workload: a table of --keys rows of ~200 bytes (BIGINT id, STRING(180),
BIGINT), loaded first; then --writers processes commit small transactions (--rows-per-txn
random rows updated, blind writes, 1PC) at a fixed offered rate of --rate commits/s in total
(open loop: each writer keeps its own schedule, so a slow commit does not lower the offered
rate). Every update of a row leaves an old version behind for GC. The achieved rate is printed
beside the offered one; a run that falls behind by more than 5% says so.

1. Commit latency, GC off vs on, side by side: each run starts a server with ``--gc-interval
   0`` (GC off) and one with ``--retention --gc-retention --gc-interval --gc-interval-on`` (GC
   on), one after the other (the order alternates between runs), with the same workload. The
   first --warmup seconds are excluded (for GC on, the retention window fills during the warm-up,
   so GC is collecting from its end on); latencies are counted over the next --window seconds,
   and only if ``client.gc_status()`` shows GC passes completing during the window (checked,
   printed). A commit's latency is the wall time of ``with client.transaction() as t: ...``
   (start ts, the puts, 1PC prewrite). p50 and p99 are medians of --runs; the ratio on/off is the
   median of the per-run ratios (target: p99 on <= 1.5x off).
2. GC throughput, from the GC-on runs' ``gc_status().progress`` deltas over the window: versions
   removed per second of GC step time (what a step can do; the capacity) and per wall second
   (what it did: in a steady state the rate old versions are made at), records examined per
   second of step time, and the fraction of the wall time spent in steps.
3. Data-dir size over a steady run of --duration seconds, once per retention in --retentions
   (default 10m and 1m, --gc-interval at the server's default 10s): the size on disk (allocated
   blocks of the data dir's files, as ``du``) and LMDB's used bytes (``client.status()
   .used_bytes``: the pages up to the last one in use) every --sample seconds. The retentions run
   one after the other, or with --concurrent at the same time, two servers each with its own
   writers (half the wall time; on the shared 2-core machine two servers at 200 commits/s each
   fell 5-10% short of the offered rate, which the achieved rate printed shows). Printed: a table over time, and the
   growth over the first and the last minute after the retention window filled (with a retention
   as long as the run, the window never fills: it grows throughout).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import coordinator  # noqa: E402
from snapview.commands.common import parse_duration  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402

TABLE = "gcbench"
SCHEMA = "id BIGINT, payload STRING, n BIGINT"
PAYLOAD = 180  # ~200 bytes a row with the two BIGINTs and the encoding


def _row(rng: random.Random, i: int) -> dict:
    return {"id": i, "payload": f"{rng.getrandbits(64):0{PAYLOAD}d}", "n": rng.getrandbits(62)}


def _writer(
    address: str,
    keys: int,
    rows_per_txn: int,
    rate: float,
    start_at: float,
    seconds: float,
    seed: int,
    record: bool,
    out_q,
) -> None:
    """Commit at ``rate``/s from wall time ``start_at`` for ``seconds``; sends back
    (commits, conflicts, [(wall_start, latency_s)] if ``record``)."""
    c = coordinator.connect(address)
    rng = random.Random(seed)
    lat: list[tuple[float, float]] = []
    commits = conflicts = 0
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    next_at = time.monotonic()
    end = next_at + seconds
    try:
        while True:
            d = next_at - time.monotonic()
            if d > 0:
                time.sleep(d)
            if time.monotonic() >= end:
                break
            next_at += 1.0 / rate
            wall = time.time()
            t0 = time.perf_counter()
            try:
                with c.transaction() as t:
                    for i in rng.sample(range(keys), rows_per_txn):
                        t.put(TABLE, _row(rng, i))
            except coordinator.WriteConflict:
                conflicts += 1
                continue
            dt = time.perf_counter() - t0
            commits += 1
            if record:
                lat.append((wall, dt))
    finally:
        c.close()
    out_q.put((commits, conflicts, lat))


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def dir_bytes(path: str) -> int:
    """Allocated size on disk of the files under ``path`` (``du``: st_blocks, not st_size)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


class Bench:
    """One server on a fresh data dir, its table loaded, and its writers."""

    def __init__(self, args, extra_args: list[str], tmp: str, name: str) -> None:
        self.args, self.name = args, name
        self.dir = tempfile.mkdtemp(prefix=f"gc-{name}-", dir=tmp)
        self.srv = EmbeddedServer(self.dir, extra_args=extra_args)
        self.c = None
        self.procs: list = []
        self.q = None

    def start(self) -> Bench:
        self.srv.start()
        self.c = coordinator.connect(self.srv.address)
        self.c.create_table(TABLE, SCHEMA, ["id"])
        rng = random.Random(1)
        with self.c.transaction(lock_ttl_ms=60_000) as t:
            for i in range(self.args.keys):
                t.put(TABLE, _row(rng, i))
        return self

    def start_writers(self, seconds: float, record: bool, start_at: float) -> None:
        ctx = mp.get_context("spawn")
        self.q = ctx.Queue()
        w = self.args.writers
        for i in range(w):
            p = ctx.Process(
                target=_writer,
                args=(
                    self.srv.address,
                    self.args.keys,
                    self.args.rows_per_txn,
                    self.args.rate / w,
                    start_at,
                    seconds,
                    1000 + i,
                    record,
                    self.q,
                ),
                daemon=True,
            )
            p.start()
            self.procs.append(p)

    def join_writers(self, timeout: float) -> tuple[int, int, list[tuple[float, float]]]:
        commits = conflicts = 0
        lat: list[tuple[float, float]] = []
        for _ in self.procs:
            n, k, ls = self.q.get(timeout=timeout)
            commits, conflicts = commits + n, conflicts + k
            lat += ls
        for p in self.procs:
            p.join(10)
        self.procs = []
        return commits, conflicts, lat

    def gc(self) -> dict:
        p = self.c.gc_status().progress
        return {
            "t": time.time(),
            "versions": p.versions_removed,
            "examined": p.records_examined,
            "deleted": p.records_deleted,
            "step_s": p.step_seconds,
            "passes": p.passes,
            "steps": p.steps,
        }

    def sizes(self) -> tuple[int, int]:
        return dir_bytes(self.dir), self.c.status().used_bytes

    def close(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        if self.c is not None:
            try:
                self.c.close()
            except Exception:  # noqa: BLE001 - closing after a failure
                pass
        self.srv.stop()
        if not self.args.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------- 1 and 2: latency


def latency_run(args, tmp: str, gc_on: bool) -> dict:
    extra = (
        ["--retention", args.gc_retention, "--gc-interval", args.gc_interval_on]
        if gc_on
        else ["--gc-interval", "0"]
    )
    b = Bench(args, extra, tmp, "on" if gc_on else "off")
    try:
        b.start()
        total = args.warmup + args.window
        t_start = time.time() + 3.0  # the writer processes start up first
        b.start_writers(total, record=True, start_at=t_start)
        w0, w1 = t_start + args.warmup, t_start + total
        samples = []
        while time.time() < w1 + 0.5:
            samples.append(b.gc())
            time.sleep(1.0)
        commits, conflicts, lat = b.join_writers(timeout=60)
        inside = [s for s in samples if w0 <= s["t"] <= w1]
        g0, g1 = inside[0], inside[-1]
        wall = g1["t"] - g0["t"]
        xs = [dt for wall_t, dt in lat if w0 <= wall_t < w1]
        return {
            "p50": pct(xs, 50),
            "p99": pct(xs, 99),
            "n": len(xs),
            "achieved": sum(1 for wall_t, _ in lat if w0 <= wall_t < w1) / args.window,
            "conflicts": conflicts,
            "passes": g1["passes"] - g0["passes"],
            "steps": g1["steps"] - g0["steps"],
            "versions": g1["versions"] - g0["versions"],
            "examined": g1["examined"] - g0["examined"],
            "step_s": g1["step_s"] - g0["step_s"],
            "wall": wall,
        }
    finally:
        b.close()


def latency(args, tmp: str) -> None:
    ms = 1000.0
    print(
        f"latency: {args.keys:,} keys of ~200 bytes, {args.rows_per_txn} rows per commit, "
        f"offered {args.rate:g} commits/s from {args.writers} writer processes; "
        f"warm-up {args.warmup:g}s, window {args.window:g}s; "
        f"GC off = --gc-interval 0, GC on = --retention {args.gc_retention} "
        f"--gc-interval {args.gc_interval_on}",
        flush=True,
    )
    off, on = [], []
    for run in range(args.runs):
        order = (False, True) if run % 2 == 0 else (True, False)
        res = {}
        for gc_on in order:
            res[gc_on] = latency_run(args, tmp, gc_on)
        off.append(res[False])
        on.append(res[True])
        for label, r in (("off", res[False]), ("on ", res[True])):
            extra = ""
            if label == "on ":
                extra = (
                    f"; GC in window: {r['passes']} passes, {r['steps']} steps, "
                    f"{r['versions']:,} versions, step time {r['step_s']:.2f}s"
                )
            print(
                f"  run {run + 1} GC {label}: p50 {r['p50'] * ms:.2f}ms p99 {r['p99'] * ms:.2f}ms "
                f"over {r['n']:,} commits, achieved {r['achieved']:.0f}/s "
                f"({r['conflicts']} conflicts){extra}",
                flush=True,
            )
        if res[True]["passes"] < 1 or res[True]["versions"] < 1:
            print("  WARNING: GC did not collect during the window of this run", flush=True)
    med = statistics.median
    r50 = med(b["p50"] / a["p50"] for a, b in zip(off, on, strict=True))
    r99 = med(b["p99"] / a["p99"] for a, b in zip(off, on, strict=True))
    collecting = all(r["passes"] >= 1 and r["versions"] >= 1 for r in on)
    print(
        f"\nmedians of {args.runs} runs, offered {args.rate:g} commits/s "
        f"(achieved: off {med(r['achieved'] for r in off):.0f}/s, "
        f"on {med(r['achieved'] for r in on):.0f}/s), {args.keys:,} keys, "
        f"{args.rows_per_txn} rows/commit, window {args.window:g}s after {args.warmup:g}s warm-up"
    )
    print("  commit latency          p50        p99")
    for label, rs, note in (
        ("off", off, ""),
        ("on ", on, f"   (collecting in every window: {'yes' if collecting else 'NO'})"),
    ):
        p50, p99 = med(r["p50"] for r in rs) * ms, med(r["p99"] for r in rs) * ms
        print(f"  GC {label}              {p50:7.2f}ms {p99:7.2f}ms{note}")
    print(
        f"  ratio on/off        {r50:7.2f}x  {r99:7.2f}x   (target p99 <= 1.5x: "
        f"{'met' if r99 <= 1.5 else 'NOT met'})"
    )
    v_step = med(r["versions"] / r["step_s"] for r in on if r["step_s"] > 0)
    v_wall = med(r["versions"] / r["wall"] for r in on)
    e_step = med(r["examined"] / r["step_s"] for r in on if r["step_s"] > 0)
    duty = med(r["step_s"] / r["wall"] for r in on)
    per_step = med(r["step_s"] / r["steps"] for r in on if r["steps"]) * ms
    print(
        f"GC throughput (GC-on windows, medians): {v_step:,.0f} versions/s of step time, "
        f"{v_wall:,.0f} versions/s of wall time; {e_step:,.0f} records examined/s of step time; "
        f"{duty * 100:.1f}% of wall time in steps, {per_step:.1f}ms a step",
        flush=True,
    )


# ---------------------------------------------------------------------- 3: data-dir size


def size_run(args, tmp: str) -> None:
    rets = [r.strip() for r in args.retentions.split(",") if r.strip()]
    print(
        f"\ndata-dir size: {args.duration:g}s at offered {args.rate:g} commits/s per server, "
        f"{args.keys:,} keys, retentions {', '.join(rets)} (--gc-interval {args.size_gc_interval}),"
        f" {'sequentially' if args.sequential else 'concurrently, one server each'}",
        flush=True,
    )
    groups = [[r] for r in rets] if args.sequential else [rets]
    table: dict[str, list[tuple[float, int, int]]] = {}
    achieved: dict[str, float] = {}
    for group in groups:
        benches = {}
        try:
            for r in group:
                extra = ["--retention", r, "--gc-interval", args.size_gc_interval]
                benches[r] = Bench(args, extra, tmp, "size").start()
            t_start = time.time() + 3.0
            for b in benches.values():
                b.start_writers(args.duration, record=False, start_at=t_start)
            for r in group:
                table[r] = []
            next_s = t_start
            while True:
                d = next_s - time.time()
                if d > 0:
                    time.sleep(d)
                el = time.time() - t_start
                for r, b in benches.items():
                    du, used = b.sizes()
                    table[r].append((el, du, used))
                if el >= args.duration:
                    break
                next_s = min(next_s + args.sample, t_start + args.duration)
            for r, b in benches.items():
                commits, _conf, _ = b.join_writers(timeout=60)
                achieved[r] = commits / args.duration
        finally:
            for b in benches.values():
                b.close()
    mib = 1 << 20
    hdr = "  time  " + "".join(f"| {r:>6} du MiB  used MiB " for r in rets)
    print(hdr)
    n = min(len(v) for v in table.values())
    for i in range(n):
        el = table[rets[0]][i][0]
        row = f"  {el:5.0f}s "
        for r in rets:
            _, du, used = table[r][i]
            row += f"| {du / mib:13.1f} {used / mib:9.1f} "
        print(row)
    for r in rets:
        ret_s = parse_duration(r)
        pts = table[r]

        def at(t: float, pts=pts) -> tuple[int, int]:
            best = min(pts, key=lambda p: abs(p[0] - t))
            return best[1], best[2]

        end = pts[-1][0]
        filled = ret_s + args.size_gc_interval_s
        if filled + 60 <= end:
            f0, f1 = at(filled), at(filled + 60)
            l0, l1 = at(end - 60), at(end)
            ref_t = filled + 60  # the end of the first minute after the window filled
            ref = f1
            print(
                f"  retention {r}: achieved {achieved[r]:.0f}/s; window filled at ~{filled:.0f}s; "
                f"growth first minute after ({filled:.0f}-{filled + 60:.0f}s): "
                f"du {(f1[0] - f0[0]) / mib:+.1f} MiB, used {(f1[1] - f0[1]) / mib:+.1f} MiB; "
                f"last minute: du {(l1[0] - l0[0]) / mib:+.1f} MiB, "
                f"used {(l1[1] - l0[1]) / mib:+.1f} MiB; "
                f"size at end / at {ref_t:.0f}s: du {l1[0] / ref[0]:.2f}x, "
                f"used {l1[1] / ref[1]:.2f}x"
            )
        else:
            f0, f1 = at(0), at(min(60, end))
            l0, l1 = at(max(0, end - 60)), at(end)
            print(
                f"  retention {r}: achieved {achieved[r]:.0f}/s; the window does not fill within "
                f"the run; growth first minute: du {(f1[0] - f0[0]) / mib:+.1f} MiB, "
                f"used {(f1[1] - f0[1]) / mib:+.1f} MiB; last minute: "
                f"du {(l1[0] - l0[0]) / mib:+.1f} MiB, used {(l1[1] - l0[1]) / mib:+.1f} MiB; "
                f"end {l1[0] / mib:.1f} MiB du, {l1[1] / mib:.1f} MiB used"
            )
        if achieved[r] < 0.95 * args.rate:
            print(
                f"  WARNING: retention {r} achieved {achieved[r]:.0f}/s < 95% of the offered "
                f"{args.rate:g}/s" + ("" if args.sequential else "; run without --concurrent")
            )
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="latency runs (medians)")
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--rows-per-txn", type=int, default=2)
    ap.add_argument("--rate", type=float, default=200.0, help="offered commits/s (per server)")
    ap.add_argument("--writers", type=int, default=3, help="writer processes per server")
    ap.add_argument("--warmup", type=float, default=35.0, help="latency: seconds excluded")
    ap.add_argument("--window", type=float, default=30.0, help="latency: seconds measured")
    ap.add_argument("--gc-retention", default="30s", help="latency: --retention with GC on")
    ap.add_argument("--gc-interval-on", default="2s", help="latency: --gc-interval with GC on")
    ap.add_argument("--duration", type=float, default=600.0, help="size: seconds per run")
    ap.add_argument("--retentions", default="10m,1m", help="size: the retentions compared")
    ap.add_argument("--size-gc-interval", default="10s", help="size: --gc-interval")
    ap.add_argument("--sample", type=float, default=10.0, help="size: seconds between samples")
    ap.add_argument(
        "--concurrent",
        action="store_true",
        help="size: run the retentions at the same time, one server each (halves the wall time; "
        "only if the achieved rates stay within 5%% of the offered one)",
    )
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-size", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a ~2-minute smoke run: 1 latency run (retention 10s, interval 1s, 12s warm-up, "
        "15s window), size over 90s with retentions 2m and 15s (--gc-interval 2s), sampled "
        "every 5s",
    )
    args = ap.parse_args()
    if args.quick:
        args.runs, args.gc_retention, args.gc_interval_on = 1, "10s", "1s"
        args.warmup, args.window = 12.0, 15.0
        args.duration, args.retentions, args.sample = 90.0, "2m,15s", 5.0
        args.size_gc_interval, args.concurrent = "2s", True
    args.size_gc_interval_s = parse_duration(args.size_gc_interval)
    args.sequential = not args.concurrent
    if parse_duration(args.gc_retention) + 2 * parse_duration(args.gc_interval_on) > args.warmup:
        print("WARNING: --warmup shorter than the GC-on retention: GC may not collect yet")
    print("command: " + " ".join(["scripts/bench_gc.py", *sys.argv[1:]]), flush=True)
    tmp = tempfile.mkdtemp(prefix="bench-gc-")
    try:
        if not args.skip_latency:
            latency(args, tmp)
        if not args.skip_size:
            size_run(args, tmp)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
