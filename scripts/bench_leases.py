"""Reader leases at scale, against a real snapview serve on 127.0.0.1 (issue 25, item 3).

    .venv/bin/python scripts/bench_leases.py [--leases 10000 50000] [--runs 3] [--seconds 3]

For each count N, a fresh server (``--no-sync``, ``--gc-interval 1s``; caps raised to N when the
server has them) gets N leases (8 threads, 100 holders, TTL 1 h). Then, per run, it times
``GcStatus`` as a client calls it by default (and its answer's size), one-row write latency for
--seconds while a dashboard polls ``GcStatus`` every second, and, once the server stopped, one
GC tick (``GcManager.tick``) in this process on the same data dir. Prints each run and the
medians. Runs the same against older code (it passes only what that server knows), so the
figures before and after a change come from one script: run it from each tree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import coordinator  # noqa: E402
from coordinator.server.barriers import Barriers  # noqa: E402
from coordinator.server.core import Core  # noqa: E402
from coordinator.server.gc import GcManager  # noqa: E402
from coordinator.server.registry import Registry  # noqa: E402
from coordinator.server.tso import TimestampOracle  # noqa: E402
from kvstore.store import LocalStore  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb  # noqa: E402

HOLDERS = 100
CAPPED = "page_size" in cpb.GcStatusRequest.DESCRIPTOR.fields_by_name


def take_leases(address: str, n: int) -> None:
    with coordinator.connect(address) as c:
        ts = c.tso()

        def one(i: int) -> None:
            c.lease(ts, ttl_s=3600, holder=f"bench {i % HOLDERS}", renew=False)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(n)))


def gc_status(c: coordinator.Client) -> tuple[float, int]:
    """Seconds for a default ``GcStatus`` and its answer's bytes."""
    t0 = time.perf_counter()
    st = c._rpc.unary(c._stub.GcStatus, cpb.GcStatusRequest())
    return time.perf_counter() - t0, st.ByteSize()


def write_p50(c: coordinator.Client, address: str, seconds: float) -> float:
    """p50 ms of one-row transactions for ``seconds``, while a poller calls GcStatus every 1 s."""
    stop = threading.Event()

    def poll() -> None:
        with coordinator.connect(address) as p:
            while not stop.is_set():
                gc_status(p)
                stop.wait(1.0)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    out = []
    end, i = time.perf_counter() + seconds, 0
    try:
        while time.perf_counter() < end:
            i += 1
            t0 = time.perf_counter()
            with c.transaction() as t:
                t.put("small", {"id": i, "v": i})
            out.append((time.perf_counter() - t0) * 1000)
    finally:
        stop.set()
        poller.join()
    return statistics.median(out)


def tick_seconds(data_dir: str) -> float:
    """One GC tick over the stopped server's leases, in this process."""
    store = LocalStore(os.path.join(data_dir, "lmdb"), sync=False)
    try:
        tso = TimestampOracle(store)
        store.use_clock(tso)
        registry = Registry(store)
        kw = {"max_leases": 10**7, "max_leases_per_holder": 10**7} if CAPPED else {}
        gc = GcManager(Core(store, tso, registry, Barriers(store, tso, registry)), 3600, 0, **kw)
        gc.tick()  # the first one sweeps what expired meanwhile (nothing, TTL 1 h)
        t0 = time.perf_counter()
        gc.tick()
        return time.perf_counter() - t0
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--leases", type=int, nargs="+", default=[10_000, 50_000])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    print(f"code: {'capped, paged' if CAPPED else 'before caps and paging'}")
    for n in args.leases:
        data = tempfile.mkdtemp(prefix="bench-leases-")
        extra = ["--no-sync", "--gc-interval", "1s"]
        if CAPPED:
            extra += ["--max-leases", str(n), "--max-leases-per-holder", str(n)]
        srv = EmbeddedServer(data, extra_args=extra).start()
        t0 = time.perf_counter()
        try:
            with coordinator.connect(srv.address) as c:
                c.create_table("small", "id BIGINT, v BIGINT", primary_key=["id"])
            take_leases(srv.address, n)
            took = time.perf_counter() - t0
            rows = []
            for run in range(args.runs):
                with coordinator.connect(srv.address) as c:
                    st_s, size = gc_status(c)
                    p50 = write_p50(c, srv.address, args.seconds)
                rows.append((st_s, size, p50))
                print(
                    f"  {n} leases run {run + 1}: GcStatus {st_s * 1000:.0f} ms, "
                    f"{size / 1e6:.2f} MB; write p50 {p50:.1f} ms"
                )
        finally:
            srv.stop()
        ticks = [tick_seconds(data) for _ in range(args.runs)]
        med = [statistics.median(x) for x in zip(*rows, strict=True)]
        print(
            f"{n} leases (taken in {took:.0f} s): GcStatus {med[0] * 1000:.0f} ms, "
            f"{med[1] / 1e6:.2f} MB; write p50 {med[2]:.1f} ms; GC tick "
            f"{statistics.median(ticks) * 1000:.2f} ms (medians of {args.runs})"
        )


if __name__ == "__main__":
    main()
