"""GC passes over a store, driven a bounded step at a time (the action is ``kvstore.actions.gc``).

A step plans on read transactions (``plan_gc_step``, in pieces with the GIL handed over between
them) and deletes what it chose in one short write through the group committer
(``delete_gc_records``), so the writer is held only for the deletes. A pass is steps from a
cursor until the cursor is done. ``LocalStore.gc_step`` and ``LocalStore.gc`` are these over the
store's environment at its current safepoint; the coordinator's collector (``coordinator.server.gc``)
calls ``LocalStore.gc_step`` with a cursor it keeps. Not an action: it opens read transactions and
runs writes, which the engine-free actions never do (tests/unit/test_engine_free.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kvstore import actions
from kvstore.actions.gc import GcCursor, GcStep
from kvstore.group_commit import GroupCommitter
from kvstore.storage import Storage

# Records a GC step examines: a step's delete write stays well under a millisecond or two.
GC_STEP_RECORDS = 2048
GC_PLAN_CHUNK = 256  # records planned between two GIL hand-overs (well under a millisecond)


def gc_step(
    storage: Storage,
    committer: GroupCommitter,
    safepoint: int,
    cursor: GcCursor,
    budget: int = GC_STEP_RECORDS,
) -> GcStep:
    """One bounded step of a GC pass at ``safepoint``: plan on a read transaction (at most about
    ``budget`` records examined), then delete what may go in one short write. Returns the step
    (``next`` is where the following step starts; ``next.done`` ends the pass). The writer is
    held only for the deletes."""
    doomed: list[tuple[str, bytes]] = []
    versions = examined = 0
    while examined < budget and not cursor.done:
        # Planning is pure Python: in pieces of GC_PLAN_CHUNK records, with the GIL handed
        # over between them, so the server's request threads wait at most one piece.
        with storage.read_txn() as r:
            part = actions.plan_gc_step(r, safepoint, cursor, min(GC_PLAN_CHUNK, budget))
        doomed += part.doomed
        versions += part.versions
        examined += part.examined
        cursor = part.next
        time.sleep(0)
    step = GcStep(doomed, versions, examined, cursor)
    if doomed:
        committer.run(lambda ctx: actions.delete_gc_records(ctx, doomed))
    return step


def run_pass(step: Callable[[GcCursor], GcStep]) -> int:
    """A whole pass, from a full pass's start to its end, one ``step`` at a time; returns how
    many versions were removed."""
    cursor, removed = GcCursor(), 0
    while not cursor.done:
        done = step(cursor)
        removed += done.versions
        cursor = done.next
    return removed
