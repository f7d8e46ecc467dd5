"""Bring a Delta table into snapview, exactly once, without Spark's Delta connector.

    .venv/bin/python scripts/examples/delta_ingest.py                 # a demo on temporary dirs
    .venv/bin/python scripts/examples/delta_ingest.py HOST:PORT DELTA_PATH TABLE [--job JOB]

With the Delta connector on Spark's classpath this is one streaming query (docs/delta.md):
``spark.readStream.format("delta").load(path).writeStream.format("snapview")...``. Without it,
this script does the same with the ``deltalake`` package (delta-rs) and ``EpochWriter``:

- The first run copies the Delta table's snapshot at its current version V; every run after
  that applies the change of each newer committed Delta version, in order. That is what Delta's
  own streaming source does (a snapshot, then versions).
- A version's change: with change data feed on (``delta.enableChangeDataFeed``), its CDF rows;
  without it, the rows of the files the version added (append-only tables only; a version that
  removes data is refused, an OPTIMIZE is skipped).
- Every change is written as an ``EpochWriter`` epoch whose batch id names the Delta version:
  ``2 * version`` for the version's deletes, ``2 * version + 1`` for its upserts (or appends).
  A version that only inserts, updates or only deletes is one epoch; one that both deletes and
  upserts (a MERGE with a delete clause, an overwrite) is two, its deletes first: a snapview read
  between the two sees the deletes without the upserts.
- Progress is the snapview job's own record: the batch id of its newest committed epoch
  (``ingested()``), read at the start of every run. There is no side file to lose or to get out
  of step: the epoch that writes a version's rows is the record that it was written. A run that
  dies before an epoch commits leaves nothing visible and the next run writes that version again
  under the same batch id (the writer rolls the dead attempt back); a run that dies after the
  commit finds the version recorded and goes on with the next one.

Run it on a schedule (or in a loop) to follow the Delta table. Each version's change passes
through the driver's memory as Arrow; the Delta log must still hold every version after the last
one ingested (Delta's log retention), as for Delta's own streaming source.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

try:
    from scripts.examples.common import local_stack
except ImportError:  # run as a script
    from common import local_stack

UPSERTS = ("insert", "update_postimage")
DELETES_CDF = ("delete", "update_preimage")
DELETES, UPSERTS_PART = 0, 1  # a version's two parts, in the order they are applied


@dataclass(frozen=True)
class Change:
    """One Delta version's change: rows to delete (by key) and rows to upsert or append."""

    version: int
    deletes: pa.Table
    upserts: pa.Table


def batch_id(version: int, part: int) -> int:
    """The sink batch id of ``part`` (DELETES or UPSERTS_PART) of Delta ``version``."""
    return 2 * version + part


def _bid(info) -> int:
    # EpochWriter names a keyed one-off load's batch "dedup:<key>" (``_write`` passes the id)
    return int(info.batch.rpartition(":")[2])


def ingested(client, job: str) -> tuple[int | None, int | None]:
    """(the batch id of ``job``'s newest committed epoch, or None if it never committed one: where
    the next run resumes; the batch id of its newest epoch in any state, or None: what a dead run
    was writing). Read from the coordinator's epoch records (see ``batch_id``)."""
    from kvstore.errors import NotFound

    try:
        info = client.jobs.get_epoch(job, 0)
    except NotFound:
        return None, None
    newest = _bid(info)
    while not info.committed:  # the newest may be open (a run in flight or dead) or aborted
        if info.epoch <= 1:
            return None, newest
        info = client.jobs.get_epoch(job, info.epoch - 1)
    return _bid(info), newest


def _empty(dt) -> pa.Table:
    return pa.table(dt.to_pyarrow_dataset().schema.empty_table())


def snapshot(dt) -> Change:
    """The whole table at ``dt``'s version, as upserts (into a table that starts empty)."""
    return Change(dt.version(), _empty(dt), pa.table(dt.to_pyarrow_table()))


def _cdf_change(dt, version: int, key: list[str]) -> Change:
    rows = pa.table(dt.load_cdf(starting_version=version, ending_version=version).read_all())
    kind = rows["_change_type"].cast(pa.string())  # delta-rs gives string_view
    schema = _empty(dt).schema  # the table's columns, as its snapshots type them
    keep = rows.select(schema.names).cast(schema)
    ups = keep.filter(pc.is_in(kind, pa.array(UPSERTS)))
    # An update's pre-image is a delete too: its key goes unless the post-image keeps it (an
    # update of a key column moves the row), and an append-only table refuses it.
    dels = keep.filter(pc.is_in(kind, pa.array(DELETES_CDF)))
    if key and dels.num_rows and ups.num_rows:
        # An update, or an overwrite (every row deleted, the new ones inserted, some under the
        # same key): a key's net change is its upsert, so it is not deleted first.
        upserted = set(zip(*(ups[k].to_pylist() for k in key), strict=True))
        mask = [t not in upserted for t in zip(*(dels[k].to_pylist() for k in key), strict=True)]
        dels = dels.filter(pa.array(mask, pa.bool_()))
    return Change(version, dels, ups)


def _added_files_change(path: str, version: int) -> Change:
    from deltalake import DeltaTable

    before = DeltaTable(path, version=version - 1).to_pyarrow_dataset()
    after = DeltaTable(path, version=version).to_pyarrow_dataset()
    old = {f.path for f in before.get_fragments()}
    new = [f for f in after.get_fragments() if f.path not in old]
    kept = {f.path for f in after.get_fragments()}
    empty = pa.table(after.schema.empty_table())
    if not old <= kept:
        ops = [h for h in DeltaTable(path).history() if h.get("version") == version]
        op = ops[0].get("operation", "") if ops else ""
        if op == "OPTIMIZE":  # files rewritten, no data changed (dataChange false)
            return Change(version, empty, empty)
        raise ValueError(
            f"Delta table {path!r} version {version} ({op}) removed data; without change data "
            "feed only appends can be ingested: set delta.enableChangeDataFeed=true on the table "
            "and ingest again from a snapshot (a new job or table)"
        )
    rows = ds.FileSystemDataset(new, after.schema, after.format, after.filesystem).to_table()
    return Change(version, empty, rows)


