"""What goes with a dropped table: its writer jobs' epochs and its view versions.

A drop (``LocalStore.drop_table``, with the registry's ``drop_guard``) is one LMDB write. Besides
the table's own records (``kvstore.catalog.drop_table_action``), that write takes, for each
dropped table (downstream views and state tables included):

- its view versions (``vbar/<table>``, ``vbar-newest/<table>``): a view of the same name built
  later has none until its own job commits one;
- each job that wrote it (the registered writer, or, for a view whose job was unregistered
  first, the job its newest view version names, if no longer registered): its registration,
  its epoch records (``epoch/<job>``), its progress (``job/<job>``) and its epoch primaries in
  the system table. An epoch still open is rolled back through its primary first, so its rows
  can never commit (they go with the table anyway);
- a marker ``jobdrop/<job>`` naming the table, so the job's later epoch calls (a job still
  running: commit, heartbeat, open) are refused with ``JobDropped`` naming the table, never
  deduplicated against, or numbered after, the dropped table's epochs. Registering the job again
  (a new view or sink under the same name) deletes the marker: the job starts anew, at epoch 1.

The job's GC holds are derived from its registration and epochs, so they go in the same write.
"""

from __future__ import annotations

import json
import time

from coordinator.errors import JobDropped
from coordinator.server.meta import (
    PREWRITE,
    EpochRecord,
    epoch_prefix,
    epoch_primary_prefix,
    job_dropped_key,
    job_record_key,
    job_state_key,
    view_newest_key,
    view_version_key,
    view_version_prefix,
)
from kvstore.actions.resolve_locks import settle_txn
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import changes_key, parse_versioned_key, txn_lock_key
from kvstore.mvcc.records import Lock
from kvstore.storage import Reader


def refuse_if_dropped(reader: Reader, job: str, epoch: int = 0) -> None:
    """Raise JobDropped if a drop of ``job``'s table unregistered it (and it was not registered
    again since)."""
    raw = reader.get("meta", job_dropped_key(job))
    if raw is None:
        return
    d = json.loads(raw)
    what = f"job {job!r}" + (f" epoch {epoch}" if epoch else "")
    raise JobDropped(
        f"{what}: the job's table {d['table']!r} was dropped, which unregistered the job and "
        "deleted its epochs; its epochs are refused. Register the job again to start it anew "
        "(from epoch 1)"
    )


def forget_job(ctx: WriteContext, job: str, table: str, table_id: int) -> None:
    """Inside a drop of ``table``: everything of writer ``job`` goes (module docstring), and
    the ``jobdrop/`` marker names the table."""
    for k, v in list(ctx.reader.iter_prefix("meta", epoch_prefix(job))):
        rec = EpochRecord.from_json(v)
        if rec.state == PREWRITE:
            settle_txn(ctx, rec.primary_key, rec.start_ts)
        ctx.buf.delete("meta", k)
    ctx.buf.delete("meta", job_state_key(job))
    prefix = epoch_primary_prefix(job)
    for k, raw in list(ctx.reader.iter_prefix("lock", prefix)):  # none once settled; to be sure
        ctx.buf.delete("txn_locks", txn_lock_key(Lock.start_ts_of(raw), k))
        ctx.buf.delete("lock", k)
    for cf in ("write", "data"):
        for k, _ in list(ctx.reader.iter_prefix(cf, prefix)):
            ctx.buf.delete(cf, k)
            if cf == "write":
                ctx.buf.delete("changes", changes_key(*parse_versioned_key(k)))
    marker = {"table": table, "table_id": table_id, "wall_ms": int(time.time() * 1000)}
    ctx.buf.put("meta", job_dropped_key(job), json.dumps(marker).encode())


def forget_view_versions(ctx: WriteContext, table: str) -> str:
    """Inside a drop of ``table``: delete its view versions; returns the job its newest one
    names ("" if none)."""
    job = ""
    raw = ctx.reader.get("meta", view_newest_key(table))
    newest = view_version_key(table, int(raw)) if raw is not None else b""
    for k, v in list(ctx.reader.iter_prefix("meta", view_version_prefix(table))):
        if k == newest:
            job = json.loads(v).get("job", "")
        ctx.buf.delete("meta", k)
    ctx.buf.delete("meta", view_newest_key(table))
    return job


def registered(reader: Reader, job: str) -> bool:
    return reader.get("meta", job_record_key(job)) is not None
