"""Store benchmarks: bulk transactional write and snapshot read, each against its raw ceiling.

    .venv/bin/python scripts/bench_store.py [--rows 1000000] [--runs 3]

Prints the median of --runs runs for every figure, and the ratios measured side by side.
Rows are ~100 bytes (BIGINT id, STRING of 80 chars, BIGINT); keys and values are encoded before
the clock starts for every variant, so the figures compare storage work only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lmdb  # noqa: E402

from kvstore.mvcc.keys import versioned_key  # noqa: E402
from kvstore.mvcc.records import Lock, LockOp, Write, WriteKind  # noqa: E402
from kvstore.mvcc.timestamp import compose  # noqa: E402
from kvstore.store import LocalStore  # noqa: E402

TXN_ROWS = 10_000
SCHEMA = "id BIGINT, payload STRING, amount BIGINT"


class Clock:
    def __init__(self):
        self.t = compose(int(time.time() * 1000), 0)

    def __call__(self):
        self.t += 1
        return self.t


def make_rows(info, n: int):
    keys, values = [], []
    for i in range(n):
        keys.append(info.key_codec.encode({"id": i}))
        values.append(info.row_codec.encode({"id": i, "payload": f"{i:080d}", "amount": i}))
    return keys, values


def bench_raw_write(path: str, keys, values) -> float:
    """The ceiling: 4 records per row (lock put, data put, write put, lock delete) in py-lmdb."""
    env = lmdb.open(path, map_size=8 << 30, max_dbs=8, sync=True, metasync=True)
    lock_db, data_db, write_db = (env.open_db(n) for n in (b"lock", b"data", b"write"))
    t0 = time.perf_counter()
    ts = 1
    for s in range(0, len(keys), TXN_ROWS):
        with env.begin(write=True) as txn:
            for k, v in zip(keys[s : s + TXN_ROWS], values[s : s + TXN_ROWS], strict=True):
                txn.put(k, Lock(LockOp.PUT, keys[s], ts, 3000).to_bytes(), db=lock_db)
                txn.put(versioned_key(k, ts), v, db=data_db)
                txn.put(versioned_key(k, ts + 1), Write(WriteKind.PUT, ts).to_bytes(), db=write_db)
                txn.delete(k, db=lock_db)
        ts += 2
    dt = time.perf_counter() - t0
    env.close()
    return dt


def bench_store_write(path: str, keys, values, one_pc: bool) -> tuple[float, LocalStore]:
    clock = Clock()
    store = LocalStore(path, clock=clock, sync=True, map_size=1 << 30)
    info = store.create_table("bench", SCHEMA, ["id"])
    assert info.id == 16
    t0 = time.perf_counter()
    for s in range(0, len(keys), TXN_ROWS):
        ks = keys[s : s + TXN_ROWS]
        muts = [(LockOp.PUT, k, v) for k, v in zip(ks, values[s : s + TXN_ROWS], strict=True)]
        start = clock()
        if one_pc:
            store.prewrite(muts, ks[0], start, try_one_pc=True)
        else:
            store.prewrite(muts, ks[0], start)
            store.commit(start, clock(), ks)
    return time.perf_counter() - t0, store


def bench_raw_scan(store: LocalStore) -> float:
    """The ceiling for reads: one LMDB cursor over the table's write CF, values copied out."""
    t0 = time.perf_counter()
    with store.storage.env.begin() as txn:
        cur = txn.cursor(db=store.storage.cf["write"])
        n = sum(1 for _ in cur.iternext())
    assert n > 0
    return time.perf_counter() - t0


def bench_snapshot_read(store: LocalStore, rows: int) -> float:
    info = store.describe_table("bench")
    ts = store.clock()
    # Warm up: the first decode pays pyarrow's lazy imports; we measure steady state.
    info.row_codec.decode_arrow(next(iter(store.scan_table("bench", ts)))[1][:100])
    t0 = time.perf_counter()
    batches = [info.row_codec.decode_arrow(values) for _, values in store.scan_table("bench", ts)]
    import pyarrow as pa

    table = pa.Table.from_batches(batches)
    dt = time.perf_counter() - t0
    assert table.num_rows == rows, table.num_rows
    return dt