def changes(path: str, after_version: int, key: list[str]):
    """The change of every committed Delta version after ``after_version``, oldest first."""
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    cdf = dt.metadata().configuration.get("delta.enableChangeDataFeed") == "true"
    for v in range(after_version + 1, dt.version() + 1):
        yield _cdf_change(dt, v, key) if cdf else _added_files_change(path, v)


def _write(writer, spark, rows: pa.Table, bid: int) -> None:
    # The one call into the sink: the Delta version, as a dedup key, makes the epoch's replay
    # detection ours (a batch already committed is skipped, a dead attempt at it redone). A
    # one-off load without a key would be a new epoch every time (EpochWriter.load).
    writer.load(spark.createDataFrame(rows), dedup_key=bid)


def ingest(spark, address: str, path: str, table: str, job: str | None = None, out=print) -> int:
    """Apply to snapview ``table`` every Delta version of ``path`` not yet applied: the snapshot
    at the current version on the first run, then each newer version's change (module doc).
    Exactly once across crashes and re-runs: progress is the job's newest committed epoch.
    Returns the number of epochs written."""
    import coordinator
    from spark_sink import EpochWriter

    job = job or table
    with coordinator.connect(address) as c:
        info = c.describe_table(table, refresh=True)
        key = list(info.primary_key)
        append = info.hidden_row_id  # an append-only snapview table: appends, never deletes
        done, newest = ingested(c, job)
    writers = {
        mode: EpochWriter(address, table=table, mode=mode, job=job)
        for mode in (("append",) if append else ("upsert", "delete"))
    }
    if done is None:
        from deltalake import DeltaTable

        # A dead first run may have committed its snapshot's primary unseen (the server died
        # before recording it): take the snapshot at the version that run chose, so its epoch
        # is redone or found committed, never a second snapshot of another version upserted on it.
        at = None if newest is None else newest // 2
        first = snapshot(DeltaTable(path, version=at))
        todo = itertools.chain([first], changes(path, first.version, key))
        done = -1
    else:
        todo = changes(path, done // 2 - (done % 2 == 0), key)
    written = 0
    for ch in todo:
        parts = ((DELETES, ch.deletes, "delete"), (UPSERTS_PART, ch.upserts, "upsert"))
        for part, rows, mode in parts:
            bid = batch_id(ch.version, part)
            if bid <= done or rows.num_rows == 0:
                continue  # already applied (a re-run), or nothing to write
            if append:
                if part == DELETES:
                    raise ValueError(
                        f"Delta version {ch.version} of {path!r} deletes or updates "
                        f"{rows.num_rows} rows; append-only table {table!r} cannot apply that"
                    )
                mode = "append"
            _write(writers[mode], spark, rows, bid)
            written += 1
            out(f"{table}: Delta version {ch.version}: {mode} {rows.num_rows} rows (batch {bid})")
    return written


def _demo(spark, address: str, root: str, out=print) -> bool:
    """A Delta table with change data feed, ingested after each of its versions."""
    from deltalake import DeltaTable, write_deltalake

    import coordinator

    path = f"{root}/accounts_delta"
    with coordinator.connect(address) as c:
        c.create_table("accounts", "id BIGINT, owner STRING, balance BIGINT", primary_key=["id"])
        cdf = {"delta.enableChangeDataFeed": "true"}
        write_deltalake(
            path,
            pa.table({"id": [1, 2, 3], "owner": ["ann", "bob", "cy"], "balance": [10, 20, 30]}),
            configuration=cdf,
        )
        ingest(spark, address, path, "accounts", out=out)
        write_deltalake(
            path, pa.table({"id": [4], "owner": ["dee"], "balance": [40]}), mode="append"
        )
        (
            DeltaTable(path)
            .merge(
                pa.table({"id": [2, 5], "owner": ["bob", "eve"], "balance": [25, 50]}),
                "s.id = t.id",
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        DeltaTable(path).delete("id = 1")
        ingest(spark, address, path, "accounts", out=out)
        out(f"a second run wrote {ingest(spark, address, path, 'accounts', out=out)} epochs")
        delta = sorted(pa.table(DeltaTable(path).to_pyarrow_table()).to_pylist(), key=str)
        mine = sorted(c.read("accounts").to_pylist(), key=str)
        out(f"accounts in snapview {'equals' if mine == delta else 'DIFFERS from'} Delta: {mine}")
        return mine == delta


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("address", nargs="?", help="snapview server HOST:PORT (none: the demo)")
    p.add_argument("delta_path", nargs="?")
    p.add_argument("table", nargs="?", help="the snapview table to write (it must exist)")
    p.add_argument("--job", help="the sink job's name (default: the table's)")
    a = p.parse_args(argv)
    if a.address is None:
        import tempfile

        with tempfile.TemporaryDirectory() as root, local_stack() as (spark, address):
            return 0 if _demo(spark, address, root) else 1
    if a.table is None:
        p.error("give HOST:PORT DELTA_PATH TABLE, or nothing for the demo")
    from snapview.local_spark import local_session

    spark = local_session()
    try:
        ingest(spark, a.address, a.delta_path, a.table, a.job)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
