"""A correction set from a Spark DataFrame, written by the executors as one transaction.

``Client.revise(table, corrections=df, mode=...)`` lands here: the coordinator records the
revision and opens its epoch (job ``revision/<id>``); the executors prewrite their partitions as
secondaries of the epoch's primary, exactly as the ``snapview`` sink does (directly into LMDB
when they share the server's host); the driver commits the epoch, which marks the revision DONE
in the same LMDB transaction. No row of the DataFrame passes through the driver. Any failure
aborts the epoch: nothing of the correction set becomes visible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.jobs import EpochInfo, EpochMetadata
from coordinator.revisions import DEFAULT_LOCK_TTL_MS, Revision, check_mode, dry_run_record
from kvstore.errors import FailedPrecondition, SchemaMismatch
from spark_sink.arrow_encoding import ArrowEncoder
from spark_sink.epoch_attempt import EpochAttempt
from spark_sink.epoch_writer import _partition_fn
from spark_sink.partition_writer import direct_info

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from coordinator.client import Client


def write_dataframe_corrections(
    client: Client, table: str, df: DataFrame, mode: str, who: str, dry_run: bool = False
) -> Revision:
    """Write ``df`` into root table ``table`` (``mode`` upsert: whole rows; delete: rows naming
    keys) as one transaction from the executors; return the revision's record. With
    ``dry_run``, count on the executors how many rows would change and write nothing."""
    check_mode(table, mode)
    info = client.describe_table(table, refresh=True)
    if info.hidden_row_id:
        raise FailedPrecondition(
            f"table {table!r} is append-only: its rows have no key to correct by; roll it "
            "back to a barrier instead"
        )
    ArrowEncoder(info).check_sink(df.columns, mode)
    if mode == "upsert":
        # Whole rows, as a pyarrow correction set needs: a column left out would become NULL.
        for c in info.table_schema.visible_columns:
            if c.name not in df.columns:
                raise SchemaMismatch(
                    f"table {table!r}: the corrections have no column {c.name!r} (upsert "
                    "needs whole rows)"
                )
    if dry_run and info.kind != "root":
        raise FailedPrecondition(
            f"table {table!r} is a {info.kind} table: its contents follow from its sources; "
            f"revise the sources, or rebuild it with `snapview rebuild {table}`"
        )
    if dry_run:
        restored, removed = _count_changes(client, table, df, mode)
        return dry_run_record(client, table, mode, who, restored, removed)
    begun = client._begin_corrections(table, mode, who, DEFAULT_LOCK_TTL_MS)
    rev, epoch = Revision.from_pb(begun.revision), EpochInfo.from_pb(begun.epoch)
    attempt = EpochAttempt(client, epoch, DEFAULT_LOCK_TTL_MS)
    target = attempt.target(client.settings, None, info, mode, direct_info(client))
    with attempt.running(target):
        out = df.mapInArrow(_partition_fn(target), "rows long, high long").collect()
        rows = sum(r["rows"] for r in out)
        attempt.commit(EpochMetadata(fields={"rows": rows, "revision": rev.id}))
    return client.revision(rev.id)


def _count_changes(client: Client, table: str, df: DataFrame, mode: str) -> tuple[int, int]:
    """(rows an upsert would insert or change, keys a delete would remove), counted by a join
    with the table as of now, on the executors."""
    from pyspark.sql import functions as F

    info = client.describe_table(table)
    key = list(info.primary_key)
    current = (
        df.sparkSession.read.format("snapview")
        .options(**client.settings.spark_options())
        .option("table", table)
        .option("at", str(client.tso()))
        .load()
    )
    if mode == "delete":
        return 0, df.select(*key).distinct().join(current.select(*key), key, "left_semi").count()
    cols = [c.name for c in info.table_schema.visible_columns]
    old = current.select(*[F.col(c).alias(f"__old_{c}") for c in cols])
    cond = [F.col(k) == F.col(f"__old_{k}") for k in key]
    joined = df.select(*cols).join(old, cond, "left")
    same = F.lit(True)
    for c in cols:
        same = same & F.col(c).eqNullSafe(F.col(f"__old_{c}"))
    return joined.filter(~same).count(), 0
