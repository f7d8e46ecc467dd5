"""Large requests next to small ones, against a real snapview serve on 127.0.0.1.

    .venv/bin/python scripts/bench_requests.py [--runs 3] [--rows 100000] [--seconds 15]

A bulk writer process commits transactions of --rows rows (about 100 bytes each) in a loop; the
client splits each into requests within kvstore.limits. Meanwhile this process times one-row
transactions for --seconds (several whole bulk transactions, their commits included). Prints, per run and as medians: the one-row p50/p99 alone and beside the bulk
writer, their ratio, and the bulk writer's rows/s. Before the limits, one 1M-row prewrite held the
writer for 53 s and one-row transactions waited 45 s (issue 11).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import coordinator  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402


def bulk_writer(address: str, rows: int, stop, done) -> None:
    c = coordinator.connect(address)
    body = "x" * 90
    base = 1_000_000
    n = 0
    t0 = time.perf_counter()
    while not stop.is_set():
        with c.transaction() as t:
            for i in range(rows):
                t.put("bulk", {"id": base + i, "body": body})
        n += rows
    done.put(n / (time.perf_counter() - t0))
    c.close()


def small_latencies(c: coordinator.Client, samples: int, seconds: float = 0.0) -> list[float]:
    """One-row transaction latencies in ms: ``samples`` of them, and for at least ``seconds``."""
    out: list[float] = []
    end = time.perf_counter() + seconds
    i = 0
    while i < samples or time.perf_counter() < end:
        i += 1
        t0 = time.perf_counter()
        with c.transaction() as t:
            t.put("small", {"id": i, "v": i})
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def one_run(rows: int, samples: int, seconds: float) -> dict[str, float]:
    with EmbeddedServer() as server:
        c = coordinator.connect(server.address)
        c.create_table("bulk", "id BIGINT, body STRING", primary_key=["id"])
        c.create_table("small", "id BIGINT, v BIGINT", primary_key=["id"])
        alone = small_latencies(c, samples)
        ctx = mp.get_context("spawn")
        stop, done = ctx.Event(), ctx.Queue()
        p = ctx.Process(target=bulk_writer, args=(server.address, rows, stop, done))
        p.start()
        time.sleep(3)  # let the bulk writer reach its steady loop
        beside = small_latencies(c, samples, seconds)
        stop.set()
        bulk_rate = done.get(timeout=300)
        p.join(60)
        c.close()
    return {
        "alone_p50": pct(alone, 0.5),
        "alone_p99": pct(alone, 0.99),
        "beside_p50": pct(beside, 0.5),
        "beside_p99": pct(beside, 0.99),
        "bulk_rows_s": bulk_rate,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=15.0, help="sampling time beside the writer")
    a = ap.parse_args()
    results = []
    for i in range(a.runs):
        r = one_run(a.rows, a.samples, a.seconds)
        results.append(r)
        print(f"run {i + 1}: " + ", ".join(f"{k}={v:,.1f}" for k, v in r.items()), flush=True)
    med = {k: statistics.median(r[k] for r in results) for k in results[0]}
    print(
        f"median over {a.runs} runs: one-row txn p50 {med['alone_p50']:.1f} ms alone, "
        f"{med['beside_p50']:.1f} ms beside the bulk writer; p99 {med['alone_p99']:.1f} ms alone, "
        f"{med['beside_p99']:.1f} ms beside ({med['beside_p99'] / med['alone_p99']:.1f}x); "
        f"bulk writer {med['bulk_rows_s']:,.0f} rows/s"
    )


if __name__ == "__main__":
    main()
