"""Spark benchmarks: the exactly-once sink against a plain sink, epoch overhead, delta-rs MERGE,
and snapshot reads through Spark.

    .venv/bin/python scripts/bench_spark.py [--rows 300000] [--runs 3]

Figures are medians of --runs runs, side by side in one process, on local[2] with the server
on the same machine.
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
import pyarrow as pa  # noqa: E402

import coordinator  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview.local_spark import local_session  # noqa: E402

SCHEMA = "id BIGINT, payload STRING, amount BIGINT"
FILES = 5


class PlainLmdbSink:
    """The baseline: executors put encoded rows straight into an LMDB env, no transactions,
    no conflict checks, no exactly-once (same row encoding as snapview's sink)."""

    def __init__(self, path: str, info):
        self.path, self.info = path, info

    def __call__(self, df, batch_id):
        path, info = self.path, self.info

        def run(batches):
            from spark_sink.arrow_encoding import ArrowEncoder

            env = lmdb.open(path, map_size=8 << 30, sync=True)
            enc, n = ArrowEncoder(info), 0
            with env.begin(write=True) as txn:
                for b in batches:
                    for _, k, v in enc.mutations(b, "upsert"):
                        txn.put(k, v)
                    n += b.num_rows
            env.close()
            yield pa.RecordBatch.from_pydict({"n": [n]})

        df.mapInArrow(run, "n long").collect()


def make_input(spark, d: str, rows: int) -> int:
    """Parquet files of ``rows`` rows under ``d``; returns how many (one micro-batch each)."""
    per = rows // FILES
    for f in range(FILES):
        (
            spark.range(f * per, (f + 1) * per, numPartitions=2)
            .selectExpr("id", "lpad(cast(id as string), 80, '0') as payload", "id as amount")
            .write.mode("overwrite")
            .parquet(os.path.join(d, f"part{f}"))
        )
    return sum(n.endswith(".parquet") for _, _, names in os.walk(d) for n in names)


def stream_through(spark, src: str, sink, ckpt: str) -> float:
    df = (
        spark.readStream.schema("id BIGINT, payload STRING, amount BIGINT")
        .option("maxFilesPerTrigger", 1)
        .parquet(src + "/*")
    )
    t0 = time.perf_counter()
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
    q.processAllAvailable()
    q.stop()
    return time.perf_counter() - t0


def side_by_side(spark, tmp: str, d: str, address: str, info, run: int) -> tuple[float, float]:
    """One stream through EpochWriter and the same stream through the plain sink, after an
    untimed one; which goes first alternates from run to run, so neither always pays for the
    other's leftovers (the server finishing the last epoch, the OS writing back LMDB pages)."""
    from spark_sink import EpochWriter

    def tx() -> float:
        sink = EpochWriter(address, table="bench")
        return stream_through(spark, os.path.join(tmp, "in"), sink, os.path.join(d, "ck1"))

    def plain() -> float:
        sink = PlainLmdbSink(os.path.join(d, "plain"), info)
        return stream_through(spark, os.path.join(tmp, "in"), sink, os.path.join(d, "ck2"))

    # Untimed: the first stream of a run pays for what the previous run left behind (the OS
    # writing back the files it deleted, the driver's garbage), whichever sink it is.
    settle = PlainLmdbSink(os.path.join(d, "settle"), info)
    stream_through(spark, os.path.join(tmp, "in"), settle, os.path.join(d, "ck0"))
    shutil.rmtree(os.path.join(d, "settle"), ignore_errors=True)
    if run % 2 == 0:
        t_tx = tx()
        return t_tx, plain()
    t_plain = plain()
    return tx(), t_plain


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--table-rows", type=int, default=1_000_000)
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed runs first: a process's first run pays for starting Python workers and JIT",
    )
    args = ap.parse_args()

    import spark_sink
    from spark_sink import EpochWriter

    spark = local_session()
    spark_sink.register(spark)
    res: dict[str, list[float]] = {}
    tmp = tempfile.mkdtemp(prefix="bench-spark-")
    try:
        batches = make_input(spark, os.path.join(tmp, "in"), args.rows)
        for run in range(args.warmup + args.runs):
            d = os.path.join(tmp, f"run{run}")
            with EmbeddedServer(os.path.join(d, "serve")) as srv:
                c = coordinator.connect(srv.address)
                info = c.create_table("bench", SCHEMA, ["id"])
                t_tx, t_plain = side_by_side(spark, tmp, d, srv.address, info, run)
                assert c.read("bench").num_rows == args.rows
                if run < args.warmup:
                    print(
                        f"warm-up {run + 1}: ratio {t_plain / t_tx:.2f} (not counted)", flush=True
                    )
                    c.close()
                    continue
                res.setdefault("tx_rows_per_s", []).append(args.rows / t_tx)
                res.setdefault("plain_rows_per_s", []).append(args.rows / t_plain)
                res.setdefault("ratio", []).append(t_plain / t_tx)

                # per-epoch overhead: an empty batch, committed, against Spark's own job
                empty = spark.range(0, 0, numPartitions=2).selectExpr(
                    "id", "'' as payload", "id as amount"
                )
                # its own table: one writer per table, and "bench" has its writer already
                c.create_table("bench_empty", SCHEMA, primary_key=["id"], if_not_exists=True)
                w = EpochWriter(srv.address, table="bench_empty")
                plain_empty = PlainLmdbSink(os.path.join(d, "plain_empty"), info)
                te, tp = [], []
                for b in range(15):
                    t0 = time.perf_counter()
                    plain_empty(empty, b)
                    tp.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    # outside a stream every call is its own epoch (design.md §6.2)
                    w(empty, run * 1000 + b)
                    te.append(time.perf_counter() - t0)
                res.setdefault("epoch_ms", []).append(statistics.median(te) * 1e3)
                res.setdefault("spark_batch_ms", []).append(statistics.median(tp) * 1e3)

                # snapshot read through Spark against client.read
                t0 = time.perf_counter()
                n = c.read("bench").num_rows
                t_client = time.perf_counter() - t0
                df = (
                    spark.read.format("snapview")
                    .option("coordinator", srv.address)
                    .option("table", "bench")
                    .load()
                )
                t0 = time.perf_counter()
                n2 = df.selectExpr("sum(amount)").first()[0] is not None and df.count()
                t_spark = time.perf_counter() - t0
                assert n == n2 == args.rows
                res.setdefault("client_read_rows_per_s", []).append(n / t_client)
                res.setdefault("spark_read_rows_per_s", []).append(2 * n / t_spark)

                # 10k-row upsert into a table of --table-rows: snapview vs delta-rs MERGE
                t_sv, t_delta = merge_peer(spark, srv.address, c, d, args.table_rows)
                res.setdefault("sv_upsert_10k_s", []).append(t_sv)
                res.setdefault("delta_merge_10k_s", []).append(t_delta)
                c.close()
            print(
                f"run {run - args.warmup + 1}: "
                + ", ".join(f"{k}={v[-1]:,.3f}" for k, v in res.items()),
                flush=True,
            )
            shutil.rmtree(d, ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    m = {k: statistics.median(v) for k, v in res.items()}
    print(
        f"\nmedians of {args.runs} runs, {args.rows:,} upserts in {batches} micro-batches, "
        "local[2], fsync on"
    )
    print(f"  EpochWriter (exactly-once, transactional)  {m['tx_rows_per_s']:>10,.0f} rows/s")
    print(f"  plain foreachBatch -> LMDB, no transaction {m['plain_rows_per_s']:>10,.0f} rows/s")
    print(f"  ratio transactional / plain                {m['ratio']:>10.2f}")
    print(
        f"  empty batch: EpochWriter {m['epoch_ms']:.1f} ms, plain Spark job "
        f"{m['spark_batch_ms']:.1f} ms, epoch overhead {m['epoch_ms'] - m['spark_batch_ms']:.1f}"
        " ms"
    )
    print(
        f"  10k-row upsert into a {args.table_rows:,}-row table: snapview EpochWriter "
        f"{m['sv_upsert_10k_s']:.2f} s, delta-rs MERGE in foreachBatch "
        f"{m['delta_merge_10k_s']:.2f} s"
    )
    print(
        f"  snapshot read: client.read {m['client_read_rows_per_s']:,.0f} rows/s, Spark "
        f"{m['spark_read_rows_per_s']:,.0f} rows/s (sum + count)"
    )
    return 0


def merge_peer(spark, address: str, c, d: str, table_rows: int) -> tuple[float, float]:
    import deltalake

    from spark_sink import EpochWriter

    info = c.create_table("big", SCHEMA, ["id"])
    base = pa.table(
        {
            "id": pa.array(range(table_rows), pa.int64()),
            "payload": pa.array([f"{i:080d}" for i in range(table_rows)]),
            "amount": pa.array(range(table_rows), pa.int64()),
        }
    )
    from spark_sink.arrow_encoding import ArrowEncoder

    enc = ArrowEncoder(info)
    for b in base.to_batches(max_chunksize=10_000):
        muts = enc.mutations(b, "upsert")
        start = c.tso()
        c.store.prewrite(muts, muts[0][1], start)
        c.store.commit(start, c.tso(), [k for _, k, _ in muts])
    dpath = os.path.join(d, "delta")
    deltalake.write_deltalake(dpath, base)
    upd = spark.range(table_rows // 2, table_rows // 2 + 10_000, numPartitions=2).selectExpr(
        "id", "'updated' as payload", "id * 2 as amount"
    )
    t0 = time.perf_counter()
    EpochWriter(address, table="big")(upd, 0)
    t_sv = time.perf_counter() - t0

    def delta_merge(df, batch_id):
        (
            deltalake.DeltaTable(dpath)
            .merge(source=df.toArrow(), predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    t0 = time.perf_counter()
    delta_merge(upd, 0)
    t_delta = time.perf_counter() - t0
    return t_sv, t_delta


if __name__ == "__main__":
    sys.exit(main())
