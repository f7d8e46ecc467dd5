"""Tso latency of one caller while N other clients each hold a TsoStream open.

    .venv/bin/python scripts/bench_clients.py [--clients 1000] [--procs 2] [--seconds 10]

Starts a ``snapview serve`` on 127.0.0.1 (or uses --address), opens --clients gRPC connections
from --procs processes (asyncio, one channel and one open TsoStream each; every client asks its
stream for a timestamp every --interval seconds), and meanwhile times unary Tso calls of a
separate caller, each with a 5 s deadline. Prints p50/p99/max of those calls and the failures
of both sides. Against a server that holds a thread per open stream, the caller stalls once the
streams outnumber the threads.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc  # noqa: E402

from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb  # noqa: E402
from snapview_proto.snapview.v1 import coordinator_pb2_grpc as cpb_grpc  # noqa: E402

# One connection per client, as separate processes would have (gRPC otherwise shares one
# connection among the channels of a process that have the same target and options).
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


async def _clients(address: str, n: int, interval: float, seconds: float, opened) -> tuple:
    failures = 0
    stop_at = time.monotonic() + seconds

    async def one(i: int) -> int:
        async with grpc.aio.insecure_channel(address, options=OWN_CONNECTION) as ch:
            stream = cpb_grpc.CoordinatorStub(ch).TsoStream(timeout=seconds + 60)
            await stream.write(cpb.TsoRequest(count=1))
            await stream.read()
            opened.put(1)
            await asyncio.sleep(random.random() * interval)
            while time.monotonic() < stop_at:
                await stream.write(cpb.TsoRequest(count=1))
                await stream.read()
                await asyncio.sleep(interval)
            await stream.done_writing()
            return 0

    async def guarded(i: int) -> int:
        try:
            return await one(i)
        except grpc.aio.AioRpcError:
            return 1

    results = await asyncio.gather(*(guarded(i) for i in range(n)))
    failures = sum(results)
    return (n, failures)


def _proc(address: str, n: int, interval: float, seconds: float, opened, out) -> None:
    out.put(asyncio.run(_clients(address, n, interval, seconds, opened)))


def measure(address: str, clients: int, procs: int, interval: float, seconds: float) -> dict:
    opened: mp.Queue = mp.Queue()
    out: mp.Queue = mp.Queue()
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    ps = [
        mp.Process(target=_proc, args=(address, k, interval, seconds, opened, out), daemon=True)
        for k in per
    ]
    t0 = time.monotonic()
    for p in ps:
        p.start()
    lat: list[float] = []
    caller_failures = 0
    n_open = 0
    with grpc.insecure_channel(address) as ch:
        stub = cpb_grpc.CoordinatorStub(ch)
        stub.Tso(cpb.TsoRequest(count=1), timeout=30)
        while time.monotonic() - t0 < seconds:
            while not opened.empty():
                opened.get()
                n_open += 1
            t = time.perf_counter()
            try:
                stub.Tso(cpb.TsoRequest(count=1), timeout=5)
                lat.append(time.perf_counter() - t)
            except grpc.RpcError:
                caller_failures += 1
            time.sleep(0.01)
    results = [out.get(timeout=120) for _ in ps]
    for p in ps:
        p.join(10)
    while not opened.empty():
        opened.get()
        n_open += 1
    lat.sort()
    return {
        "streams_opened": n_open,
        "client_failures": sum(f for _, f in results),
        "caller_calls": len(lat),
        "caller_failures": caller_failures,
        "p50_ms": 1000 * statistics.median(lat) if lat else float("nan"),
        "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))] if lat else float("nan"),
        "max_ms": 1000 * lat[-1] if lat else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--interval", type=float, default=1.0, help="s between a client's requests")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--address", help="an already running server (default: start one)")
    args = ap.parse_args()
    if args.address:
        r = measure(args.address, args.clients, args.procs, args.interval, args.seconds)
    else:
        with EmbeddedServer() as srv:
            r = measure(srv.address, args.clients, args.procs, args.interval, args.seconds)
    print(
        f"clients={args.clients} streams_opened={r['streams_opened']} "
        f"client_failures={r['client_failures']} | separate caller Tso: "
        f"calls={r['caller_calls']} failures={r['caller_failures']} "
        f"p50={r['p50_ms']:.2f}ms p99={r['p99_ms']:.2f}ms max={r['max_ms']:.2f}ms"
    )


if __name__ == "__main__":
    main()
