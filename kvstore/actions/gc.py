"""gc: drop versions that no reader at or above the safepoint can need, a bounded step at a time.

A pass over the store at one safepoint is a sequence of steps. Each step *plans* on a read
transaction (``plan_gc_step``: which records, among the next ``budget`` it examines, may go) and
then *deletes* them in one short write (``delete_gc_records``), so the writer is held only for
the deletes, never for the walk. Planning outside the writer is safe because everything it
decides about is history at or below the safepoint, which no later commit changes in a way that
would save a doomed record: a commit lands above every start_ts the store accepted, and the
store refuses start_ts at or below the safepoint, so a record doomed when planned is doomed
when deleted (a late commit below the safepoint could only add a newer version, which dooms
more, never less). The cursor between steps is plain data, so a pass resumes where the last
step stopped, in a later step or after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import parse_versioned_key, table_prefix, versioned_key
from kvstore.mvcc.records import WriteKind
from kvstore.storage import Reader

# The phases of a pass, in order: the write CF (versions and their long values), then the
# change index, then done.
WRITE, CHANGES, DONE = "write", "changes", "done"


@dataclass(frozen=True)
class GcCursor:
    """Where the next step of a pass starts. ``settled_key``: the user key whose newest Put or
    Delete at or below the safepoint was already met (when the step stopped inside its
    versions), so that the records after it go."""

    phase: str = WRITE
    key: bytes = b""
    settled_key: bytes | None = None

    @property
    def done(self) -> bool:
        return self.phase == DONE


@dataclass(frozen=True)
class GcStep:
    """One planned step: the (cf, key) records to delete, how many of them are versions (write
    records), how many records were examined, and where the next step starts."""

    doomed: list[tuple[str, bytes]]
    versions: int
    examined: int
    next: GcCursor


def plan_gc_step(reader: Reader, safepoint: int, cursor: GcCursor, budget: int) -> GcStep:
    """Plan the next step of a pass at ``safepoint``: examine at most ``budget`` records from
    ``cursor`` (at least one) and return those that may go.

    Invariant (of the whole pass): a read at any ts >= safepoint returns what it returned
    before. For every key, every version above the safepoint stays, and so does the newest Put at
    or below it; when the newest record at or below it is a Delete, that Delete and everything
    older go; Rollback and Lock records at or below it go; change-index entries at or below it
    go (change scans must start at or above the safepoint, and the store refuses older ones)."""
    budget = max(1, budget)
    if cursor.phase == WRITE:
        return _plan_writes(reader, safepoint, cursor, budget)
    if cursor.phase == CHANGES:
        return _plan_changes(reader, safepoint, cursor, budget)
    return GcStep([], 0, 0, cursor)


def _plan_writes(reader: Reader, safepoint: int, cursor: GcCursor, budget: int) -> GcStep:
    doomed: list[tuple[str, bytes]] = []
    versions = examined = 0
    cur_key = cursor.settled_key
    settled = cur_key is not None
    for k, v in reader.items_from("write", cursor.key):
        uk, commit_ts = parse_versioned_key(k)
        if uk != cur_key:
            if examined >= budget:  # stop between user keys when possible
                return GcStep(doomed, versions, examined, GcCursor(WRITE, k, None))
            cur_key, settled = uk, False
        elif examined >= 4 * budget:  # a key with very many versions: stop inside it
            return GcStep(doomed, versions, examined, GcCursor(WRITE, k, uk if settled else None))
        examined += 1
        if commit_ts > safepoint:
            continue
        w = reader.parse_write(k, v)
        keep = not settled and w.kind is WriteKind.PUT
        if not settled and w.kind in (WriteKind.PUT, WriteKind.DELETE):
            settled = True
        if keep:
            continue
        doomed.append(("write", k))
        if w.kind is WriteKind.PUT and w.short_value is None:
            doomed.append(("data", versioned_key(uk, w.start_ts)))
        versions += 1
    return GcStep(doomed, versions, examined, GcCursor(CHANGES, b"", None))


def _plan_changes(reader: Reader, safepoint: int, cursor: GcCursor, budget: int) -> GcStep:
    """Change-index keys are table id (4) + commit_ts (8) + user key: each table's entries at or
    below the safepoint are one run at the start of its prefix, so the walk skips from the
    first entry above the safepoint to the next table."""
    doomed: list[tuple[str, bytes]] = []
    examined = 0
    key = cursor.key
    while True:
        jumped = False
        for k in reader.keys_from("changes", key):
            if examined >= budget:
                return GcStep(doomed, 0, examined, GcCursor(CHANGES, k, None))
            examined += 1
            if int.from_bytes(k[4:12], "big") <= safepoint:
                doomed.append(("changes", k))
                continue
            key = table_prefix(int.from_bytes(k[:4], "big") + 1)
            jumped = True
            break
        if not jumped:
            return GcStep(doomed, 0, examined, GcCursor(DONE, b"", None))


def delete_gc_records(ctx: WriteContext, doomed: list[tuple[str, bytes]]) -> None:
    """Delete what ``plan_gc_step`` chose, in one write; a record already gone is passed over
    (a drop of its table, or an earlier attempt of the same step)."""
    by_cf: dict[str, list[bytes]] = {}
    for cf, k in doomed:
        by_cf.setdefault(cf, []).append(k)
    for cf, keys in by_cf.items():
        ctx.buf.delete_many(cf, sorted(keys))
