"""Revisions: does rolling a table back cost the change since the target, or the table's size?

    PYTHONPATH=$PWD .venv/bin/python scripts/bench_revise.py [--runs 5] [--sizes 10000,100000]
        [--changed 1000] [--changes 100,10000] [--writer-changed 10000] [--rate 50] [--idle 2]
        [--locality random|clustered] [--skip-writers] [--no-verify]

The recorded figures (docs/performance.md, "Revisions") come from
``scripts/bench_revise.py --runs 5`` (twice), and, to find where the size still shows,
``--runs 5 --skip-writers --locality clustered`` and
``--runs 5 --skip-writers --no-verify --sizes 10000,100000,1000000``.

One ``snapview serve`` on 127.0.0.1 (``EmbeddedServer``, fresh data dir, defaults: retention
10m), one table per size (``id BIGINT, v BIGINT, pad STRING``, ~100-byte rows) loaded in
transactions of 5,000 rows. ``client.revise(table, to_ts=T)`` is timed as the wall time of the
call (fence, drain, the change-index read over (T, now] and the one-write rollback, its fsync,
the RPC; "in the server" is the record's ended - started wall ms: from the fence's write to the
end of the rollback's action, before its fsync). Per run, for every revision: T = ``client.tso()``; then K rows change in transactions
of up to 2,000 rows (80% updates, 10% deletes, 10% inserts of new ids; every row once, so the
net change is exactly K rows); then the timed ``revise``; then (untimed) the check that the
table read at the revision's commit_ts equals the table read at T, and that ``rev.rows == K``.

1. Size: the same K (--changed) on every size in --sizes, side by side in each run (the order
   alternates between runs). Printed: the median time per size and the ratio largest/smallest
   (the median of per-run ratios): ~1.0 if the cost follows the change.
2. Change: at the largest size, K in --changes (default 100 and 10,000), side by side in each
   run. Printed: medians, per-row time, and the ratio K_max/K_min of times next to the ratio of
   the Ks.
3. Writers: at the largest size, two writer processes commit one-row transactions (1PC, blind
   writes, open loop at --rate commits/s each): one into the revised table (ids of their own,
   which the revision rolls back too) and one into another table. Each of --runs rounds is
   --idle seconds of nothing else (the baseline), then K=--writer-changed rows (default 10,000,
   so that a revision lasts long enough to meet several commits) changed (not counted), then a
   revision. A commit counts as "during" when its wall interval overlaps the revision's
   call; as "baseline" when it lies within an idle window. Printed: p50/p99/max of each writer
   and the ratio during/baseline. While the table is fenced a writer's prewrite is refused with
   TableFenced (UNAVAILABLE), and the client retries it with backoff (50 ms, doubling).
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
from snapview.embedded import EmbeddedServer  # noqa: E402

SCHEMA = "id BIGINT, v BIGINT, pad STRING"
PAD = 80  # ~100 bytes a row with the two BIGINTs and the encoding
LOAD_TXN = 5_000
CHANGE_TXN = 2_000
INSERT_BASE = 1 << 40  # ids of inserted rows
WRITER_BASE = -(1 << 40)  # ids the writer of the revised table writes (never touched otherwise)
WRITER_KEYS = 1_000
OTHER = "rev_other"
med = statistics.median
ms = 1000.0


def _row(rng: random.Random, i: int) -> dict:
    return {"id": i, "v": rng.getrandbits(62), "pad": f"{rng.getrandbits(64):0{PAD}d}"}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class Table:
    """A loaded table, and the ids it holds at the last target (restored by each revision)."""

    def __init__(self, c, name: str, size: int, seed: int, clustered: bool = False) -> None:
        self.c, self.name, self.size, self.clustered = c, name, size, clustered
        self.rng = random.Random(seed)
        self.next_insert = INSERT_BASE
        c.create_table(name, SCHEMA, ["id"])
        for s in range(0, size, LOAD_TXN):
            with c.transaction(lock_ttl_ms=60_000) as t:
                for i in range(s, min(size, s + LOAD_TXN)):
                    t.put(name, _row(self.rng, i))
        self.ids = list(range(size))  # the ids present at the target (and now)

    def change(self, k: int) -> None:
        """Change exactly k rows (each once): updates, deletes, inserts."""
        n_del = n_ins = k // 10
        if self.clustered:  # a run of consecutive ids, at a random place
            at = self.rng.randrange(len(self.ids) - (k - n_ins) + 1)
            picked = self.ids[at : at + k - n_ins]
            self.rng.shuffle(picked)
        else:
            picked = self.rng.sample(self.ids, k - n_ins)
        ops = [("put", i) for i in picked[n_del:]] + [("del", i) for i in picked[:n_del]]
        ops += [("put", self.next_insert + j) for j in range(n_ins)]
        self.next_insert += n_ins
        for s in range(0, len(ops), CHANGE_TXN):
            with self.c.transaction(lock_ttl_ms=60_000) as t:
                for op, i in ops[s : s + CHANGE_TXN]:
                    if op == "put":
                        t.put(self.name, _row(self.rng, i))
                    else:
                        t.delete(self.name, {"id": i})

    def revise_once(self, k: int, verify: bool) -> tuple[float, object]:
        """T, k changes, the timed revise back to T; then (untimed) the checks."""
        target = self.c.tso()
        self.change(k)
        t0 = time.perf_counter()
        rev = self.c.revise(self.name, to_ts=target, who="bench_revise")
        dt = time.perf_counter() - t0
        if rev.state != "done":
            raise SystemExit(f"revision of {self.name} ended {rev.state}: {rev.error}")
        if verify:
            if rev.rows != k:
                raise SystemExit(f"{self.name}: revision changed {rev.rows} rows, expected {k}")
            after = self.c.read(self.name, at=rev.commit_ts)
            at_t = self.c.read(self.name, at=target)
            if not after.equals(at_t):
                raise SystemExit(f"{self.name}: the table at the revision != the table at T")
        return dt, rev


# ---------------------------------------------------------------------- writers


def _writer(address, table, base, rate, start_at, seconds, seed, out_q) -> None:
    """Commit 1-row blind writes into ``table`` at ``rate``/s from ``start_at`` for ``seconds``;
    sends back (conflicts, [(wall_start, wall_end, latency_s)])."""
    c = coordinator.connect(address)
    rng = random.Random(seed)
    lat: list[tuple[float, float, float]] = []
    conflicts = 0
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
            w0 = time.time()
            t0 = time.perf_counter()
            try:
                with c.transaction() as t:
                    t.put(table, _row(rng, base + rng.randrange(WRITER_KEYS)))
            except coordinator.WriteConflict:
                conflicts += 1
                continue
            dt = time.perf_counter() - t0
            lat.append((w0, time.time(), dt))
    finally:
        c.close()
    out_q.put((table, conflicts, lat))


def writers(args, c, address: str, big: Table) -> None:
    k = args.writer_changed
    # Time the rounds take, estimated generously from a first revision (not counted).
    t0 = time.perf_counter()
    big.revise_once(k, verify=False)
    round_s = args.idle + (time.perf_counter() - t0) * 1.5 + 0.5
    seconds = 2.0 + args.runs * round_s + 2.0
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start_at = time.time() + 3.0  # the writer processes start up first
    procs = [
        ctx.Process(
            target=_writer,
            args=(address, tbl, base, args.rate, start_at, seconds, 7 + n, q),
            daemon=True,
        )
        for n, (tbl, base) in enumerate(((big.name, WRITER_BASE), (OTHER, 0)))
    ]
    for p in procs:
        p.start()
    print(
        f"\nwriters: 1-row 1PC commits at {args.rate:g}/s each into {big.name} (revised) and "
        f"{OTHER}; {args.runs} rounds of {args.idle:g}s idle (baseline), {k:,} rows changed, "
        f"one revision",
        flush=True,
    )
    idle: list[tuple[float, float]] = []
    revs: list[tuple[float, float]] = []
    try:
        d = start_at + 2.0 - time.time()
        if d > 0:
            time.sleep(d)
        for _ in range(args.runs):
            i0 = time.time()
            time.sleep(args.idle)
            idle.append((i0, time.time()))
            target = c.tso()
            big.change(k)
            r0 = time.time()
            rev = c.revise(big.name, to_ts=target, who="bench_revise")
            revs.append((r0, time.time()))
            if rev.state != "done":
                raise SystemExit(f"revision ended {rev.state}: {rev.error}")
            # the revision rolled the writer's rows back too: more than k rows
            print(
                f"  revision {rev.id}: {(revs[-1][1] - r0) * ms:.0f}ms, {rev.rows:,} rows "
                f"({rev.rows - k} of them the writer's)",
                flush=True,
            )
        res = {}
        for _ in procs:
            tbl, conflicts, lat = q.get(timeout=seconds + 60)
            res[tbl] = (conflicts, lat)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
    if revs[-1][1] > start_at + seconds:
        print("  WARNING: the writers stopped before the last revision ended")
    print("  writer into        window     commits     p50       p99       max")
    for tbl in (big.name, OTHER):
        conflicts, lat = res[tbl]
        base = [x for w0, w1, x in lat if any(a <= w0 and w1 <= b for a, b in idle)]
        during = [x for w0, w1, x in lat if any(w0 < b and a < w1 for a, b in revs)]
        rows = {}
        for label, xs in (("baseline", base), ("during", during)):
            if not xs:
                print(f"  {tbl:<16}  {label:<9}  none")
                continue
            rows[label] = (pct(xs, 50), pct(xs, 99), max(xs))
            p50, p99, mx = rows[label]
            print(
                f"  {tbl:<16}  {label:<9} {len(xs):7,}   {p50 * ms:7.2f}ms {p99 * ms:7.2f}ms "
                f"{mx * ms:7.2f}ms"
            )
        if len(rows) == 2:
            b, d = rows["baseline"], rows["during"]
            print(
                f"  {tbl:<16}  during/baseline   p50 {d[0] / b[0]:.2f}x  p99 {d[1] / b[1]:.2f}x"
                f"  ({conflicts} conflicts)"
            )
    rev_ms = [(b - a) * ms for a, b in revs]
    print(f"  revisions in this part: median {med(rev_ms):.0f}ms, max {max(rev_ms):.0f}ms")


# ---------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs (medians)")
    ap.add_argument("--sizes", default="10000,100000", help="table sizes compared (rows)")
    ap.add_argument("--changed", type=int, default=1000, help="K rows changed for the sizes")
    ap.add_argument("--changes", default="100,10000", help="the Ks compared at the largest size")
    ap.add_argument(
        "--writer-changed", type=int, default=10_000, help="writers: K rows changed per round"
    )
    ap.add_argument("--rate", type=float, default=50.0, help="writers: commits/s per writer")
    ap.add_argument("--idle", type=float, default=2.0, help="writers: baseline s per round")
    ap.add_argument(
        "--locality",
        choices=("random", "clustered"),
        default="random",
        help="which rows change: random ids (default), or a run of consecutive ids (few B-tree "
        "pages, whatever the table's size)",
    )
    ap.add_argument("--skip-writers", action="store_true")
    ap.add_argument("--no-verify", action="store_true", help="skip the (untimed) checks")
    ap.add_argument("--keep", action="store_true", help="keep the data dir")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ks = [int(s) for s in args.changes.split(",")]
    verify = not args.no_verify
    print("command: " + " ".join(["scripts/bench_revise.py", *sys.argv[1:]]), flush=True)
    tmp = tempfile.mkdtemp(prefix="bench-revise-")
    srv = EmbeddedServer(tmp)
    c = None
    try:
        srv.start()
        c = coordinator.connect(srv.address)
        c.create_table(OTHER, SCHEMA, ["id"])
        tables = {}
        for n, size in enumerate(sizes):
            t0 = time.perf_counter()
            tables[size] = Table(
                c, f"rev_{size}", size, seed=n + 1, clustered=args.locality == "clustered"
            )
            dt = time.perf_counter() - t0
            print(f"loaded {size:,} rows in {dt:.1f}s ({size / dt:,.0f} rows/s)", flush=True)
        big = tables[max(sizes)]

        # 1. size, at the same K
        print(
            f"\n1. size: K = {args.changed:,} rows changed ({args.locality} ids), revise to the "
            "ts before them"
        )
        by_size: dict[int, list[float]] = {s: [] for s in sizes}
        srv_size: dict[int, list[float]] = {s: [] for s in sizes}
        for run in range(args.runs):
            order = sizes if run % 2 == 0 else list(reversed(sizes))
            line = []
            for s in order:
                dt, rev = tables[s].revise_once(args.changed, verify)
                by_size[s].append(dt)
                srv_size[s].append((rev.ended_wall_ms - rev.started_wall_ms) / ms)
                line.append(f"{s:,} rows {dt * ms:.0f}ms ({rev.rows:,} rows revised)")
            print(f"  run {run + 1}: " + ", ".join(line), flush=True)

        # 2. change, at the largest size
        print(f"\n2. change: {max(sizes):,}-row table, K in {', '.join(f'{k:,}' for k in ks)}")
        by_k: dict[int, list[float]] = {k: [] for k in ks}
        for run in range(args.runs):
            order = ks if run % 2 == 0 else list(reversed(ks))
            line = []
            for k in order:
                dt, rev = big.revise_once(k, verify)
                by_k[k].append(dt)
                line.append(f"K {k:,} {dt * ms:.0f}ms")
            print(f"  run {run + 1}: " + ", ".join(line), flush=True)

        print(f"\nmedians of {args.runs} runs")
        print(f"  size (K = {args.changed:,})   revise    (in the server)")
        for s in sizes:
            print(
                f"  {s:>12,} rows   {med(by_size[s]) * ms:7.1f}ms  ({med(srv_size[s]) * ms:5.0f}ms)"
            )
        lo, hi = min(sizes), max(sizes)
        r = med(b / a for a, b in zip(by_size[lo], by_size[hi], strict=True))
        rs = med(b / a for a, b in zip(srv_size[lo], srv_size[hi], strict=True))
        print(
            f"  ratio {hi:,}/{lo:,} rows: {r:.2f}x, in the server {rs:.2f}x (table {hi / lo:g}x "
            "larger; ~1.0 if the cost follows the change)"
        )
        print(f"  K at {hi:,} rows     revise     per changed row")
        for k in ks:
            print(f"  {k:>12,}     {med(by_k[k]) * ms:7.1f}ms  {med(by_k[k]) / k * 1e6:7.1f}us")
        klo, khi = min(ks), max(ks)
        rk = med(b / a for a, b in zip(by_k[klo], by_k[khi], strict=True))
        print(f"  ratio K {khi:,}/{klo:,}: {rk:.2f}x (K {khi / klo:g}x larger)", flush=True)

        # 3. writers
        if not args.skip_writers:
            writers(args, c, srv.address, big)
    finally:
        if c is not None:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing after a failure
                pass
        srv.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
