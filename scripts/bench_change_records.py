"""A change scan's per-key work on the server: ``get_change`` (one lock check, one raw cursor
pass) against the two ``get``s it replaced, side by side on the same store and keys.

    .venv/bin/python scripts/bench_change_records.py [--keys 50000] [--runs 5]

Loads ``--keys`` rows into a LocalStore (real LMDB in a temporary directory, no server), then
updates half of them once and a quarter of them twice more, and reads the net change of the
updated half over an interval holding both updates, once per method per run (alternating which
goes first). Prints each run's microseconds per key and the median ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kvstore.actions.get import get, get_change, get_versioned  # noqa: E402
from kvstore.mvcc import LockOp  # noqa: E402
from kvstore.store import LocalStore  # noqa: E402
from kvstore.testing import Kv  # noqa: E402


def two_gets(r, keys: list[bytes], from_ts: int, to_ts: int) -> int:
    n = 0
    for k in keys:
        new, _ = get_versioned(r, k, to_ts)
        n += get(r, k, from_ts) != new
    return n


def one_pass(r, keys: list[bytes], from_ts: int, to_ts: int) -> int:
    n = 0
    for k in keys:
        old, new, _ = get_change(r, k, from_ts, to_ts)
        n += old != new
    return n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        store = LocalStore(os.path.join(d, "lmdb"), sync=False)
        kv = Kv(store)

        def load(ids: list[int], v: str, ts: int) -> None:
            for i in range(0, len(ids), 5000):
                part = ids[i : i + 5000]
                muts = [(LockOp.PUT, kv.key(k), kv.row(k, v)) for k in part]
                store.prewrite(muts, kv.key(part[0]), ts, 3000)
                store.commit(ts, ts + 1, [kv.key(k) for k in part])

        load(list(range(args.keys)), "a", 10)
        changed = sorted(random.Random(1).sample(range(args.keys), args.keys // 2))
        load(changed, "b", 20)
        load(changed[: len(changed) // 2], "c", 30)
        keys = [kv.key(k) for k in changed]
        ratios = []
        for run in range(args.runs):
            got = {}
            order = (two_gets, one_pass) if run % 2 == 0 else (one_pass, two_gets)
            for fn in order:
                with store.storage.read_txn() as r:
                    t0 = time.perf_counter()
                    n = fn(r, keys, 15, 35)
                    got[fn.__name__] = (time.perf_counter() - t0) / len(keys) * 1e6
                assert n == len(keys)
            ratios.append(got["two_gets"] / got["one_pass"])
            print(
                f"run {run + 1}: two gets {got['two_gets']:.2f} us/key, "
                f"get_change {got['one_pass']:.2f} us/key ({ratios[-1]:.2f}x)",
                flush=True,
            )
        store.close()
    print(f"{len(keys):,} changed keys: median {statistics.median(ratios):.2f}x faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
