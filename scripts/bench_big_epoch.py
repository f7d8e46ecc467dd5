"""What a large epoch costs everyone else: snapshot latency while one epoch writes N rows.

    .venv/bin/python scripts/bench_big_epoch.py [--sizes 200000,1000000] [--runs 3]

For each size, a fresh ``snapview serve`` on 127.0.0.1 and a table of ~60-byte rows. One epoch
(``jobs.open_transaction``, bulk prewrites of 16,000 rows over gRPC, ``commit_transaction``)
writes N rows, as a load does, while another client asks for a snapshot of a second table every
50 ms. It prints that snapshot's latency before the epoch (idle), while the epoch's locks are
held and while its secondaries resolve, side by side, and how long after the commit the first
barrier covering it came. Both the locks' scan in ``resolved_ts`` and one write resolving every
secondary once made these grow with N (a Snapshot waited 77 s behind a 1.8M-row load); a size
ten times larger should now leave them where they were. Medians over ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import coordinator  # noqa: E402
from kvstore.mvcc import LockOp  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402

CHUNK = 16_000


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def one_run(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench_big_epoch_") as d:
        srv = EmbeddedServer(d, extra_args=["--barrier-interval", "1s"]).start()
        try:
            with coordinator.connect(srv.address) as c, coordinator.connect(srv.address) as p:
                c.create_table("big", "id BIGINT, payload STRING", primary_key=["id"])
                c.create_table("small", "id BIGINT", primary_key=["id"])
                info = c.describe_table("big")
                phase = ["idle"]
                lat: dict[str, list[float]] = {"idle": [], "locked": [], "resolving": []}
                stop = threading.Event()

                def poll() -> None:
                    while not stop.is_set():
                        at = phase[0]
                        t0 = time.perf_counter()
                        p.snapshot(["small"])
                        lat[at].append(time.perf_counter() - t0)
                        stop.wait(0.05)

                th = threading.Thread(target=poll, daemon=True)
                th.start()
                time.sleep(3)  # idle samples
                e = c.jobs.open_transaction("loader", 1)
                phase[0] = "locked"
                pad = "x" * 40
                for i in range(0, n, CHUNK):
                    muts = [
                        (
                            LockOp.PUT,
                            info.key_codec.encode({"id": k}),
                            info.row_codec.encode({"id": k, "payload": pad}),
                        )
                        for k in range(i, min(i + CHUNK, n))
                    ]
                    c.store.prewrite(muts, e.primary_key, e.start_ts)
                t_commit = time.perf_counter()
                done = c.jobs.commit_transaction("loader", 1, e.start_ts)
                phase[0] = "resolving"
                deadline = time.monotonic() + 600
                while c.snapshot(["big"], wait_s=600).read_ts("big") < done.commit_ts:
                    if time.monotonic() > deadline:
                        raise TimeoutError("no barrier covered the epoch within 600 s")
                    time.sleep(0.05)
                covered = time.perf_counter() - t_commit
                time.sleep(2)
                stop.set()
                th.join()
        finally:
            srv.stop()
    out = {"barrier_after_commit_s": covered}
    for k, xs in lat.items():
        out[f"{k}_p50_ms"] = 1000 * _pct(xs, 0.5)
        out[f"{k}_max_ms"] = 1000 * max(xs, default=float("nan"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200000,1000000", help="rows in the epoch, per size")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    med: dict[int, dict[str, float]] = {}
    for n in sizes:
        runs = [one_run(n) for _ in range(args.runs)]
        med[n] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        m = med[n]
        print(
            f"{n:>9,} rows: snapshot p50/max ms idle {m['idle_p50_ms']:.1f}/{m['idle_max_ms']:.1f}, "
            f"locks held {m['locked_p50_ms']:.1f}/{m['locked_max_ms']:.1f}, "
            f"resolving {m['resolving_p50_ms']:.1f}/{m['resolving_max_ms']:.1f}; "
            f"first barrier over it {m['barrier_after_commit_s']:.2f} s after the commit "
            f"(medians of {args.runs})",
            flush=True,
        )
    if len(sizes) > 1:
        a, b = med[sizes[0]], med[sizes[-1]]
        print(
            f"{sizes[-1] // sizes[0]}x the rows: snapshot max while locks held "
            f"{b['locked_max_ms'] / a['locked_max_ms']:.2f}x, while resolving "
            f"{b['resolving_max_ms'] / max(a['resolving_max_ms'], 1e-9):.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
