"""TSO and transaction-rate benchmarks against a real snapview serve on 127.0.0.1.

    .venv/bin/python scripts/bench_tso.py [--runs 3] [--seconds 5]

Prints medians over --runs runs:
  * timestamps/s from 8 threads sharing one batching client;
  * single-call Tso latency (p50/p99), a bare unary RPC and through the client;
  * two-row transfer transactions/s from 8 client processes, and how many store actions each
    LMDB commit carried (group commit at work).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc  # noqa: E402

import coordinator  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb  # noqa: E402
from snapview_proto.snapview.v1 import coordinator_pb2_grpc as cpb_grpc  # noqa: E402

ACCOUNTS = 1000


def tso_throughput(address: str, threads: int, seconds: float) -> float:
    c = coordinator.connect(address)
    c.tso()
    counts = [0] * threads
    stop = threading.Event()

    def worker(i):
        n = 0
        while not stop.is_set():
            c.tso()
            n += 1
        counts[i] = n

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    c.close()
    return sum(counts) / dt


def tso_latency(address: str, calls: int) -> tuple[float, float, float, float]:
    with grpc.insecure_channel(address) as ch:
        stub = cpb_grpc.CoordinatorStub(ch)
        stub.Tso(cpb.TsoRequest(count=1))
        lat = []
        for _ in range(calls):
            t0 = time.perf_counter()
            stub.Tso(cpb.TsoRequest(count=1))
            lat.append(time.perf_counter() - t0)
    c = coordinator.connect(address)
    c.tso()
    lat_c = []
    for _ in range(calls):
        t0 = time.perf_counter()
        c.tso()
        lat_c.append(time.perf_counter() - t0)
    c.close()
    q = statistics.quantiles
    return (
        q(lat, n=100)[49] * 1e3,
        q(lat, n=100)[98] * 1e3,
        q(lat_c, n=100)[49] * 1e3,
        q(lat_c, n=100)[98] * 1e3,
    )


def _transfer_proc(address: str, seed: int, seconds: float, out) -> None:
    rng = random.Random(seed)
    c = coordinator.connect(address)
    done = conflicts = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a, b = rng.sample(range(ACCOUNTS), 2)
        try:
            with c.transaction() as t:
                ra, rb = t.get("acct", {"id": a}), t.get("acct", {"id": b})
                t.put("acct", {"id": a, "balance": ra["balance"] - 1})
                t.put("acct", {"id": b, "balance": rb["balance"] + 1})
            done += 1
        except coordinator.WriteConflict:
            conflicts += 1
    c.close()
    out.put((done, conflicts))


def transfers(address: str, procs: int, seconds: float) -> tuple[float, float, int]:
    c = coordinator.connect(address)
    c.create_table("acct", "id BIGINT, balance BIGINT", ["id"], if_not_exists=True)
    with c.transaction() as t:
        for i in range(ACCOUNTS):
            t.put("acct", {"id": i, "balance": 1000})
    before = c.status()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ps = [ctx.Process(target=_transfer_proc, args=(address, s, seconds, out)) for s in range(procs)]
    for p in ps:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join()
    after = c.status()
    total = sum(r[0] for r in results)
    assert sum(c.read("acct").column("balance").to_pylist()) == ACCOUNTS * 1000
    c.close()
    groups = after.group_commits - before.group_commits
    acts = after.grouped_actions - before.grouped_actions
    return total / seconds, acts / max(groups, 1), sum(r[1] for r in results)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--calls", type=int, default=3000)
    args = ap.parse_args()
    res: dict[str, list[float]] = {}
    for run in range(args.runs):
        with EmbeddedServer() as srv:
            r = {"tso_per_s": tso_throughput(srv.address, 8, args.seconds)}
            r["raw_p50_ms"], r["raw_p99_ms"], r["client_p50_ms"], r["client_p99_ms"] = tso_latency(
                srv.address, args.calls
            )
            r["transfers_per_s"], r["actions_per_commit"], r["conflicts"] = transfers(
                srv.address, 8, args.seconds * 2
            )
        for k, v in r.items():
            res.setdefault(k, []).append(v)
        print(f"run {run + 1}: " + ", ".join(f"{k}={v:,.3f}" for k, v in r.items()), flush=True)
    m = {k: statistics.median(v) for k, v in res.items()}
    print(f"\nmedians of {args.runs} runs (server and clients on this machine, fsync on)")
    print(f"  TSO, batching client, 8 threads       {m['tso_per_s']:>10,.0f} timestamps/s")
    print(
        f"  TSO single call, bare RPC            p50 {m['raw_p50_ms']:.3f} ms  "
        f"p99 {m['raw_p99_ms']:.3f} ms"
    )
    print(
        f"  TSO single call, through the client  p50 {m['client_p50_ms']:.3f} ms  "
        f"p99 {m['client_p99_ms']:.3f} ms"
    )
    print(
        f"  transfers, 8 processes                {m['transfers_per_s']:>10,.0f} txn/s "
        f"({m['conflicts']:.0f} conflicts retried)"
    )
    print(
        f"  group commit: store actions per LMDB commit during transfers "
        f"{m['actions_per_commit']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
