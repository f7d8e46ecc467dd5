"""The writing side of an epoch: prewrite rows as secondaries of the epoch's primary, from a
Spark task (``write_batches``, ``prewrite_partitions``) or from the driver (``write_mutations``),
directly into the server's LMDB environment when this process shares its host, else through the
server. Idempotent: a retried task prewrites the same keys under the same start_ts."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from coordinator.client import Client
from coordinator.epoch_attempt import DirectInfo, EpochTarget, Heartbeat
from coordinator.process_clients import client_for
from kvstore.collector_pause import collector_paused
from kvstore.errors import InvalidArgument, TxnError
from kvstore.failpoints import fail_point
from kvstore.limits import split_mutations
from kvstore.mvcc.records import Mutation
from kvstore.table_info import TableInfo
from spark_sink.arrow_encoding import ArrowEncoder
from spark_source.options import CHANGE_TYPE, COMMIT_TS

if TYPE_CHECKING:
    from kvstore.direct import DirectPrewriter
    from kvstore.direct_reads import DirectReader

PREWRITE_CHUNK = 8192  # mutations per prewrite request to the server
# Most rows per direct LMDB write transaction (Spark hands over Arrow batches of 10k rows).
DIRECT_TXN_ROWS = 65536


_direct: dict[tuple, DirectPrewriter | None] = {}
_readers: dict[tuple, DirectReader] = {}  # by the same keys as _direct
_direct_lock = threading.Lock()

# The process's switch for the direct path: unset or "auto" uses it when this process sees the
# server's data dir (DATA_DIR/instance), "off" never does. Set it for executors with
# spark.executorEnv.SNAPVIEW_DIRECT=off (docs/cluster.md).
DIRECT_ENV = "SNAPVIEW_DIRECT"
_DIRECT_ON = ("", "auto", "on", "1", "true", "yes")
_DIRECT_OFF = ("off", "0", "false", "no")


def direct_allowed() -> bool:
    """Whether this process may prewrite into the server's LMDB environment directly: False when
    SNAPVIEW_DIRECT is off; a value that is neither auto nor off is refused, naming it."""
    value = os.environ.get(DIRECT_ENV, "").strip().lower()
    if value in _DIRECT_ON:
        return True
    if value in _DIRECT_OFF:
        return False
    raise InvalidArgument(
        f"{DIRECT_ENV}={os.environ[DIRECT_ENV]!r} (process {os.getpid()} on host "
        f"{socket.gethostname()}): expected auto "
        "(the default: direct prewrites when this process sees the server's data dir) or off"
    )


def direct_prewriter(target: EpochTarget) -> DirectPrewriter | None:
    """This process's direct prewriter for the target's server, or None if it is elsewhere or
    SNAPVIEW_DIRECT is off here."""
    if target.direct is None or not direct_allowed():
        return None
    data_dir, instance_id, lmdb_path, map_size = target.direct
    key = _direct_key(target.direct)
    # Under a lock: several view jobs of one driver write their deltas from their own threads,
    # and LMDB refuses a second open of an environment in one process.
    with _direct_lock:
        return _direct_prewriter_locked(key, data_dir, instance_id, lmdb_path, map_size)


def _direct_key(direct: DirectInfo) -> tuple[int, str, str]:
    """The key of this process's direct prewriter (and reader) of a server: (pid, LMDB path,
    instance id). The pid keeps a forked child from using its parent's environment."""
    _, instance_id, lmdb_path, _ = direct
    return os.getpid(), lmdb_path, instance_id


def _direct_prewriter_locked(
    key: tuple[int, str, str], data_dir: str, instance_id: str, lmdb_path: str, map_size: int
) -> DirectPrewriter | None:
    if key not in _direct:
        # Loaded here, not at import: only an executor on the server's host opens the engine.
        from kvstore.direct import DirectPrewriter, same_instance

        # A restarted server has a new instance id over the same files. LMDB allows one open of
        # an environment per process, so the one opened for the old instance is closed first.
        for old in [k for k in _direct if k[:2] == key[:2]]:
            stale = _direct.pop(old)
            _readers.pop(old, None)  # its reader reads the environment closed below
            if stale is not None:
                stale.close()
        _direct[key] = (
            DirectPrewriter(lmdb_path, map_size) if same_instance(data_dir, instance_id) else None
        )
    return _direct[key]


def direct_reader(direct: DirectInfo | None) -> DirectReader | None:
    """This process's direct reader of the LMDB environment of the server ``direct`` describes
    (an ``EpochTarget.direct``; sharing the environment ``direct_prewriter`` opened: LMDB allows
    one open per process), or None where this process may not use it."""
    if direct is None or not direct_allowed():
        return None
    key = _direct_key(direct)
    data_dir, instance_id, lmdb_path, map_size = direct
    with _direct_lock:
        prewriter = _direct_prewriter_locked(key, data_dir, instance_id, lmdb_path, map_size)
        if prewriter is None:
            return None
        got = _readers.get(key)
        if got is None:
            from kvstore.direct_reads import DirectReader

            got = _readers[key] = DirectReader(prewriter.storage)
        return got


def close_direct() -> None:
    """Close and forget every direct prewriter and reader of this process (their LMDB
    environments); the next direct write or read opens them anew."""
    with _direct_lock:
        for p in _direct.values():
            if p is not None:
                p.close()
        _direct.clear()
        _readers.clear()


def task_context() -> TaskContext:
    """The running Spark task's context (the caller runs in a task, on an executor)."""
    tc = TaskContext.get()
    assert tc is not None, "not in a Spark task"
    return tc


