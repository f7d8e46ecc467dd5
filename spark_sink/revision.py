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

from coordinator.jobs import EpochMetadata
from coordinator.revisions import (
    Revision,
    begin_corrections,
    correctable_table,
    correction_columns,
    dry_run_record,
)
from spark_sink.arrow_encoding import ArrowEncoder
from spark_sink.partition_writer import direct_info, prewrite_partitions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from coordinator.client import Client


def write_dataframe_corrections(
    client: Client, table: str, df: DataFrame, mode: str, who: str, dry_run: bool = False
) -> Revision:
    """Write ``df`` into root table ``table`` (``mode`` upsert: whole rows; delete: rows naming
    keys) as one transaction from the executors; return the revision's record. With
    ``dry_run``, count on the executors how many rows would change and write nothing."""
    info = correctable_table(client, table, mode)
    # Whole rows for an upsert, as a pyarrow correction set needs (a column left out of a sink's
    # upsert would become NULL), then the sink's own checks of the columns.
    correction_columns(info, df.columns, mode)
    ArrowEncoder(info).check_sink(df.columns, mode)
    if dry_run:
        restored, removed = _count_changes(client, table, df, mode)
        return dry_run_record(client, table, mode, who, restored, removed)
    rev, attempt = begin_corrections(client, table, mode, who)
    target = attempt.target(client.settings, None, info, mode, direct_info(client))
    with attempt.running():
        out = df.mapInArrow(prewrite_partitions(target), "rows long, high long").collect()
        rows = sum(r["rows"] for r in out)
        attempt.commit(EpochMetadata(fields={"rows": rows, "revision": rev.id}))
    return client.revision(rev.id)


def _count_changes(client: Client, table: str, df: DataFrame, mode: str) -> tuple[int, int]:
    """(rows an upsert would insert or change, keys a delete would remove), counted by a join
    with the table as of now, on the executors."""
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
    # The table's rows under the corrections' keys, against the corrections themselves.
    old = current.join(df.select(*key), key, "left_semi").select(*cols)
    inserted, _, updated = count_changes(old, df.select(*cols), key)
    return inserted + updated, 0


def count_changes(old: DataFrame, new: DataFrame, key: list[str]) -> tuple[int, int, int]:
    """(inserted, deleted, updated) from ``old`` to ``new`` by ``key``, counted on the
    executors (Spark's null-safe equality on every other column). An empty ``key`` is a one-row
    view's (its key is hidden): its row is compared with the other's one row."""
    from pyspark.sql import functions as F

    if not key:
        key = ["__one_row"]
        old, new = old.withColumn("__one_row", F.lit(0)), new.withColumn("__one_row", F.lit(0))
    cols = [c for c in new.columns if c not in key]
    o = old.select(*key, *[F.col(c).alias(f"__o_{c}") for c in cols]).withColumn("__o", F.lit(1))
    n = new.select(*key, *cols).withColumn("__n", F.lit(1))
    j = o.join(n, key, "full_outer")
    same = F.lit(True)
    for c in cols:
        same = same & F.col(c).eqNullSafe(F.col(f"__o_{c}"))
    row = j.agg(
        F.sum(F.when(F.col("__o").isNull(), 1).otherwise(0)).alias("ins"),
        F.sum(F.when(F.col("__n").isNull(), 1).otherwise(0)).alias("del"),
        F.sum(
            F.when(F.col("__o").isNotNull() & F.col("__n").isNotNull() & ~same, 1).otherwise(0)
        ).alias("upd"),
    ).collect()[0]
    return int(row["ins"] or 0), int(row["del"] or 0), int(row["upd"] or 0)
