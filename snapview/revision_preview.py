"""What a revision would do to the views downstream of its table, computed by Spark, not written.

``snapview revise --dry-run`` prints, for each view downstream of the revised table, how many
rows its next epoch would change. Each view's query (as its job registered it) is run by Spark
over the sources as of the newest barrier they all have, with the revised table replaced by its
revised contents (the table at the target, for a rollback; the table with the corrections
applied, for a correction set) and each upstream view replaced by its own recomputed result, so
a view over a view sees the revision too. The result is compared with the view's contents at
that barrier by primary key, on the executors: only counts reach the driver.

This is a preview: the next epoch also carries whatever else changes the sources meanwhile, and
it is as costly as recomputing each view once (it reads the sources whole).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_sink.revision import count_changes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from coordinator.client import Client

PREVIEW_WAIT_S = 30.0


@dataclass(frozen=True)
class ViewChange:
    """The rows a view's next epoch would change: keys it gains, loses, and rows that change."""

    view: str
    inserted: int
    deleted: int
    updated: int

    @property
    def rows(self) -> int:
        return self.inserted + self.deleted + self.updated


def _read(spark: SparkSession, client: Client, table: str, at: int) -> DataFrame:
    from spark_sink.job_session import session_source

    return (
        spark.read.format(session_source(spark))
        .options(**client.settings.spark_options())
        .option("table", table)
        .option("at", str(at))
        .load()
    )


def revised_table(
    spark: SparkSession,
    client: Client,
    table: str,
    at: int,
    target_ts: int = 0,
    corrections: DataFrame | None = None,
    mode: str = "upsert",
) -> DataFrame:
    """(In a session ``prepare_session`` readied.) ``table`` as the revision would leave it: as of ``target_ts`` for a rollback, else as of
    ``at`` with ``corrections`` applied (upserted whole rows, or deleted keys)."""
    if target_ts:
        return _read(spark, client, table, target_ts)
    assert corrections is not None
    info = client.describe_table(table)
    key = list(info.primary_key)
    current = _read(spark, client, table, at)
    kept = current.join(corrections.select(*key), key, "left_anti")
    if mode == "delete":
        return kept
    cols = [c.name for c in info.table_schema.visible_columns]
    return kept.unionByName(corrections.select(*cols))


def preview_views(
    spark: SparkSession,
    client: Client,
    table: str,
    views: list[str],
    target_ts: int = 0,
    corrections: DataFrame | None = None,
    mode: str = "upsert",
) -> tuple[int, list[ViewChange]]:
    """For each of ``views`` (downstream of ``table``, upstream first): the rows its next epoch
    would change if ``table`` were revised. Returns the barrier the preview was computed at and
    the changes. Writes nothing."""
    from spark_sink.job_session import prepare_session

    jobs = {j.sink: j for j in client.jobs.list_jobs()}
    needed = {table, *views}
    for v in views:
        if v in jobs:
            needed |= set(jobs[v].sources)
    snap = client.snapshot(sorted(needed), wait_s=PREVIEW_WAIT_S)
    # A session of its own: its temporary views shadow no one's. Spark 4.3 cannot look up a
    # cloned session's data sources, so the snapview source is registered there anew.
    session = spark.newSession()
    prepare_session(session)
    for t in sorted(needed - {table, *views}):
        _read(session, client, t, snap.read_ts(t)).createOrReplaceTempView(t)
    at = snap.read_ts(table)
    revised_table(session, client, table, at, target_ts, corrections, mode).createOrReplaceTempView(
        table
    )
    out = []
    for v in views:
        job = jobs.get(v)
        if job is None or not job.query:
            continue  # not a view job's table: nothing to recompute it with
        info = client.describe_table(v)
        names = [c.name for c in info.table_schema.visible_columns]
        old = _read(session, client, v, snap.read_ts(v))
        new = session.sql(job.query)
        if len(new.columns) == len(names):
            new = new.toDF(*names)
        key = [k for k in info.primary_key if k in names]  # none: a one-row view
        ins, dele, upd = count_changes(old.select(*names), new, key)
        out.append(ViewChange(v, ins, dele, upd))
        new.createOrReplaceTempView(v)  # views further down read the revised one
    return snap.barrier, out
