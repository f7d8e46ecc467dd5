"""Revisions on the client side: the ``Revision`` record, a correction set written from a
``pyarrow.Table``, and waiting for a revision to reach every view downstream.

``Client.revise``, ``Client.rebuild``, ``Client.revisions`` and ``Client.wait_revised`` are the
public entry points; docs/revising.md explains what each guarantees.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coordinator.errors import (
    RevisionNotReached,
    RevisionOutcomeUnknown,
    not_correctable,
    not_revisable,
)
from coordinator.jobs import EpochMetadata
from coordinator.times import with_wall
from kvstore.errors import InvalidArgument, SchemaMismatch, SnapviewError
from kvstore.limits import split_mutations
from kvstore.mvcc.records import LockOp, Mutation
from kvstore.table_info import TableInfo
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb

if TYPE_CHECKING:
    import pyarrow as pa

    from coordinator.client import Client
    from coordinator.epoch_attempt import EpochAttempt

CORRECTION_MODES = ("upsert", "delete")
PREWRITE_CHUNK = 4096
DEFAULT_LOCK_TTL_MS = 20_000


@dataclass(frozen=True)
class Revision:
    """One revision as the coordinator records it (``snapview revisions`` lists them).

    ``barrier`` is the first barrier issued at or above ``commit_ts``: every consistent read at
    that barrier or later sees the revision in the table and in every view in ``views`` (once
    each has the barrier; ``Client.wait_revised`` waits for that). 0 while no such barrier was
    issued, or when the revision is not done."""

    id: int
    table: str
    kind: str  # rollback | corrections | rebuild
    state: str  # running | done | aborted | dry_run
    who: str
    started_wall_ms: int
    ended_wall_ms: int
    target_ts: int
    target_barrier: int
    start_ts: int
    commit_ts: int
    barrier: int
    restored: int
    removed: int
    mode: str
    job: str
    views: tuple[str, ...]
    error: str
    key: str = ""  # the revision key it was run under ("" if none)

    @property
    def rows(self) -> int:
        """Rows the revision changed (restored or upserted, plus removed)."""
        return self.restored + self.removed

    @property
    def done(self) -> bool:
        return self.state == "done"

    @classmethod
    def from_pb(cls, m: cpb.Revision) -> Revision:
        return cls(
            id=m.id,
            table=m.table,
            kind=m.kind,
            state=m.state,
            who=m.who,
            started_wall_ms=m.started_wall_ms,
            ended_wall_ms=m.ended_wall_ms,
            target_ts=m.target_ts,
            target_barrier=m.target_barrier,
            start_ts=m.start_ts,
            commit_ts=m.commit_ts,
            barrier=m.barrier,
            restored=m.restored,
            removed=m.removed,
            mode=m.mode,
            job=m.job,
            views=tuple(m.views),
            error=m.error,
            key=m.key,
        )

    def __str__(self) -> str:
        head = f"revision {self.id}" if self.id else "dry run"
        what = {
            "rollback": f"{self.table} back to {with_wall(self.target_ts)}",
            "corrections": f"corrections ({self.mode}) of {self.table}",
            "rebuild": f"rebuild of {self.table}",
        }.get(self.kind, f"{self.kind} of {self.table}")
        counts = f"{self.restored} restored, {self.removed} removed"
        if self.kind == "corrections":
            counts = f"{self.rows} rows {'upserted' if self.mode == 'upsert' else 'deleted'}"
        if self.kind == "rebuild":
            counts = f"{self.restored} rows rewritten (the view's and its state's)"
        out = f"{head}: {what}: {self.state}, {counts}"
        if self.commit_ts:
            out += f", committed at {with_wall(self.commit_ts)}"
        if self.error:
            out += f" ({self.error})"
        return out


def new_revision_key() -> str:
    """A fresh revision key: what ``Client.revise`` uses for one call and all its retries."""
    import secrets

    return secrets.token_hex(16)


def call_revise(client: Client, req: cpb.ReviseRequest, timeout_s: float) -> cpb.Revision:
    """Send ``req`` (a Revise); with a revision key, ask again with the same key while the
    answer is UNAVAILABLE or lost (DEADLINE_EXCEEDED), for up to the client's retry budget:
    the server answers a repeated key with the revision it ran, never a second one. Without a
    key, one attempt. RevisionOutcomeUnknown, naming the key and how to look it up, when the
    budget runs out without an answer."""
    call = client._rpc.once
    if not req.key or req.dry_run:
        return call(client._stub.Revise, req, timeout_s)
    p = client.retry
    deadline = time.monotonic() + p.max_elapsed_s
    wait = p.initial_backoff_s
    while True:
        try:
            return call(client._stub.Revise, req, timeout_s)
        except SnapviewError as e:
            if e.code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                raise
            if time.monotonic() + wait >= deadline:
                if isinstance(e, RevisionOutcomeUnknown):
                    raise
                raise RevisionOutcomeUnknown(
                    f"table {req.table!r}: the revision with key {req.key} has an unknown "
                    f"outcome ({type(e).__name__}: {e}); it is applied wholly or not at all. "
                    f"Run it again with the same key (`snapview revise {req.table} ... --key "
                    f"{req.key}`) to get it, or see `snapview revisions --table {req.table}`"
                ) from e
        time.sleep(wait)
        wait = min(wait * 2, p.max_backoff_s)


def check_mode(table: str, mode: str) -> None:
    if mode not in CORRECTION_MODES:
        raise InvalidArgument(f"table {table!r}: mode {mode!r} is not one of {CORRECTION_MODES}")


def correctable_table(client: Client, table: str, mode: str) -> TableInfo:
    """``table``'s definition, read afresh, if a correction set in ``mode`` may go into it:
    the client's early checks before any row is read or encoded (the server refuses the same
    when the set begins). A view or state table, or an append-only one, is refused."""
    check_mode(table, mode)
    info = client.describe_table(table, refresh=True)
    if info.kind != "root":
        raise not_revisable(table, info.kind)
    if info.hidden_row_id:
        raise not_correctable(table)
    return info


def correction_columns(info: TableInfo, columns: list[str], mode: str) -> list[str]:
    """The columns a correction set in ``mode`` needs (an upsert every column of the table, a
    delete its key columns). SchemaMismatch names a column the table lacks, or one missing."""
    table = info.name
    need = (
        [c.name for c in info.table_schema.visible_columns]
        if mode == "upsert"
        else list(info.primary_key)
    )
    unknown = [c for c in columns if c not in info.table_schema.index]
    if unknown:
        raise SchemaMismatch(f"table {table!r} has no column {unknown[0]!r} (in the corrections)")
    missing = [c for c in need if c not in columns]
    if missing:
        raise SchemaMismatch(
            f"table {table!r}: the corrections have no column {missing[0]!r} ({mode} needs "
            f"{', '.join(need)})"
        )
    return need


def arrow_mutations(info: TableInfo, data: pa.Table, mode: str) -> list[Mutation]:
    """The mutations a correction set ``data`` makes of table ``info``, in key order. One row
    per key (SchemaMismatch names a column missing or the key given twice)."""
    table = info.name
    need = correction_columns(info, data.column_names, mode)
    muts: dict[bytes, Mutation] = {}
    for row in data.select(need).to_pylist():
        key = info.key_codec.encode(row)
        if key in muts:
            shown = {c: row[c] for c in info.primary_key}
            raise SchemaMismatch(f"table {table!r}: the corrections name key {shown} twice")
        if mode == "upsert":
            muts[key] = (LockOp.PUT, key, info.row_codec.encode(row))
        else:
            muts[key] = (LockOp.DELETE, key, b"")
    return [muts[k] for k in sorted(muts)]


def count_changes(client: Client, muts: list[Mutation], at: int) -> tuple[int, int]:
    """(restored, removed): how many of ``muts`` would change the table as of ``at``. The
    current rows are read by key, many keys per request (ScanRanges)."""
    ranges = [(key, key + b"\x00") for _, key, _ in muts]
    old: dict[bytes, bytes] = {}
    for keys, values in client.with_lock_wait(lambda: list(client.store.scan_ranges(ranges, at))):
        old.update(zip(keys, values, strict=True))
    restored = sum(op is LockOp.PUT and old.get(key) != value for op, key, value in muts)
    removed = sum(op is LockOp.DELETE and key in old for op, key, _ in muts)
    return restored, removed


def default_who() -> str:
    """``user@host`` of this process: who a revision is recorded as by default."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def dry_run_record(
    client: Client, table: str, mode: str, who: str, restored: int, removed: int
) -> Revision:
    """What a correction set would do, as a record that was never stored (id 0)."""
    now = int(time.time() * 1000)
    views = tuple(client.downstream(table))
    return Revision(
        0,
        table,
        "corrections",
        "dry_run",
        who,
        now,
        now,
        0,
        0,
        0,
        0,
        0,
        restored,
        removed,
        mode,
        "",
        views,
        "",
    )


