"""Server memory under concurrent change scans and dry-run rollbacks of a large change.

    PYTHONPATH=$PWD .venv/bin/python scripts/bench_scan_memory.py [--rows 200000]
        [--clients 8] [--read-delay 0.05] [--max-heavy-calls N]

The recorded figures (docs/performance.md, "Change scans: server memory"; docs/design.md §8)
come from ``scripts/bench_scan_memory.py`` with the defaults, run once on the code before the
change and once after.

One ``snapview serve`` on 127.0.0.1 (``EmbeddedServer``, fresh data dir, ``--no-sync``), one
table ``id BIGINT, v BIGINT, pad STRING`` (~100-byte rows) of --rows rows loaded in
transactions of 5,000 rows; T = ``client.tso()``; then every row is updated (so the change
(T, now] holds --rows changed rows, each with an old and a new image). The server's RSS
(``VmRSS`` of /proc/PID/status, sampled every 20 ms) is printed before, at the peak of and 2 s
after each phase:

1. --clients concurrent ``ScanChanges(T, now)`` calls, each reading its stream slowly (one
   chunk, then --read-delay seconds, ...), through the raw stub. A call refused as busy
   (RESOURCE_EXHAUSTED, naming the heavy-call limit) is retried after 100 ms, as
   ``RemoteStore`` retries it; the retries are counted.
2. --clients concurrent ``client.revise(table, to_ts=T, dry_run=True)`` calls.

Each phase checks its answers (every scan saw --rows changes; every dry run counts --rows
restored rows). ``VmHWM`` (the process's peak since it started, the load included) is printed
at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc  # noqa: E402

import coordinator  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview_proto.snapview.v1 import kvstore_pb2 as pb  # noqa: E402
from snapview_proto.snapview.v1 import kvstore_pb2_grpc as pb_grpc  # noqa: E402

SCHEMA = "id BIGINT, v BIGINT, pad STRING"
TXN = 5_000
MB = 1 << 20


def status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


class Sampler:
    """The server's VmRSS every 20 ms; ``peak`` since the last ``reset``."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.peak = max(self.peak, status_kb(self.pid, "VmRSS"))
            except (OSError, RuntimeError):  # the server stopped
                return

    def reset(self) -> int:
        now = status_kb(self.pid, "VmRSS")
        self.peak = now
        return now

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def load(c, table: str, rows: int) -> int:
    c.create_table(table, SCHEMA, ["id"])
    for s in range(0, rows, TXN):
        with c.transaction(lock_ttl_ms=60_000) as t:
            for i in range(s, min(rows, s + TXN)):
                t.put(table, {"id": i, "v": i, "pad": f"{i:080d}"})
    target = c.tso()
    for s in range(0, rows, TXN):
        with c.transaction(lock_ttl_ms=60_000) as t:
            for i in range(s, min(rows, s + TXN)):
                t.put(table, {"id": i, "v": -i - 1, "pad": f"{-i - 1:080d}"})
    return target


def slow_scan(address: str, table: str, lo: int, hi: int, delay: float, out: list) -> None:
    with grpc.insecure_channel(address) as ch:
        stub = pb_grpc.KvStoreStub(ch)
        retries = 0
        while True:
            n = 0
            try:
                for chunk in stub.ScanChanges(
                    pb.ScanChangesRequest(table=table, from_ts=lo, to_ts=hi), timeout=600
                ):
                    n += len(chunk.changes)
                    time.sleep(delay)
            except grpc.RpcError as e:
                if e.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and n == 0:
                    retries += 1
                    time.sleep(0.1)
                    continue
                raise
            out.append((n, retries))
            return


def phase(name: str, sampler: Sampler, threads: list[threading.Thread]) -> None:
    before = sampler.reset()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    peak = sampler.peak
    time.sleep(2.0)
    after = status_kb(sampler.pid, "VmRSS")
    print(
        f"{name:<32} before {before / 1024:7.0f} MB  peak {peak / 1024:7.0f} MB  "
        f"after {after / 1024:7.0f} MB  (+{(peak - before) / 1024:.0f} MB at the peak, "
        f"{dt:.1f} s)",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--read-delay", type=float, default=0.05)
    ap.add_argument("--max-heavy-calls", type=int, default=None)
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="bench-scan-mem-")
    extra = ["--no-sync", "--map-size-mb", "1024"]
    if args.max_heavy_calls is not None:
        extra += ["--max-heavy-calls", str(args.max_heavy_calls)]
    srv = EmbeddedServer(os.path.join(data, "d"), extra_args=extra).start()
    try:
        assert srv.proc is not None
        pid = srv.proc.pid
        with coordinator.connect(srv.address) as c:
            t0 = time.perf_counter()
            target = load(c, "big", args.rows)
            now = c.tso()
            print(
                f"{args.rows:,} rows loaded and updated in {time.perf_counter() - t0:.0f} s; "
                f"{args.clients} clients",
                flush=True,
            )
            time.sleep(2.0)
            sampler = Sampler(pid)
            scans: list = []
            phase(
                f"{args.clients} x ScanChanges (slow)",
                sampler,
                [
                    threading.Thread(
                        target=slow_scan,
                        args=(srv.address, "big", target, now, args.read_delay, scans),
                    )
                    for _ in range(args.clients)
                ],
            )
            if [n for n, _ in scans] != [args.rows] * args.clients:
                raise SystemExit(f"a scan saw the wrong number of changes: {scans}")
            print(f"  busy refusals retried: {sum(r for _, r in scans)}")
            revs: list = []

            def dry() -> None:
                revs.append(c.revise("big", to_ts=target, dry_run=True, who="bench"))

            phase(
                f"{args.clients} x Revise (dry run)",
                sampler,
                [threading.Thread(target=dry) for _ in range(args.clients)],
            )
            if [r.restored for r in revs] != [args.rows] * args.clients:
                raise SystemExit(f"a dry run counted wrong: {[r.restored for r in revs]}")
            sampler.stop()
            print(f"VmHWM (since start, load included): {status_kb(pid, 'VmHWM') / 1024:.0f} MB")
    finally:
        srv.stop()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