def bench_grpc(tmp: str, keys, values, rows: int) -> tuple[float, float]:
    """The deployment path: a snapview serve process, writes and a read over gRPC."""
    import coordinator
    from snapview.embedded import EmbeddedServer

    with EmbeddedServer(os.path.join(tmp, "serve")) as srv:
        c = coordinator.connect(srv.address)
        c.create_table("bench", SCHEMA, ["id"])
        t0 = time.perf_counter()
        for s in range(0, len(keys), TXN_ROWS):
            ks = keys[s : s + TXN_ROWS]
            muts = [(LockOp.PUT, k, v) for k, v in zip(ks, values[s : s + TXN_ROWS], strict=True)]
            start = c.tso()
            c.store.prewrite(muts, ks[0], start)
            c.store.commit(start, c.tso(), ks)
        write_s = time.perf_counter() - t0
        c.read("bench", at=c.tso())  # warm-up
        t0 = time.perf_counter()
        table = c.read("bench")
        read_s = time.perf_counter() - t0
        assert table.num_rows == rows
        c.close()
    return write_s, read_s


def bench_deltalake_read(tmp: str, store: LocalStore, rows: int) -> float | None:
    try:
        import deltalake
    except ImportError:
        return None
    info = store.describe_table("bench")
    import pyarrow as pa

    table = pa.Table.from_batches(
        [info.row_codec.decode_arrow(v) for _, v in store.scan_table("bench", store.clock())]
    )
    path = os.path.join(tmp, "delta")
    deltalake.write_deltalake(path, table)  # version 0: the rows we read
    deltalake.write_deltalake(path, table.slice(0, 1000), mode="append")  # version 1
    t0 = time.perf_counter()
    got = deltalake.DeltaTable(path, version=0).to_pyarrow_table()
    dt = time.perf_counter() - t0
    assert got.num_rows == rows
    return dt


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    n = args.rows
    results: dict[str, list[float]] = {}

    def rec(name, v):
        if v is not None:
            results.setdefault(name, []).append(v)

    for run in range(args.runs):
        tmp = tempfile.mkdtemp(prefix="bench-store-")
        try:
            probe = LocalStore(os.path.join(tmp, "probe"), clock=Clock(), sync=False)
            keys, values = make_rows(probe.create_table("bench", SCHEMA, ["id"]), n)
            probe.close()
            rec("raw_write_s", bench_raw_write(os.path.join(tmp, "raw"), keys, values))
            dt, s1 = bench_store_write(os.path.join(tmp, "pc1"), keys, values, one_pc=True)
            s1.close()
            rec("store_1pc_write_s", dt)
            dt, s2 = bench_store_write(os.path.join(tmp, "pc2"), keys, values, one_pc=False)
            rec("store_2pc_write_s", dt)
            rec("raw_scan_s", bench_raw_scan(s2))
            rec("snapshot_read_s", bench_snapshot_read(s2, n))
            rec("deltalake_read_s", bench_deltalake_read(tmp, s2, n))
            s2.close()
            gw, gr = bench_grpc(tmp, keys, values, n)
            rec("grpc_2pc_write_s", gw)
            rec("grpc_read_s", gr)
            print(
                f"run {run + 1}: " + ", ".join(f"{k}={v[-1]:.2f}" for k, v in results.items()),
                flush=True,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(
        f"\nmedians of {args.runs} runs, {n:,} rows of ~100 bytes, {TXN_ROWS:,} rows per txn, "
        "fsync on every commit"
    )
    print(f"  raw py-lmdb write ceiling (4 records/row) {n / med['raw_write_s']:>12,.0f} rows/s")
    print(
        f"  snapview 2PC write (prewrite + commit)    {n / med['store_2pc_write_s']:>12,.0f} "
        f"rows/s  ratio {med['raw_write_s'] / med['store_2pc_write_s']:.2f} of ceiling"
    )
    print(
        f"  snapview 1PC write                        {n / med['store_1pc_write_s']:>12,.0f} "
        f"rows/s  ratio {med['raw_write_s'] / med['store_1pc_write_s']:.2f} of ceiling"
    )
    print(f"  raw LMDB cursor scan (write CF)           {n / med['raw_scan_s']:>12,.0f} rows/s")
    print(
        f"  snapview snapshot read into pyarrow       {n / med['snapshot_read_s']:>12,.0f} "
        f"rows/s  ratio {med['raw_scan_s'] / med['snapshot_read_s']:.2f} of raw scan"
    )
    print(
        f"  over gRPC: 2PC write (RemoteStore)        {n / med['grpc_2pc_write_s']:>12,.0f} "
        f"rows/s  ratio {med['raw_write_s'] / med['grpc_2pc_write_s']:.2f} of ceiling"
    )
    print(f"  over gRPC: client.read into pyarrow       {n / med['grpc_read_s']:>12,.0f} rows/s")
    if "deltalake_read_s" in med:
        print(
            f"  deltalake read of an older version        {n / med['deltalake_read_s']:>12,.0f} "
            f"rows/s  ({med['deltalake_read_s']:.2f}s vs snapview "
            f"{med['snapshot_read_s']:.2f}s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
