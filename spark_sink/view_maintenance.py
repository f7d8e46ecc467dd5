"""View maintenance strategies: how a view's version at barrier T is computed and written.

The seam: a strategy gets one barrier (each source's read ts there, and whether it changed since
the barrier before) and writes the view's version at T as the job's epoch T, exactly once. Today
there is one strategy, ``FullRecompute``; incremental maintenance (delta rules, cost proportional
to the change) comes next, behind the same interface.

Epoch T of a view job is one Percolator transaction. Whatever happens, the view moves from its
version at the previous barrier to its version at T in one step, or not at all: a crash before the
commit leaves locks that are rolled back (the epoch is then redone), a crash after it leaves a
committed epoch that a replay skips.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import SparkSession

from coordinator.client import Client
from coordinator.connection import ConnectionSettings
from coordinator.jobs import EpochMetadata
from kvstore.errors import Aborted, SchemaMismatch
from kvstore.failpoints import fail_point
from kvstore.mvcc.records import LockOp, Mutation
from kvstore.table_info import TableInfo
from spark_sink.arrow_encoding import ArrowEncoder
from spark_sink.epoch_attempt import EpochAttempt
from spark_sink.partition_writer import (
    DIRECT_TXN_ROWS,
    DirectInfo,
    EpochTarget,
    direct_prewriter,
    prewrite_chunk,
    prewrite_remote,
)
from spark_sink.query_analysis import read_small, register_sources
from spark_source.connection import client_for

FULL_RECOMPUTE = "full_recompute"
MAX_COMMIT_ATTEMPTS = 3
LOCAL_SOURCE_ROWS = 50_000  # sources up to this size are read by the driver (see compute)
RECHECK_LARGE_EVERY = 100  # barriers before a source found large is measured again


@dataclass
class Progress:
    """What a view job did since it started (``ViewJob.progress()``)."""

    first_barrier: int = 0  # the first barrier this run committed
    last_barrier: int = 0
    barriers: int = 0  # epochs committed by this run
    recomputed: int = 0  # ... of which ran the query
    unchanged: int = 0  # ... of which no source had changed (recorded without writing)
    skipped: int = 0  # barriers found already committed (a replay)
    mutations: int = 0
    last_epoch_s: float = 0.0
    last_steps: dict = field(default_factory=dict)  # seconds per step of the last recompute
    recompute_seconds: list[float] = field(default_factory=list)  # ... that ran the query

    def as_dict(self) -> dict:
        return {
            "first_barrier": self.first_barrier,
            "last_barrier": self.last_barrier,
            "barriers": self.barriers,
            "recomputed": self.recomputed,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
            "mutations": self.mutations,
            "last_epoch_s": round(self.last_epoch_s, 4),
            "last_steps": {k: round(v, 4) for k, v in self.last_steps.items()},
        }


@dataclass
class ViewSpec:
    """What a strategy needs to know about its view (built by MaterializedView)."""

    coordinator: str | ConnectionSettings
    token: str | None
    job: str
    target: str
    query: str
    column_names: tuple[str, ...]
    one_row: bool
    lock_ttl_ms: int = 20_000


class FullRecompute:
    """At each barrier: read the sources at their read ts, run the query on Spark, diff the
    result against the view's previous version by primary key on the driver, and write only the
    difference as epoch T. A barrier at which no source changed is recorded without running the
    query (the view's contents are the same as at the barrier before).

    Sources of up to LOCAL_SOURCE_ROWS rows are read by the driver and handed to Spark as local
    relations (a Python scan task costs more than such a query); larger ones are scanned by the
    executors in key-range partitions.

    Cost: the whole query at every barrier where anything changed, whatever the size of the
    change; the result must fit in the driver's memory."""

    name = FULL_RECOMPUTE

    def __init__(
        self, spec: ViewSpec, session: SparkSession, direct_info: DirectInfo | None = None
    ) -> None:
        self.spec = spec
        self.session = session
        self.direct_info = direct_info
        self.progress = Progress()
        self._recompute_next = True  # the first barrier of a run always runs the query
        self._large: dict[str, int] = {}  # source -> barriers until it is measured again

    @staticmethod
    def why() -> str:
        return (
            "full recompute handles any Spark SQL query (joins, subqueries, any aggregate); "
            "incremental maintenance is not built yet"
        )

    # ------------------------------------------------------------------ one barrier

    def maintain(self, barrier: int, reads: dict[str, tuple[int, bool]]) -> None:
        """Make the view's version at ``barrier`` exist, exactly once."""
        for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
            try:
                self._maintain_once(barrier, reads)
                return
            except Aborted:
                # The attempt's locks outlived their TTL and a reader rolled them back (a long
                # pause): open the barrier again and redo it.
                if attempt == MAX_COMMIT_ATTEMPTS:
                    raise

    def _maintain_once(self, barrier: int, reads: dict[str, tuple[int, bool]]) -> None:
        spec = self.spec
        t0 = time.perf_counter()
        client = client_for(spec.coordinator, spec.token)
        attempt = EpochAttempt.open(client, spec.job, barrier, ttl_ms=spec.lock_ttl_ms)
        if attempt.committed:
            self.progress.skipped += 1
            self.progress.last_barrier = max(self.progress.last_barrier, barrier)
            self._recompute_next = False
            return
        info = client.describe_table(spec.target, refresh=True)
        target = attempt.target(spec.coordinator, spec.token, info, "upsert", self.direct_info)
        changed = self._recompute_next or any(c for _, c in reads.values())
        with attempt.running(target):
            muts: list[Mutation] = []
            if changed:
                new = self.compute({t: ts for t, (ts, _) in reads.items()})
                t1 = time.perf_counter()
                muts = self.diff(client, info, new, attempt.start_ts)
                t2 = time.perf_counter()
                self.write(client, target, muts)
                steps = self.progress.last_steps
                steps["diff"], steps["write"] = t2 - t1, time.perf_counter() - t2
            fail_point("view.before_commit")
            meta = EpochMetadata(
                sources={t: ts for t, (ts, _) in reads.items()},
                fields={
                    "barrier": barrier,
                    "strategy": self.name,
                    "mutations": len(muts),
                    "recomputed": changed,
                },
            )
            attempt.commit(meta)
        p = self.progress
        p.first_barrier = p.first_barrier or barrier
        p.last_barrier = barrier
        p.barriers += 1
        p.recomputed += changed
        p.unchanged += not changed
        p.mutations += len(muts)
        p.last_epoch_s = time.perf_counter() - t0
        if changed:
            p.recompute_seconds.append(p.last_epoch_s)
            del p.recompute_seconds[:-1000]
        self._recompute_next = False

    # ------------------------------------------------------------------ the steps

    def compute(self, reads: dict[str, int]) -> pa.Table:
        """Run the query over the sources as of their read ts; the result as Arrow."""
        spec = self.spec
        t0 = time.perf_counter()
        client = client_for(spec.coordinator, spec.token)
        local: dict[str, pa.Table] = {}
        for table, ts in reads.items():
            if self._large.get(table, 0) > 0:
                self._large[table] -= 1
                continue
            small = read_small(client, table, ts, LOCAL_SOURCE_ROWS)
            if small is None:
                self._large[table] = RECHECK_LARGE_EVERY
            else:
                local[table] = small
        register_sources(self.session, spec.coordinator, reads, spec.token, local)
        t1 = time.perf_counter()
        df = self.session.sql(spec.query)
        if spec.column_names:
            df = df.toDF(*spec.column_names)
        t2 = time.perf_counter()
        out = df.toArrow()
        t3 = time.perf_counter()
        self.progress.last_steps = {"load": t1 - t0, "analyze": t2 - t1, "run": t3 - t2}
        return out

    def diff(self, client: Client, info: TableInfo, new: pa.Table, read_ts: int) -> list[Mutation]:
        """Mutations turning the view as of ``read_ts`` into ``new``: a PUT for every row that
        is new or different, a DELETE for every key that is gone."""
        enc = ArrowEncoder(info)
        spec = self.spec
        if spec.one_row and new.num_rows != 1:
            raise SchemaMismatch(
                f"view {spec.target!r}: a one-row view's query returned {new.num_rows} rows"
            )
        new_rows: dict[bytes, bytes] = {}
        n = 0
        for batch in new.combine_chunks().to_batches(max_chunksize=65536):
            mode = "append" if spec.one_row else "upsert"
            for _, k, v in enc.mutations(batch, mode, 0, 0, 0):
                new_rows[k] = v
                n += 1
                if len(new_rows) != n:
                    raise SchemaMismatch(
                        f"view {spec.target!r}: primary key "
                        f"({', '.join(info.table_schema.primary_key)}) is not unique in the "
                        f"query result: {info.key_codec.decode(k)} appears more than once; set "
                        "primary_key to columns that identify a row"
                    )
        old: dict[bytes, bytes] = {}
        chunks = client.with_lock_wait(lambda: list(client.store.scan_table(spec.target, read_ts)))
        for keys, values in chunks:
            old.update(zip(keys, values, strict=True))
        muts: list[Mutation] = [(LockOp.PUT, k, v) for k, v in new_rows.items() if old.get(k) != v]
        muts += [(LockOp.DELETE, k, b"") for k in old if k not in new_rows]
        return muts

    def write(self, client: Client, target: EpochTarget, muts: list[Mutation]) -> None:
        """Prewrite ``muts`` as secondaries of the epoch (directly into LMDB when allowed)."""
        direct = direct_prewriter(target)
        puts = [m for m in muts if m[0] is LockOp.PUT]
        deletes = [m for m in muts if m[0] is not LockOp.PUT]
        # prewrite_chunk takes DIRECT_TXN_ROWS rows per LMDB transaction and splits what goes
        # to the server into requests itself.
        for i in range(0, len(puts), DIRECT_TXN_ROWS):
            prewrite_chunk(client, direct, target, puts[i : i + DIRECT_TXN_ROWS])
        prewrite_remote(client, target, deletes)


STRATEGIES = {FULL_RECOMPUTE: FullRecompute}