def begin_corrections(
    client: Client, table: str, mode: str, who: str
) -> tuple[Revision, EpochAttempt]:
    """Record a correction set of ``table`` and open its epoch (``JobClient.begin_corrections``):
    (the revision, the attempt to prewrite its rows into and commit, under
    ``attempt.running()``, which aborts it on any failure)."""
    from coordinator.epoch_attempt import EpochAttempt

    begun = client.jobs.begin_corrections(table, mode, who, DEFAULT_LOCK_TTL_MS)
    return begun.revision, EpochAttempt(client, begun.epoch, DEFAULT_LOCK_TTL_MS)


def write_arrow_corrections(
    client: Client, table: str, data: pa.Table, mode: str, who: str
) -> Revision:
    """Write correction set ``data`` as one transaction (the epoch of job ``revision/<id>``)
    and return its record. On any failure the epoch is aborted: nothing of it is visible."""
    muts = arrow_mutations(correctable_table(client, table, mode), data, mode)
    rev, attempt = begin_corrections(client, table, mode, who)
    with attempt.running():
        for run in split_mutations(muts, max_mutations=PREWRITE_CHUNK):
            client.prewrite(run, attempt.info.primary_key, attempt.start_ts, attempt.ttl_ms)
        attempt.commit(EpochMetadata(fields={"rows": len(muts), "revision": rev.id}))
    return client.revision(rev.id)


