"""The server's per-key work in an incremental epoch's reads, new against old, side by side
on the same store and keys:

- a change scan (``ScanChanges``, ``ChangeBoundary``): ``get_change`` (one lock check, one raw
  walk down the versions) against the two ``get``s it replaced;
- keyed reads (``ScanRanges`` of single keys: group states, lookups by primary key), each range
  ending at ``past_versions(key)`` as the epoch sends them: ``scan_ranges`` reads a run of them
  as one batch (``_points``: one ``getmulti`` of the locks, one seek per key, one CRC pass),
  against the short ``scan`` per key the epoch's reads took before (a lock-CF cursor, then a run
  of 16 write records past the key), and against one point read (``_point``) per key;
- short ranges that are not point ranges (an index's prefixes), read as one batch
  (``_shorts``: one seek a range into each column family) against one ``scan`` a range.

    .venv/bin/python scripts/bench_key_reads.py [--keys 50000] [--runs 5]

Loads ``--keys`` rows into a LocalStore (real LMDB in a temporary directory, no server), then
updates half of them once and a quarter of them twice more. Per run (alternating which method
goes first): the net change of the updated half over an interval holding both updates, and a
point read of every updated key at the newest version. Prints each run's microseconds per key
and the median ratios.
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
from kvstore.actions.scan import (  # noqa: E402
    _RANGE_FIRST_RUN,
    _point,
    past_versions,
    scan,
    scan_ranges,
)
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


def range_scans(r, ranges: list[tuple[bytes, bytes]], ts: int) -> int:
    return sum(len(scan(r, a, b, ts, first_run=_RANGE_FIRST_RUN)[0]) for a, b in ranges)


def short_batches(r, ranges: list[tuple[bytes, bytes]], ts: int) -> int:
    return len(scan_ranges(r, ranges, ts, 1 << 30, 1 << 40)[0])


def short_scans(r, keys: list[bytes], ts: int) -> int:
    return sum(len(scan(r, k, k + b"\0", ts, 1, first_run=_RANGE_FIRST_RUN)[0]) for k in keys)


def single_points(r, keys: list[bytes], ts: int) -> int:
    return sum(len(_point(r, k, ts)[0]) for k in keys)


def point_batches(r, keys: list[bytes], ts: int) -> int:
    ranges = [(k, past_versions(k)) for k in keys]
    return len(scan_ranges(r, ranges, ts, len(keys), 1 << 40)[0])


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
        # ranges that each hold one key but are not point ranges (as an index's prefixes are)
        ranges = [(kv.key(k), kv.key(k + 1)) for k in changed]
        pairs = {
            "change": (two_gets, one_pass),
            "point": (short_scans, point_batches),
            "batch": (single_points, point_batches),
            "short": (range_scans, short_batches),
        }
        ratios: dict[str, list[float]] = {what: [] for what in pairs}
        for run in range(args.runs):
            line = []
            for what, (old_fn, new_fn) in pairs.items():
                got = {}
                order = (old_fn, new_fn) if run % 2 == 0 else (new_fn, old_fn)
                for fn in order:
                    with store.storage.read_txn() as r:
                        t0 = time.perf_counter()
                        if what == "change":
                            n = fn(r, keys, 15, 35)
                        else:
                            n = fn(r, ranges if what == "short" else keys, 35)
                        got[fn] = (time.perf_counter() - t0) / len(keys) * 1e6
                    assert n == len(keys), (fn.__name__, n)
                ratios[what].append(got[old_fn] / got[new_fn])
                line.append(
                    f"{old_fn.__name__} {got[old_fn]:.2f} us/key, {new_fn.__name__} "
                    f"{got[new_fn]:.2f} us/key ({ratios[what][-1]:.2f}x)"
                )
            print(f"run {run + 1}: " + "; ".join(line), flush=True)
        store.close()
    print(
        f"{len(keys):,} keys: change records median {statistics.median(ratios['change']):.2f}x "
        f"faster; batched point reads median {statistics.median(ratios['point']):.2f}x faster "
        f"than short scans, {statistics.median(ratios['batch']):.2f}x than one point read a key; "
        f"batched short ranges {statistics.median(ratios['short']):.2f}x faster than a scan each"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
