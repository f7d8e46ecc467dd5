"""EpochWriter: exactly-once writes from Structured Streaming's foreachBatch, and one-off loads.

Each call is one store transaction (an epoch of the job, default job name = the table):

1. the driver asks the coordinator for the epoch of this call's batch key. In a stream the key
   is Spark's (query id, batch id): a batch already committed is skipped (a replay); one left in
   PREWRITE by a crashed run is rolled back and redone (a fresh attempt); otherwise the job's next
   epoch opens. Outside a stream the key is fresh for every call (a load is its own epoch),
   unless the caller names one with ``load(df, dedup_key=...)``;
2. executors prewrite their partitions as secondaries of the epoch's primary, thousands of
   mutations per call, while a heartbeat keeps the primary alive;
3. the driver commits through the coordinator. The commit records, with the epoch, the highest
   ``_commit_ts`` of a snapview change feed in the batch, so a stream restarted without its
   checkpoint can resume there (``.option("resumeFromJob", job)`` on the source).

Any failure before the commit aborts the attempt: nothing of the batch becomes visible.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from pyspark.sql import DataFrame

from coordinator.connection import ConnectionSettings
from coordinator.epoch_attempt import UNKNOWN, DirectInfo, EpochAttempt, feed_metadata
from coordinator.jobs import EpochInfo
from coordinator.process_clients import client_for
from kvstore.errors import SnapviewError
from kvstore.failpoints import fail_point
from spark_sink.arrow_encoding import ArrowEncoder
from spark_sink.partition_writer import direct_info, prewrite_partitions

DEFAULT_TTL_MS = 20_000
MODES = ("upsert", "delete", "append")
QUERY_ID_PROPERTY = "sql.streaming.queryId"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpochWrite:
    """What one call of an EpochWriter did.

    ``epoch``: the committed epoch the call's data is in. ``batch``: the batch key the epoch is
    tagged with (``QUERY_ID:BATCH_ID`` in a stream, ``load:...`` for a one-off load, ``dedup:KEY``
    for ``load(df, dedup_key=KEY)``). ``replayed``: the key's epoch was committed before this
    call, so the call wrote nothing (exactly once); ``rows``: rows this call wrote (0 then)."""

    epoch: EpochInfo
    batch: str
    replayed: bool
    rows: int


class EpochWriter:
    """``df.writeStream.foreachBatch(EpochWriter(conn, table="t", mode="upsert"))``, or one-off
    loads: ``writer(df)`` / ``writer.load(df)``.

    Which calls are deduplicated: in a stream (``foreachBatch``, where Spark sets the query id)
    ``writer(df, batch_id)`` is the epoch of (query id, batch id), and a replay of a committed
    batch writes nothing. Outside a stream every call is a new epoch, whatever ``batch_id`` says:
    there is no query to scope a batch id, and two loads must never silently become one. A
    one-off load that must be deduplicated names its key: ``writer.load(df, dedup_key="k")``.
    ``load`` returns an ``EpochWrite`` and every call leaves it in ``last_write``: ``replayed``
    says whether the call was skipped; a skipped ``dedup_key`` is logged at WARNING on this
    module's logger.

    ``conn`` is a ``coordinator.ConnectionSettings`` (address, token or token file, TLS CA), or an
    address with ``token=`` beside it (the older form).

    ``mode``: upsert (by primary key), delete (the rows name keys to delete), append (tables
    created with ``primary_key=[]``; rows get deterministic hidden ids). ``job`` defaults to the
    table name, and the job is registered as the table's one writer on the first batch: another
    job writing the same table is refused with SecondWriter. ``lock_ttl_ms`` is how long the epoch's locks outlive a dead
    writer before readers roll them back (a live writer heartbeats). With ``direct`` (default),
    executors that share the server's host and data dir prewrite into its LMDB environment
    themselves (see kvstore.direct); others, and anything the direct path hands back, use gRPC."""

    def __init__(
        self,
        coordinator: str | ConnectionSettings,
        table: str,
        mode: str = "upsert",
        job: str | None = None,
        lock_ttl_ms: int = DEFAULT_TTL_MS,
        token: str | None = None,
        direct: bool = True,
    ) -> None:
        if mode not in MODES:
            raise SnapviewError(f"table {table!r}: mode {mode!r} is not one of {MODES}")
        self.coordinator, self.table, self.mode = coordinator, table, mode
        self.job = job or table
        self.lock_ttl_ms = lock_ttl_ms
        self.token = token
        self.direct = direct  # executors on the server's host may prewrite into LMDB directly
        self._direct_info: DirectInfo | None = None
        self._registered = False
        self.last_epoch: EpochInfo | None = None  # the newest batch this writer handled
        self.last_write: EpochWrite | None = None  # what the newest call did
        # (epoch, feed high-water) of the last epoch this writer committed: the next epoch
        # carries the high-water forward without reading it back from the coordinator.
        self._carried: tuple[int, int | None] | None = None

    def __call__(self, df: DataFrame, batch_id: int | None = None) -> None:
        """Write ``df`` as one epoch (what it did: ``last_write``; foreachBatch wants None
        back). Inside ``foreachBatch`` the epoch is Spark's batch (query id, ``batch_id``),
        exactly once across replays; outside a stream (no query id on this thread) it is a new
        epoch every call, like ``load(df)``: ``batch_id`` is then not a key (use
        ``load(df, dedup_key=...)`` for that)."""
        qid = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if qid is None or batch_id is None:
            self.load(df)
        else:
            self._write(df, f"{qid}:{batch_id}", logging.INFO)

    def load(self, df: DataFrame, dedup_key: str | int | None = None) -> EpochWrite:
        """Write ``df`` as one epoch of the job, exactly once.

        Without ``dedup_key`` the load is always a new epoch: two loads both land. With it, the
        epoch is tagged ``dedup:KEY``: if the job's newest epoch is that key's and committed (a
        retry of a load whose answer was lost, say), nothing is written, a WARNING is logged and
        the result has ``replayed`` set. Only the job's newest epoch is compared (as for a
        stream's batches), so a key is deduplicated against the load just before, not against
        the job's whole history."""
        if dedup_key is None:
            return self._write(df, f"load:{uuid.uuid4().hex}", logging.WARNING)
        if isinstance(dedup_key, bool) or not isinstance(dedup_key, (str, int)) or dedup_key == "":
            raise SnapviewError(
                f"table {self.table!r}: dedup_key {dedup_key!r} must be a non-empty str or an int"
            )
        return self._write(df, f"dedup:{dedup_key}", logging.WARNING)

    def _write(self, df: DataFrame, batch: str, replay_level: int) -> EpochWrite:
        client = client_for(self.coordinator, self.token)
        info = client.describe_table(self.table, refresh=True)
        ArrowEncoder(info).check_sink(df.columns, self.mode)
        if not self._registered:
            client.jobs.register_job(self.job, self.table, [], kind="sink")
            self._registered = True
        attempt = EpochAttempt.open(
            client, self.job, ttl_ms=self.lock_ttl_ms, batch=batch, owner=uuid.uuid4().hex
        )
        self.last_epoch = attempt.info
        if attempt.committed:  # replayed after its commit: skip, exactly once
            log.log(
                replay_level,
                "job %r (table %r): batch %s was committed before as epoch %d; "
                "this call wrote nothing (a replay)",
                self.job,
                self.table,
                batch,
                attempt.epoch,
            )
            self.last_write = EpochWrite(attempt.info, batch, replayed=True, rows=0)
            return self.last_write
        if self.direct and self._direct_info is None:
            self._direct_info = direct_info(client)
        direct = self._direct_info if self.direct else None
        target = attempt.target(self.coordinator, self.token, info, self.mode, direct)
        with attempt.running():
            out = df.mapInArrow(prewrite_partitions(target), "rows long, high long").collect()
            fail_point("sink.before_commit")
            high = max([r["high"] for r in out], default=-1)
            carried = self._carried
            prev = carried[1] if carried and carried[0] == attempt.epoch - 1 else UNKNOWN
            rows = sum(r["rows"] for r in out)
            meta = feed_metadata(client, self.job, batch, rows, high, prev)
            self.last_epoch = attempt.commit(meta)
            self._carried = (attempt.epoch, meta.feed)
        self.last_write = EpochWrite(self.last_epoch, batch, replayed=False, rows=rows)
        return self.last_write