def wait_revised(
    client: Client,
    revision: Revision | int,
    timeout_s: float = 300.0,
    progress: Callable[[Revision, dict[str, tuple[int, str]]], None] | None = None,
    poll_s: float = 0.2,
) -> int:
    """Wait until the revision is done, its barrier issued, and every view downstream of its
    table has that barrier; return the barrier. ``progress(rev, views)`` is called at every
    poll with each view's newest barrier and its job's state. Raises RevisionNotReached after
    ``timeout_s`` naming the views not there yet and their jobs' states, and SnapviewError if
    the revision was aborted."""
    rid = revision if isinstance(revision, int) else revision.id
    deadline = time.monotonic() + timeout_s
    while True:
        rev = client.revision(rid)
        if rev.state == "aborted":
            raise SnapviewError(f"revision {rid} was aborted: {rev.error}")
        # A rebuild waits for the rebuilt view itself too: its job may not be running.
        waited = (rev.table, *rev.views) if rev.kind == "rebuild" else rev.views
        views: dict[str, tuple[int, str]] = {v: (0, "not registered") for v in waited}
        for job in client.jobs.list_jobs():
            if job.sink in views:
                views[job.sink] = (job.last_committed, str(job.state))
        if progress is not None:
            progress(rev, views)
        # A view dropped since (no job any more) shows nothing: it is not waited for.
        there = [b >= rev.barrier for b, state in views.values() if state != "not registered"]
        if rev.done and rev.barrier and all(there):
            return rev.barrier
        if time.monotonic() >= deadline:
            behind = [
                f"{v} (at {b}, job {state})"
                for v, (b, state) in views.items()
                if not rev.barrier or b < rev.barrier
            ]
            where = f"barrier {rev.barrier}" if rev.barrier else "its barrier"
            raise RevisionNotReached(
                f"revision {rid} of {rev.table!r} ({rev.state}): after {timeout_s:g}s these "
                f"views have not reached {where}: {', '.join(behind) or 'none'}"
            )
        time.sleep(poll_s)
