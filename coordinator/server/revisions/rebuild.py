"""Rebuild: a view recomputed from its sources at its next barrier.

The view's job finds the request when it opens its next epoch (``pending``), recomputes the view
there and names the request in the epoch's metadata; that commit marks the record DONE
(``on_epoch_commit``). A rebuild still pending when its view's job is unregistered (the view
dropped) is recorded ABORTED in the same write (``on_job_gone``).
"""

from __future__ import annotations

import threading
from dataclasses import replace

from coordinator.server.meta import EpochRecord, rebuild_key
from coordinator.server.registry import Registry
from coordinator.server.revisions.checks import check_who, downstream
from coordinator.server.revisions.records import (
    ABORTED,
    REBUILD,
    RUNNING,
    RevisionRecord,
    RevisionRecords,
    epoch_count,
    epoch_metadata,
    now_ms,
)
from kvstore.errors import FailedPrecondition
from kvstore.group_commit import WriteContext
from kvstore.store import LocalStore


class Rebuilds:
    """Requests, completes and drops rebuilds of views (see the module docstring)."""

    def __init__(
        self, store: LocalStore, registry: Registry, records: RevisionRecords, mu: threading.Lock
    ) -> None:
        self.store, self.registry, self.records = store, registry, records
        self._mu = mu  # one revision starts at a time (its id)

    def pending(self, job: str) -> int:
        """The revision id of a rebuild requested of ``job``'s view and not yet done (0: none)."""
        with self.store.storage.read_txn() as r:
            raw = r.get("meta", rebuild_key(job))
        return int(raw) if raw else 0

    def request(self, view: str, who: str = "") -> RevisionRecord:
        """Ask ``view``'s job to recompute the view at its next barrier. A rebuild already
        pending for the view is returned instead of a second one."""
        who = check_who(who)
        self.store.catalog.get(view)  # TableNotFound names it
        writer = self.registry.topology().writer_of(view)
        if writer is None or not writer.is_view:
            raise FailedPrecondition(
                f"table {view!r} is not a view maintained by a registered view job; only views "
                "are rebuilt (revise a root table with `snapview revise`)"
            )
        views = downstream(self.registry, view)

        def act(ctx: WriteContext) -> RevisionRecord:
            raw = ctx.reader.get("meta", rebuild_key(writer.job))
            if raw is not None:
                pending = self.records.load(ctx.reader, int(raw))
                if pending is not None and pending.state == RUNNING:
                    return pending
            rec = self.records.new_record(
                ctx, table=view, kind=REBUILD, who=who, job=writer.job, views=views
            )
            ctx.buf.put("meta", rebuild_key(writer.job), str(rec.id).encode())
            return rec

        with self._mu:
            return self.store.run_write(act)

    def on_epoch_commit(self, ctx: WriteContext, rec: EpochRecord) -> None:
        """Inside a view epoch's commit (one LMDB transaction with it): an epoch naming the
        rebuild pending for its job marks that one DONE and clears the request."""
        raw = ctx.reader.get("meta", rebuild_key(rec.job))
        if raw is None or epoch_metadata(rec).get("rebuild") != int(raw):
            return
        rev = self.records.load(ctx.reader, int(raw))
        ctx.buf.delete("meta", rebuild_key(rec.job))
        if rev is not None and rev.state == RUNNING:
            rows = epoch_count(epoch_metadata(rec).get("mutations"))
            self.records.save_done(ctx, rev, rec, restored=rows, barrier=rec.epoch)

    def on_job_gone(self, ctx: WriteContext, job: str) -> None:
        """Inside the write that unregisters ``job`` (its view dropped): a rebuild pending for
        it can never be done; it goes, recorded ABORTED, in the same transaction."""
        raw = ctx.reader.get("meta", rebuild_key(job))
        if raw is None:
            return
        ctx.buf.delete("meta", rebuild_key(job))
        rev = self.records.load(ctx.reader, int(raw))
        if rev is not None and rev.state == RUNNING:
            why = "its view's job was unregistered (the view was dropped) before the rebuild"
            self.records.save(ctx, replace(rev, state=ABORTED, error=why, ended_wall_ms=now_ms()))
            self.records.finish(ctx, rev.id)