def direct_info(client: Client) -> DirectInfo | None:
    """What EpochTarget.direct needs, from the server's status (None for an older server)."""
    st = client.status()
    if not st.instance_id or not st.lmdb_path:
        return None
    return st.data_dir, st.instance_id, st.lmdb_path, st.map_size_bytes


def strip_feed_columns(batch: pa.RecordBatch, info: TableInfo) -> tuple[pa.RecordBatch, int]:
    """Drop the change-feed columns a table does not have; returns (batch, max _commit_ts)."""
    high = -1
    names = batch.schema.names
    if COMMIT_TS in names and batch.num_rows:
        m = pc.max(batch.column(COMMIT_TS)).as_py()
        high = -1 if m is None else m
    table_cols = {c.name for c in info.table_schema.columns}
    drop = [i for i, n in enumerate(names) if n in (CHANGE_TYPE, COMMIT_TS) and n not in table_cols]
    for i in reversed(drop):
        batch = batch.remove_column(i)
    return batch, high


def prewrite_chunk(
    client: Client, direct: DirectPrewriter | None, target: EpochTarget, muts: list[Mutation]
) -> None:
    """Prewrite ArrowEncoder output: straight into LMDB in one write transaction when allowed,
    else (or when the direct path hands it back: a lock or conflict in the way, a full map)
    through the server in requests of PREWRITE_CHUNK, which validates every row it receives."""
    if direct is not None:
        from kvstore.direct import DirectUnavailable  # loaded already: ``direct`` exists

        try:
            direct.prewrite(
                target.info, muts, target.primary, target.start_ts, target.ttl_ms, encoded_here=True
            )
            return
        except (DirectUnavailable, TxnError):
            pass
    prewrite_remote(client, target, muts)


def prewrite_remote(client: Client, target: EpochTarget, muts: list[Mutation]) -> None:
    """Prewrite ``muts`` through the server, at most PREWRITE_CHUNK mutations per request and
    within the request limits of kvstore.limits."""
    for run in split_mutations(muts, max_mutations=PREWRITE_CHUNK):
        client.prewrite(run, target.primary, target.start_ts, target.ttl_ms)


def write_batches(
    target: EpochTarget, batches: Iterator[pa.RecordBatch], partition: int
) -> tuple[int, int]:
    """Prewrite every row of ``batches``; returns (rows, highest _commit_ts seen or -1).

    Each Arrow batch is prewritten as it comes: on the direct path as one LMDB write transaction
    (up to DIRECT_TXN_ROWS rows), else in requests of PREWRITE_CHUNK. One prewrite at a time runs
    on a helper thread while this thread reads and encodes the next batch: reading waits on the
    JVM and a commit waits on the disk, and neither holds the GIL. An error of any prewrite fails
    the task (and so the epoch attempt)."""
    client = client_for(target.coordinator, target.token)
    enc = ArrowEncoder(target.info)
    direct = direct_prewriter(target) if target.mode != "delete" else None
    group = DIRECT_TXN_ROWS if direct is not None else PREWRITE_CHUNK
    rows, high, settled = 0, -1, 0
    in_flight: Future[None] | None = None

    def settle() -> None:
        nonlocal in_flight, settled
        if in_flight is not None:
            in_flight.result()  # re-raises the prewrite's error here
            in_flight = None
            settled += 1
            if settled == 1:
                fail_point("sink.prewrite.mid")

    with (
        Heartbeat.of(target),
        collector_paused(),
        ThreadPoolExecutor(1, thread_name_prefix="prewrite") as pool,
    ):
        for batch in batches:
            batch, h = strip_feed_columns(batch, target.info)
            high = max(high, h)
            for off in range(0, batch.num_rows, group):
                part = batch.slice(off, group)
                # Append mode's row ids are (epoch, partition, index of the row in the partition).
                muts = enc.mutations(part, target.mode, target.epoch, partition, rows)
                rows += part.num_rows
                settle()
                in_flight = pool.submit(prewrite_chunk, client, direct, target, muts)
        settle()
    return rows, high


def prewrite_partitions(
    target: EpochTarget,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that prewrites each partition into ``target``
    (``write_batches``) and yields one row per partition: ``rows long, high long`` (the rows
    written, the highest change-feed ``_commit_ts`` seen or -1)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows, high = write_batches(target, batches, task_context().partitionId())
        yield pa.RecordBatch.from_pydict({"rows": [rows], "high": [high]})

    return run


def _mutation_key(m: Mutation) -> bytes:
    return m[1]


def write_mutations(client: Client, target: EpochTarget, muts: list[Mutation]) -> None:
    """Prewrite ``muts`` (built in this process by ``ArrowEncoder`` and ``encode_key``) as
    secondaries of the epoch: directly into LMDB when allowed, else through the server; in key
    order. The driver's writer of a view epoch, and of a delta's slice in a task."""
    direct = direct_prewriter(target)
    # In key order: each LMDB write transaction (and each request to the server) then covers
    # one key range and dirties each page once, not pages across the whole tree in every one
    # (a 100k-change epoch's writes: 3.0 s unsorted, 1.2-2.0 s sorted; docs/performance.md).
    muts = sorted(muts, key=_mutation_key)
    # prewrite_chunk takes DIRECT_TXN_ROWS rows per LMDB transaction and splits what goes
    # to the server into requests itself.
    for i in range(0, len(muts), DIRECT_TXN_ROWS):
        prewrite_chunk(client, direct, target, muts[i : i + DIRECT_TXN_ROWS])
