"""A GC pass's cost against the table's size: incremental passes follow the change, full ones the
store.

    PYTHONPATH=$PWD .venv/bin/python scripts/bench_gc_pass.py [--sizes 100000 400000]
                                                              [--changed 1000] [--runs 3]

For each size N in --sizes, on a fresh LMDB store (``LocalStore``, in process, no fsync): a
table of N rows (~100-byte rows, loaded in 1PC transactions of 10,000 rows), every row updated
once and a full pass run (so every key has one version and no history is left), then, per run,
--changed random rows updated once more and the safepoint moved past them, and one pass
collected to its end in steps of the server's size (``LocalStore.gc_step``): an incremental
pass (``GcCursor.incremental()``, what the server runs) on one copy of the change, then the
same change again and a full pass (``GcCursor()``, what the server runs after a start and once
an hour). Printed per size and kind: the pass's wall time and records examined (medians of
--runs), the versions it removed (must be --changed), and the ratio of the largest size to the
smallest for each kind, measured in the same run. Incremental should stay near 1x however large
the table; full grows with it.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kvstore.actions.gc import GcCursor  # noqa: E402
from kvstore.mvcc.records import LockOp  # noqa: E402
from kvstore.mvcc.timestamp import compose  # noqa: E402
from kvstore.store import LocalStore  # noqa: E402

TXN_ROWS = 10_000


class Clock:
    def __init__(self) -> None:
        self.t = compose(int(time.time() * 1000), 0)

    def __call__(self) -> int:
        self.t += 1
        return self.t


def write(store: LocalStore, clock: Clock, info, ids: list[int], tag: str) -> None:
    for s in range(0, len(ids), TXN_ROWS):
        part = ids[s : s + TXN_ROWS]
        muts = [
            (
                LockOp.PUT,
                info.key_codec.encode({"id": i}),
                info.row_codec.encode({"id": i, "payload": f"{tag}{i:080d}", "amount": i}),
            )
            for i in part
        ]
        store.prewrite(muts, muts[0][1], clock(), try_one_pc=True)


def one_pass(store: LocalStore, clock: Clock, cursor: GcCursor) -> tuple[float, int, int]:
    """Move the safepoint to now and collect one pass from ``cursor``: (seconds, records
    examined, versions removed)."""
    store.advance_safepoint(clock())
    t0 = time.perf_counter()
    examined = removed = 0
    while not cursor.done:
        step = store.gc_step(cursor)
        cursor, examined, removed = step.next, examined + step.examined, removed + step.versions
    return time.perf_counter() - t0, examined, removed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 400_000])
    ap.add_argument("--changed", type=int, default=1_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    out: dict[tuple[int, str], list[tuple[float, int, int]]] = {}
    for n in args.sizes:
        tmp = tempfile.mkdtemp(prefix="bench-gc-pass-")
        try:
            clock = Clock()
            store = LocalStore(os.path.join(tmp, "lmdb"), clock=clock, sync=False, map_size=4 << 30)
            info = store.create_table("t", "id BIGINT, payload STRING, amount BIGINT", ["id"])
            t0 = time.perf_counter()
            write(store, clock, info, list(range(n)), "a")
            write(store, clock, info, list(range(n)), "b")
            one_pass(store, clock, GcCursor())  # settled: one version a key, no index entries
            print(f"size {n:,}: loaded, updated and collected in {time.perf_counter() - t0:.1f} s")
            for run in range(args.runs):
                for kind, cursor in (("incremental", GcCursor.incremental()), ("full", GcCursor())):
                    ids = rnd.sample(range(n), args.changed)
                    write(store, clock, info, ids, f"r{run}{kind[0]}")
                    got = one_pass(store, clock, cursor)
                    if got[2] != args.changed:
                        print(f"  {kind}: removed {got[2]} versions, expected {args.changed}")
                        return 1
                    out.setdefault((n, kind), []).append(got)
            store.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{args.changed:,} rows changed before each pass; medians of {args.runs} runs")
    print(f"  {'rows':>10}  {'pass':<12} {'seconds':>9} {'examined':>10} {'removed':>8}")
    med: dict[tuple[int, str], float] = {}
    for (n, kind), got in sorted(out.items()):
        med[(n, kind)] = statistics.median(g[0] for g in got)
        examined = statistics.median(g[1] for g in got)
        print(f"  {n:>10,}  {kind:<12} {med[(n, kind)]:>9.4f} {examined:>10,.0f} {got[0][2]:>8,}")
    lo, hi = min(args.sizes), max(args.sizes)
    for kind in ("incremental", "full"):
        print(
            f"  {kind}: {hi:,} rows / {lo:,} rows = "
            f"{med[(hi, kind)] / med[(lo, kind)]:.2f}x the time ({hi / lo:.0f}x the rows)"
        )
    inc, full = med[(hi, "incremental")], med[(hi, "full")]
    print(f"  at {hi:,} rows a full pass takes {full / inc:.0f}x an incremental one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
