"""The revision record store: one ``RevisionRecord`` per revision in ``meta`` (``rev/<id:8>``,
the audit trail), each not finished yet also under ``rev-open/<id:8>`` (what GC ticks and
restarts read, not the whole history), and the writes that start, update and close them.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from coordinator.server.meta import (
    REVISION_NEXT,
    REVISION_OPEN_PREFIX,
    REVISION_PREFIX,
    EpochRecord,
    revision_key,
    revision_open_key,
)
from kvstore import actions
from kvstore.errors import NotFound
from kvstore.group_commit import WriteContext
from kvstore.storage import Reader
from kvstore.store import LocalStore

ROLLBACK, CORRECTIONS, REBUILD = "rollback", "corrections", "rebuild"
RUNNING, DONE, ABORTED, DRY_RUN = "running", "done", "aborted", "dry_run"
REVISION_JOB_PREFIX = "revision/"


@dataclass(frozen=True)
class RevisionRecord:
    """One revision as recorded in ``meta`` (``rev/<id:8>``); the audit trail."""

    id: int
    table: str
    kind: str  # rollback | corrections | rebuild
    state: str  # running | done | aborted (dry_run: computed, never stored)
    who: str
    started_wall_ms: int
    ended_wall_ms: int = 0
    target_ts: int = 0  # rollback: the table's state it returns to
    target_barrier: int = 0  # rollback: the barrier asked for (0: a ts was)
    start_ts: int = 0
    commit_ts: int = 0
    restored: int = 0  # rows given their old value back (rollback) or upserted (corrections)
    removed: int = 0  # rows deleted
    mode: str = ""  # corrections: upsert | delete
    job: str = ""  # corrections: the epoch's job; rebuild: the view's job
    views: tuple[str, ...] = field(default_factory=tuple)  # downstream, upstream first
    error: str = ""
    barrier: int = 0  # rebuild: the barrier (epoch) whose version of the view recomputed it
    key: str = ""  # rollback: the client's revision key ("" if none)

    @property
    def rows(self) -> int:
        return self.restored + self.removed

    def to_json(self) -> bytes:
        return json.dumps({**asdict(self), "views": list(self.views)}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> RevisionRecord:
        d = json.loads(raw)
        return cls(**{**d, "views": tuple(d.get("views", ()))})


def revision_job(rid: int) -> str:
    return f"{REVISION_JOB_PREFIX}{rid}"


def now_ms() -> int:
    return int(time.time() * 1000)


class RevisionRecords:
    """The revisions' records in ``meta``: read, started, updated, marked DONE and closed."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store

    @staticmethod
    def load(reader: Reader, rid: int) -> RevisionRecord | None:
        raw = reader.get("meta", revision_key(rid))
        return None if raw is None else RevisionRecord.from_json(raw)

    @staticmethod
    def save(ctx: WriteContext, rec: RevisionRecord) -> None:
        ctx.buf.put("meta", revision_key(rec.id), rec.to_json())

    @staticmethod
    def finish(ctx: WriteContext, rid: int) -> None:
        ctx.buf.delete("meta", revision_open_key(rid))

    def get_raw(self, rid: int) -> RevisionRecord:
        with self.store.storage.read_txn() as r:
            rec = self.load(r, rid)
        if rec is None:
            raise NotFound(f"revision {rid} does not exist")
        return rec

    def open_records(self) -> list[RevisionRecord]:
        """The revisions not finished yet (``rev-open/``): running, or a rollback committed whose
        secondaries may be left. GC ticks and restarts read these, not the whole history."""
        with self.store.storage.read_txn() as r:
            keys = [k for k, _ in r.iter_prefix("meta", REVISION_OPEN_PREFIX)]
            recs = [
                self.load(r, int.from_bytes(k[len(REVISION_OPEN_PREFIX) :], "big")) for k in keys
            ]
        return [x for x in recs if x is not None]

    def stored(self) -> list[RevisionRecord]:
        """Every record as stored, newest first: one read, no settling (for the metrics)."""
        with self.store.storage.read_txn() as r:
            recs = [RevisionRecord.from_json(v) for _, v in r.iter_prefix("meta", REVISION_PREFIX)]
        return recs[::-1]

    def new_record(self, ctx: WriteContext, **fields: Any) -> RevisionRecord:
        raw = ctx.reader.get("meta", REVISION_NEXT)
        rid = int(raw) if raw else 1
        ctx.buf.put("meta", REVISION_NEXT, str(rid + 1).encode())
        rec = RevisionRecord(id=rid, state=RUNNING, started_wall_ms=now_ms(), **fields)
        self.save(ctx, rec)
        ctx.buf.put("meta", revision_open_key(rid), b"")
        return rec

    def update(self, rec: RevisionRecord, **fields: Any) -> RevisionRecord:
        new = replace(rec, **fields)
        self.store.run_write(lambda ctx: self.save(ctx, new))
        return new

    def close(
        self, rec: RevisionRecord, table_id: int | None, state: str, error: str, commit_ts: int = 0
    ) -> None:
        def act(ctx: WriteContext) -> None:
            now = self.load(ctx.reader, rec.id)
            if now is not None and now.state == RUNNING:
                closed = replace(now, state=state, error=error[:2000], ended_wall_ms=now_ms())
                self.save(ctx, replace(closed, commit_ts=commit_ts) if commit_ts else closed)
            if table_id is not None:
                actions.clear_fence(ctx, table_id)
            actions.clear_fences_of(ctx, rec.id)  # its table's id may be gone (dropped)
            self.finish(ctx, rec.id)

        self.store.run_write(act)

    def save_done(
        self,
        ctx: WriteContext,
        rev: RevisionRecord,
        rec: EpochRecord,
        restored: int,
        removed: int = 0,
        barrier: int = 0,
    ) -> None:
        """Record ``rev`` DONE by the epoch ``rec`` committing it (in that commit's write); its
        secondaries are the epoch's, which the epoch protocol resolves."""
        done = replace(
            rev,
            state=DONE,
            start_ts=rec.start_ts,
            commit_ts=rec.commit_ts,
            restored=restored,
            removed=removed,
            barrier=barrier,
            ended_wall_ms=now_ms(),
        )
        self.save(ctx, done)
        self.finish(ctx, rev.id)


def epoch_count(value: object) -> int:
    """A row count from an epoch's metadata; anything but a non-negative integer counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def epoch_metadata(rec: EpochRecord) -> dict:
    try:
        d = json.loads(rec.metadata) if rec.metadata else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}
