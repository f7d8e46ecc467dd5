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

Two kinds of pass. A **full** pass walks every write record, then deletes the change-index
entries at or below the safepoint. An **incremental** pass (``GcCursor.incremental()``) costs what
changed, not the store's size: history becomes collectable only where a key gets a newer version,
and every committed version has a change-index entry (table id, commit_ts, key), so the pass walks
the index's entries at or below the safepoint (each table's are one run at the start of its
prefix), collects each named key's versions by the same rule as a full pass, and deletes each
entry in the same step as its key's history: an entry is gone only once its key was collected.
What it cannot see: Rollback and Lock records (no entry names them), and a commit decided below
the safepoint whose entry lands after a full pass's index phase deleted the run around it. The
collector runs a full pass now and then for those (``coordinator.server.gc``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import (
    parse_changes_key,
    parse_versioned_key,
    table_id_of,
    table_prefix,
    versioned_key,
)
from kvstore.mvcc.records import Write, WriteKind
from kvstore.storage import Reader

# The phases of a full pass, in order: the write CF (versions and their long values), then the
# change index, then done. An incremental pass has one phase, the changed keys, then done.
WRITE, CHANGES, CHANGED_KEYS, DONE = "write", "changes", "changed_keys", "done"


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

    @classmethod
    def incremental(cls) -> GcCursor:
        """The start of an incremental pass (see the module docstring)."""
        return cls(phase=CHANGED_KEYS)


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
    if cursor.phase == CHANGED_KEYS:
        return _plan_changed_keys(reader, safepoint, cursor, budget)
    return GcStep([], 0, 0, cursor)


class _Doomed:
    """What a step deletes, met key by key, each key's records newest first at or below the
    safepoint: a key's newest Put stays (it settles the key); a newest Delete settles it and
    goes; Rollback and Lock records go; once settled, all goes. The settling Delete is deleted
    only once the step has walked its key to the end (``end_key``): deleted first, it would
    leave the key's older Put to be read at the safepoint until a later step deleted that too.
    A step that stops inside a key keeps that Delete, for a pass that walks the key whole."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes]] = []
        self.versions = 0
        self.settled = False
        self._pending: list[tuple[str, bytes]] = []

    def start_key(self, settled: bool = False) -> None:
        """Begin a key (``settled``: its settling record was met in an earlier step)."""
        self.settled, self._pending = settled, []

    def meet(self, uk: bytes, commit_ts: int, w: Write) -> None:
        """The next record of the key, at or below the safepoint."""
        if not self.settled and w.kind in (WriteKind.PUT, WriteKind.DELETE):
            self.settled = True
            if w.kind is WriteKind.PUT:
                return  # the newest Put stays
            self._pending = [("write", versioned_key(uk, commit_ts))]
            return
        self.records.append(("write", versioned_key(uk, commit_ts)))
        if w.kind is WriteKind.PUT and w.short_value is None:
            self.records.append(("data", versioned_key(uk, w.start_ts)))
        self.versions += 1

    def end_key(self) -> None:
        """The key was walked to its end in this step: its settling Delete goes too."""
        self.records += self._pending
        self.versions += len(self._pending)
        self._pending = []

    def step(self, examined: int, nxt: GcCursor) -> GcStep:
        return GcStep(self.records, self.versions, examined, nxt)


def _plan_writes(reader: Reader, safepoint: int, cursor: GcCursor, budget: int) -> GcStep:
    out = _Doomed()
    examined = 0
    cur_key = cursor.settled_key
    out.start_key(settled=cur_key is not None)
    for k, v in reader.items_from("write", cursor.key):
        uk, commit_ts = parse_versioned_key(k)
        if uk != cur_key:
            out.end_key()
            if examined >= budget:  # stop between user keys when possible
                return out.step(examined, GcCursor(WRITE, k, None))
            cur_key = uk
            out.start_key()
        elif examined >= 4 * budget:  # a key with very many versions: stop inside it
            return out.step(examined, GcCursor(WRITE, k, uk if out.settled else None))
        examined += 1
        if commit_ts <= safepoint:
            out.meet(uk, commit_ts, reader.parse_write(k, v))
    out.end_key()
    return out.step(examined, GcCursor(CHANGES, b"", None))


def _index_walk(reader: Reader, safepoint: int, start: bytes) -> Iterator[tuple[bytes, bool]]:
    """The change-index keys from ``start`` a pass reads, each with whether it is at or below the
    safepoint. Keys are table id (4) + commit_ts (8) + user key: each table's entries at or
    below the safepoint are one run at the start of its prefix, so after the first key above it
    (yielded, marked False) the walk skips to the next table."""
    key = start
    while True:
        for k in reader.keys_from("changes", key):
            if int.from_bytes(k[4:12], "big") <= safepoint:
                yield k, True
                continue
            yield k, False
            key = table_prefix(table_id_of(k) + 1)
            break
        else:
            return


def _plan_changed_keys(reader: Reader, safepoint: int, cursor: GcCursor, budget: int) -> GcStep:
    """An incremental pass's step: the change-index entries at or below the safepoint from
    ``cursor``, each key's history collected and the entry deleted with it. A key with more
    than 4 * ``budget`` versions at or below the safepoint has the older of them collected but
    keeps its settling record and its entry, so the next visit goes on with it."""
    out = _Doomed()
    examined = 0
    done_keys: set[bytes] = set()  # a key changed several times is collected once per step
    for k, old in _index_walk(reader, safepoint, cursor.key):
        if examined >= budget:
            return out.step(examined, GcCursor(CHANGED_KEYS, k, None))
        examined += 1
        if not old:
            continue
        uk = parse_changes_key(k)[1]
        whole = True
        if uk not in done_keys:
            done_keys.add(uk)
            out.start_key()
            for n, (ts, w) in enumerate(reader.iter_writes(uk, safepoint)):
                if n >= 4 * budget:
                    whole = False
                    break
                examined += 1
                out.meet(uk, ts, w)
            if whole:
                out.end_key()
        if whole:
            out.records.append(("changes", k))
    return out.step(examined, GcCursor(DONE, b"", None))


def _plan_changes(reader: Reader, safepoint: int, cursor: GcCursor, budget: int) -> GcStep:
    """A full pass's last phase: every change-index entry at or below the safepoint goes."""
    doomed: list[tuple[str, bytes]] = []
    examined = 0
    for k, old in _index_walk(reader, safepoint, cursor.key):
        if examined >= budget:
            return GcStep(doomed, 0, examined, GcCursor(CHANGES, k, None))
        examined += 1
        if old:
            doomed.append(("changes", k))
    return GcStep(doomed, 0, examined, GcCursor(DONE, b"", None))


def delete_gc_records(ctx: WriteContext, doomed: list[tuple[str, bytes]]) -> None:
    """Delete what ``plan_gc_step`` chose, in one write; a record already gone is passed over
    (a drop of its table, or an earlier attempt of the same step)."""
    by_cf: dict[str, list[bytes]] = {}
    for cf, k in doomed:
        by_cf.setdefault(cf, []).append(k)
    for cf, keys in by_cf.items():
        ctx.buf.delete_many(cf, sorted(keys))
