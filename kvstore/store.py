"""LocalStore: the store's command layer over one LMDB environment.

A command validates its request (``kvstore.validation``: naming table, key or field in the error),
runs one action through the group committer (writes) or over a read transaction (reads), and
returns plain Python values. GC passes are driven a step at a time by ``kvstore.gc_pass``.
``kvstore.remote.RemoteStore`` has the same methods over gRPC, so callers do not care which one
they hold.

Reads resolve locks on the way, never read through them: a lock with start_ts <= read_ts is
looked up through its primary (check_txn_status); a committed or rolled-back transaction is
finished with resolve_locks and the read is retried; a live one raises KeyIsLocked to the caller,
who backs off and retries until the lock's TTL runs out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Literal, TypeVar

from kvstore import actions, planning
from kvstore.actions import txn_guard
from kvstore.actions.gc import GcCursor, GcStep
from kvstore.actions.resolved_ts import oldest_lock
from kvstore.catalog import (
    Catalog,
    check_table_name,
    create_table_action,
    drop_table_action,
)
from kvstore.clock import TsoClock, wall_ms
from kvstore.errors import (
    FailedPrecondition,
    InvalidArgument,
    KeyIsLocked,
    KeyPrewrittenTwice,
    SnapshotTooOld,
    TableNotFound,
    cut,
)
from kvstore.failpoints import fail_point
from kvstore.gc_pass import GC_STEP_RECORDS, gc_step, run_pass
from kvstore.group_commit import GroupCommitter, WriteContext
from kvstore.heavy_calls import HeavyCalls
from kvstore.limits import RESOLVE_STEP, SCAN_CHUNK_BYTES
from kvstore.lock_resolution import resolve_lock
from kvstore.meta_keys import GC_SAFEPOINT
from kvstore.mvcc.keys import table_id_of, table_prefix
from kvstore.mvcc.records import Mutation, WriteKind
from kvstore.mvcc.timestamp import wall_text
from kvstore.results import ChangeRecord, DropResult, TxnStatusResult
from kvstore.storage import DEFAULT_MAP_SIZE, Reader, Storage, raw_key_name
from kvstore.table_info import TableInfo, state_tables_of
from kvstore.txn_finisher import StaleLocks, TxnFinisher
from kvstore.validation import (
    check_issued,
    check_key_ranges,
    check_keys,
    check_range_count,
    check_ts,
    describe_key,
    table_of_key,
    validate_mutations,
)

T = TypeVar("T")
log = logging.getLogger(__name__)
# How a Commit/Rollback/ResolveLocks from outside the server is checked (actions.txn_guard):
# None for the server's own calls.
Guard = Literal["checked", "raw"] | None
DropGuard = Callable[[WriteContext, str, bool], tuple[list[str], list[str]]]
DEFAULT_LOCK_TTL_MS = 3000
MAX_LOCK_TTL_MS = 3_600_000
DEFAULT_MAX_VALUE_BYTES = 4 << 20
SCAN_CHUNK_ROWS = 8192
# A change scan keeps at most this many chunks' worth of changed keys (and never more than
# CHANGE_WINDOW_KEYS) between passes over the change index (see actions.scan_changes).
CHANGE_WINDOW_CHUNKS = 8
CHANGE_WINDOW_KEYS = CHANGE_WINDOW_CHUNKS * SCAN_CHUNK_ROWS


class LocalStore:
    """The MVCC Percolator store on an LMDB environment at ``path``.

    ``clock`` returns a fresh timestamp from the TSO; the store needs it for one-phase commit and
    resolved_ts. Without one (a bare store in tests) those two refuse with FAILED_PRECONDITION.
    When the clock is a ``kvstore.clock.TsoClock`` (the server's TSO), timestamps above what it
    has issued are refused and lock TTLs run on its physical clock (see kvstore.clock).
    """

    def __init__(
        self,
        path: str,
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        sync: bool = True,
        clock: Callable[[], int] | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        self.storage = Storage(path, map_size=map_size, sync=sync)
        self.storage.key_namer = self.describe_key  # DataLoss names the table and key values
        self.committer = GroupCommitter(self.storage)
        # Finishes client transactions whose locks readers resolved only where in their way.
        self.finisher = TxnFinisher(self.committer)
        self.stale_locks = StaleLocks(self)
        self.catalog = Catalog()
        self.clock: Callable[[], int] | None = None
        self._tso: TsoClock | None = None
        self.use_clock(clock)
        self.max_value_bytes = max_value_bytes
        self._catalog_lock = threading.Lock()
        # Set by the coordinator: inside a drop's write, (downstream tables, jobs) or a refusal.
        self.drop_guard: DropGuard | None = None
        # One-phase commits whose commit_ts is allocated but not yet durable: readers at or above
        # such a ts wait, so a read never misses a commit below its read_ts (repeatable reads).
        self._inflight: set[int] = set()
        self._inflight_cond = threading.Condition()
        with self.storage.read_txn() as r:
            self.catalog.load(r)
            raw = r.get("meta", GC_SAFEPOINT)
        self.safepoint = int(raw) if raw else 0
        self._safepoint_lock = threading.Lock()
        # Set by the coordinator: raises FailedPrecondition for a safepoint its holds (reader
        # leases, view jobs, the retention window) do not allow.
        self.gc_guard: Callable[[int], None] | None = None
        # The calls that read a whole change (ScanChanges, a dry-run rollback) take a slot of
        # it; the server sets its limit (serve --max-heavy-calls).
        self.heavy_calls = HeavyCalls()

    def use_clock(self, clock: Callable[[], int] | None) -> None:
        """Run on ``clock`` from now on (the server opens the store first, then its TSO). Whether
        it is a TsoClock is decided here, once: the write paths ask it on every request."""
        self.clock = clock
        self._tso = clock if isinstance(clock, TsoClock) else None

    def close(self) -> None:
        self.finisher.close()  # it writes through the committer
        self.committer.close()
        self.storage.close()

    # ------------------------------------------------------------------ catalog

    def create_table(
        self,
        name: str,
        schema: str,
        primary_key: list[str] | None = None,
        kind: str = "root",
        if_not_exists: bool = False,
        hidden_row_id: bool = False,
    ) -> TableInfo:
        """Create a table (idempotent with ``if_not_exists`` for an identical definition)."""
        pk = list(primary_key or [])
        created_ts = self.clock() if self.clock else 0
        with self._catalog_lock:
            info, _ = self.committer.run(
                lambda ctx: create_table_action(
                    ctx, name, schema, pk, kind, hidden_row_id, if_not_exists, created_ts
                )
            )
            self.catalog.remember(info)
        return info

    def drop_table(self, name: str, if_exists: bool = False, cascade: bool = False) -> DropResult:
        """Drop ``name`` and every record of it, in one write. With a ``drop_guard`` installed
        (the coordinator's registry, in a server), a table that registered jobs read is refused
        (FAILED_PRECONDITION naming them) unless ``cascade``: then every table downstream of it
        goes in the same write, and the writer jobs of all of them are unregistered."""
        check_table_name(name)
        guard = self.drop_guard

        def act(ctx: WriteContext) -> DropResult:
            if ctx.reader.get("catalog", name.encode()) is None:
                if if_exists:
                    return DropResult(False)
                raise TableNotFound(name)
            rev = actions.fenced_by(ctx.reader, self.catalog.get(name).id)
            if rev:
                raise FailedPrecondition(
                    f"table {name!r} is being revised (revision {rev}); drop it after the "
                    "revision ends"
                )
            downstream, jobs = guard(ctx, name, cascade) if guard else ([], [])
            # A view's state tables go with it (they are nobody else's).
            tables = list(self.catalog.by_name.values())
            state = [s for t in (*downstream, name) for s in state_tables_of(t, tables)]
            for t in downstream:
                drop_table_action(ctx, t, True)
            drop_table_action(ctx, name, False)
            for t in state:
                drop_table_action(ctx, t, True)
            return DropResult(True, tuple(downstream) + tuple(state), tuple(jobs))

        with self._catalog_lock:
            result = self.committer.run(act)
            for t in (*result.also_dropped, name) if result.dropped else ():
                self.catalog.forget(t)
        return result

    def describe_table(self, name: str) -> TableInfo:
        check_table_name(name)
        return self.catalog.get(name)

    def list_tables(self) -> list[TableInfo]:
        return sorted(self.catalog.by_name.values(), key=lambda t: t.name)

    # ------------------------------------------------------------------ validation

    def describe_key(self, key: bytes) -> str:
        """``table 'name' key (values...)`` for a user key, for error messages."""
        try:
            return describe_key(self.catalog.get_id(table_id_of(key)), key)
        except Exception:  # noqa: BLE001 - a message helper: fall back to the raw bytes
            return raw_key_name(key)

    def validate_mutations(self, mutations: list[Mutation], internal: bool = False) -> None:
        """Refuse the whole request if any mutation is malformed (see
        ``kvstore.validation.validate_mutations``; values over ``max_value_bytes``)."""
        validate_mutations(self.catalog, mutations, self.max_value_bytes, internal)

    # ------------------------------------------------------------------ transactional writes

    def prewrite(
        self,
        mutations: list[Mutation],
        primary: bytes,
        start_ts: int,
        ttl_ms: int = DEFAULT_LOCK_TTL_MS,
        txn_size: int = 0,
        try_one_pc: bool = False,
        internal: bool = False,
    ) -> int:
        """Prewrite ``mutations`` for txn ``start_ts`` (all or none). Returns 0, or the commit_ts
        when ``try_one_pc`` committed them in the same call. Raises the first Percolator outcome
        (KeyIsLocked, WriteConflict, TxnRolledBack) that stopped it."""
        check_issued(self._tso, start_ts=start_ts)
        if not mutations:
            raise InvalidArgument("prewrite needs at least one mutation")
        check_keys("primary key", [primary])
        if not 0 < ttl_ms <= MAX_LOCK_TTL_MS:
            raise InvalidArgument(f"lock_ttl_ms must be in (0, {MAX_LOCK_TTL_MS}], got {ttl_ms}")
        self.validate_mutations(mutations, internal)
        if start_ts <= self.safepoint:
            raise FailedPrecondition(
                f"start_ts {start_ts} is at or below the GC safepoint "
                f"{self.safepoint}; take a new timestamp"
            )
        fail_point("store.prewrite.start")
        if not try_one_pc:
            try:
                self.committer.run(
                    lambda ctx: actions.prewrite(
                        ctx, mutations, primary, start_ts, ttl_ms, txn_size or len(mutations)
                    ),
                    len(mutations),
                )
            except KeyPrewrittenTwice as e:
                raise KeyPrewrittenTwice.of(e.key, e.start_ts, self.describe_key(e.key)) from None
            fail_point("store.prewrite.done")
            return 0
        if self.clock is None:
            raise FailedPrecondition("one-phase commit needs a TSO; this store has none")
        with self._inflight_cond:
            commit_ts = self.clock()
            self._inflight.add(commit_ts)
        try:
            self.committer.run(
                lambda ctx: actions.one_pc_commit(ctx, mutations, primary, start_ts, commit_ts),
                len(mutations),
            )
        finally:
            with self._inflight_cond:
                self._inflight.discard(commit_ts)
                self._inflight_cond.notify_all()
        fail_point("store.prewrite.done")  # here the prewrite committed, in one phase
        return commit_ts

    def commit(
        self, start_ts: int, commit_ts: int, keys: list[bytes], *, guard: Guard = None
    ) -> None:
        """Commit ``keys`` of txn ``start_ts`` at ``commit_ts`` (idempotent). A commit_ts above
        what the TSO has issued is refused (INVALID_ARGUMENT). ``guard`` ("checked" or "raw")
        is for a call from outside the server: see kvstore.actions.txn_guard."""
        check_ts(start_ts=start_ts, commit_ts=commit_ts)
        if commit_ts <= start_ts:
            raise InvalidArgument(f"commit_ts {commit_ts} must be greater than start_ts {start_ts}")
        check_keys("key", keys)
        check_issued(self._tso, start_ts=start_ts, commit_ts=commit_ts)

        def act(ctx: WriteContext) -> None:
            if guard:
                txn_guard.check_call(
                    ctx, txn_guard.COMMIT, start_ts, keys, commit_ts, raw=guard == "raw"
                )
            actions.commit(ctx, keys, start_ts, commit_ts)

        self.committer.run(act, len(keys))

    def rollback(self, start_ts: int, keys: list[bytes], *, guard: Guard = None) -> None:
        """Roll back txn ``start_ts`` on ``keys`` (all or none; see actions.rollback_key);
        ``guard`` as for ``commit``."""
        check_ts(start_ts=start_ts)
        check_keys("key", keys)
        check_issued(self._tso, start_ts=start_ts)

        def act(ctx: WriteContext) -> None:
            if guard:
                txn_guard.check_call(ctx, txn_guard.ROLLBACK, start_ts, keys, raw=guard == "raw")
            actions.rollback(ctx, keys, start_ts)

        self.committer.run(act, len(keys))

    def check_txn_status(
        self, primary: bytes, lock_ts: int, rollback_if_not_exist: bool = False
    ) -> TxnStatusResult:
        check_issued(self._tso, lock_ts=lock_ts)
        check_keys("primary key", [primary])
        now = self.lock_clock_ms()
        return self.committer.run(
            lambda ctx: actions.check_txn_status(ctx, primary, lock_ts, now, rollback_if_not_exist)
        )

    def resolve_locks(
        self,
        start_ts: int,
        commit_ts: int,
        *,
        keys: list[bytes] | None = None,
        guard: Guard = None,
    ) -> int:
        """Commit (commit_ts > 0) or roll back every lock of txn ``start_ts``; how many.
        ``guard`` as for ``commit`` (checked once, in the first step: a primary's decision is
        final, so later steps agree with it as the first did).

        With ``keys``, only those keys' locks of the transaction, in one write (a key it no
        longer holds is left alone): the locks in a reader's or a prewrite's way. The rest of
        a client's transaction is then handed to ``self.finisher``; an epoch's or a revision's
        (its primary in the system table) is finished by its owner in the server."""
        check_issued(self._tso, start_ts=start_ts)
        if commit_ts:
            check_issued(self._tso, commit_ts=commit_ts)
        if commit_ts and commit_ts <= start_ts:
            raise InvalidArgument(f"commit_ts {commit_ts} must be greater than start_ts {start_ts}")
        if keys is not None:
            return self._resolve_keys(start_ts, commit_ts, keys, guard)
        # In steps of bounded writes, so resolving a large transaction never holds the writer
        # for long (the primary decided the fate: a half-resolved txn reads the same).
        total, more = 0, True

        def step(ctx: WriteContext) -> tuple[int, bool]:
            if guard and not total:
                txn_guard.check_call(
                    ctx, txn_guard.RESOLVE, start_ts, [], commit_ts, raw=guard == "raw"
                )
            return actions.resolve_locks_step(ctx, start_ts, commit_ts, RESOLVE_STEP)

        while more:
            n, more = self.committer.run(step, RESOLVE_STEP)
            total += n
        return total

    def _resolve_keys(self, start_ts: int, commit_ts: int, keys: list[bytes], guard: Guard) -> int:
        check_keys("key", keys)

        def act(ctx: WriteContext) -> tuple[int, bool]:
            reader = ctx.reader
            if guard:
                txn_guard.check_call(
                    ctx, txn_guard.RESOLVE, start_ts, keys, commit_ts, raw=guard == "raw"
                )
            held = actions.keys_held(reader, sorted(set(keys)), start_ts, len(keys))
            # The primary from a lock this call resolves (never a walk of the txn's index
            # entries inside the writer); the rest goes to the finisher only for a client's
            # transaction and only as its primary decided (an admin's raw call on a few keys
            # against the primary never spreads to the others).
            lock = reader.get_lock(held[0]) if held else None
            rec = None if lock is None else reader.find_txn_write(lock.primary, start_ts)
            agreed = rec is not None and (
                rec[1].kind is WriteKind.ROLLBACK if not commit_ts else rec[0] == commit_ts
            )
            finish = agreed and lock is not None and not txn_guard.is_server_owned(lock.primary)
            if commit_ts:
                actions.commit(ctx, list(held), start_ts, commit_ts)
            else:
                actions.rollback(ctx, list(held), start_ts)
            return len(held), finish

        n, finish = self.committer.run(act, len(keys))
        if finish:
            self.finisher.submit(start_ts, commit_ts)
        return n

    def txn_heartbeat(self, primary: bytes, start_ts: int, advise_ttl_ms: int) -> int:
        check_issued(self._tso, start_ts=start_ts)
        check_keys("primary key", [primary])
        if not 0 < advise_ttl_ms <= MAX_LOCK_TTL_MS:
            raise InvalidArgument(f"advise_ttl_ms must be in (0, {MAX_LOCK_TTL_MS}]")
        now = self.lock_clock_ms()
        return self.committer.run(
            lambda ctx: actions.txn_heartbeat(ctx, primary, start_ts, advise_ttl_ms, now)
        )

    def run_write(self, fn: Callable[[WriteContext], T]) -> T:
        """Run a caller-defined write action in the next group (the coordinator's own state)."""
        return self.committer.run(fn)

    # ------------------------------------------------------------------ reads

    def wait_commits_below(self, ts: int) -> None:
        """Return once every one-phase commit whose commit_ts is below ``ts`` has been applied
        or refused: none of them can land after this returns."""
        self._wait_inflight(ts - 1)

    def _wait_inflight(self, read_ts: int) -> None:
        with self._inflight_cond:
            while any(c <= read_ts for c in self._inflight):
                self._inflight_cond.wait(1.0)

    def lock_clock_ms(self) -> int:
        """Now on the clock lock TTLs run on (the TSO's physical clock in a server)."""
        return self._tso.physical_ms() if self._tso is not None else wall_ms()

    def resolve_lock_for_read(self, err: KeyIsLocked) -> bool:
        """Finish the txn behind ``err`` if its fate is decided; False if it is alive
        (see kvstore.lock_resolution)."""
        return resolve_lock(self, err)

    def _read(
        self, fn: Callable, read_ts: int, table: str, oldest: int = 0, what: str = "snapshot"
    ):
        """``fn`` over one read transaction at ``read_ts``, resolving locks in its way.

        The safepoint is checked after the transaction opened: GC persists a safepoint before
        it deletes anything at it, and ``self.safepoint`` is set as soon as that write is
        durable, so a transaction that could see any record collected at a safepoint S finds
        ``self.safepoint >= S`` here. A read that needs history below it (``oldest``, default
        ``read_ts``) is refused (SnapshotTooOld), never answered from a partly collected
        snapshot."""
        self._wait_inflight(read_ts)
        while True:
            try:
                with self.storage.read_txn() as r:
                    self._check_not_collected(oldest or read_ts, table, what)
                    return fn(r)
            except KeyIsLocked as e:
                if not self.resolve_lock_for_read(e):
                    raise

    def _check_not_collected(self, ts: int, table: str, what: str = "snapshot") -> None:
        self.check_not_collected(
            ts,
            f"table {cut(table)}: {what} at",
            "its versions may be collected. Read at or above the safepoint, or hold a reader "
            "lease while a snapshot is in use",
        )

    def check_not_collected(self, ts: int, subject: str, remedy: str) -> None:
        """Raise SnapshotTooOld if ``ts`` is below the GC safepoint (what it would read may be
        collected): "``subject`` ts T (its wall time) is older than the GC safepoint S (...);
        ``remedy``"."""
        sp = self.safepoint
        if ts < sp:
            raise SnapshotTooOld(
                f"{subject} ts {ts} ({wall_text(ts)}) is older than the GC safepoint {sp} "
                f"({wall_text(sp)}); {remedy}"
            )

    def get(self, key: bytes, version: int) -> bytes | None:
        """The value of ``key`` at ``version`` (None if absent); raises KeyIsLocked while a live
        transaction that may commit at or below ``version`` holds the key, SnapshotTooOld below
        the GC safepoint."""
        check_ts(version=version)
        info = table_of_key(self.catalog, key, internal=True)
        name = info.name if info is not None else "(system)"
        return self._read(lambda r: actions.get(r, key, version), version, name)

    def scan(
        self,
        start: bytes,
        end: bytes | None,
        version: int,
        limit: int = 0,
        chunk_rows: int = SCAN_CHUNK_ROWS,
    ) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """(keys, values) chunks of [start, end) at ``version``, in key order. ``end`` None or
        empty means the end of start's table. Each chunk is read in its own LMDB transaction;
        MVCC makes them one consistent snapshot at ``version``."""
        check_ts(version=version)
        if len(start) < 4:
            raise InvalidArgument(f"scan start key {start.hex()!r} does not name a table")
        info = self.catalog.get_id(table_id_of(start))
        if not end:
            end = table_prefix(info.id + 1)
        chunk_rows = chunk_rows or SCAN_CHUNK_ROWS
        remaining = limit
        cursor = start
        rows = self._chunk_rows(chunk_rows, [])
        while True:
            want = rows if not remaining else min(rows, remaining)
            keys, values = self._read(
                lambda r, c=cursor, w=want: actions.scan(r, c, end, version, w), version, info.name
            )
            if keys:
                yield keys, values
            if len(keys) < want:
                return
            rows = self._chunk_rows(chunk_rows, values)
            if remaining:
                remaining -= len(keys)
                if remaining <= 0:
                    return
            cursor = actions.past_versions(keys[-1])

    def _change_rows(self, chunk_rows: int, recs: list[ChangeRecord]) -> int:
        """Records for the next change chunk, as ``_chunk_rows`` (a record holds two images)."""
        if not recs:
            rec_bytes = 2 * self.max_value_bytes
        else:
            rec_bytes = sum(len(c.old or b"") + len(c.new or b"") for c in recs) // len(recs)
        return max(1, min(chunk_rows, SCAN_CHUNK_BYTES // max(1, rec_bytes)))

    def _chunk_rows(self, chunk_rows: int, values: list[bytes]) -> int:
        """Rows for the next scan chunk, so that it stays near SCAN_CHUNK_BYTES: the first chunk
        (no ``values`` yet) assumes the largest rows a table may hold, later ones the sizes of
        the ``values`` just read."""
        row_bytes = sum(map(len, values)) // len(values) if values else self.max_value_bytes
        return max(1, min(chunk_rows, SCAN_CHUNK_BYTES // max(1, row_bytes)))

    def scan_ranges(
        self,
        ranges: list[tuple[bytes, bytes]],
        version: int,
        limit: int = 0,
        range_limit: int = 0,
    ) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """(keys, values) chunks of many [start, end) user-key ranges of one table at
        ``version``: each range in the order given, each in key order (the caller sorts; an
        overlap is read twice). One key alone is the range [key, key + b"\\0"); an empty end
        means the end of the start's table. ``limit`` > 0 stops after that many pairs in all;
        ``range_limit`` > 0 reads only the first that many pairs of each range (at most
        SCAN_CHUNK_ROWS, else InvalidArgument): the smallest keys of many prefixes in one call.

        Each range is read exactly as ``scan`` reads it (locks resolved or KeyIsLocked, records
        checked). Chunks are bounded like scan's (rows and about SCAN_CHUNK_BYTES) and each is
        read in one LMDB read transaction over as many ranges as fit, never one per range.
        Checked before anything is read: at most MAX_SCAN_RANGES ranges (RequestTooLarge), all
        in one existing table (InvalidArgument, TableNotFound)."""
        check_ts(version=version)
        check_range_count(len(ranges))
        if not 0 <= range_limit <= SCAN_CHUNK_ROWS:
            raise InvalidArgument(
                f"scan_ranges: range_limit {range_limit} is outside [0, {SCAN_CHUNK_ROWS}]"
            )
        checked = check_key_ranges(ranges)
        if not checked:
            return iter(())
        info = self.catalog.get_id(table_id_of(checked[0][0]))
        return self._scan_ranges(checked, version, limit, range_limit, info.name)

    def _scan_ranges(
        self,
        ranges: list[tuple[bytes, bytes]],
        version: int,
        limit: int,
        range_limit: int,
        table: str,
    ) -> Iterator[tuple[list[bytes], list[bytes]]]:
        remaining = limit
        first, resume = 0, None
        rows = self._chunk_rows(SCAN_CHUNK_ROWS, [])
        while first < len(ranges):
            want = max(rows, range_limit)  # a range is never split under range_limit
            want = want if not remaining else min(want, remaining)
            keys, values, first, resume = self._read(
                lambda r, f=first, c=resume, w=want: actions.scan_ranges(
                    r, ranges, version, w, SCAN_CHUNK_BYTES, f, c, range_limit
                ),
                version,
                table,
            )
            if keys:
                yield keys, values
                rows = self._chunk_rows(SCAN_CHUNK_ROWS, values)
            if remaining:
                remaining -= len(keys)
                if remaining <= 0:
                    return

    def scan_table(self, table: str, version: int) -> Iterator[tuple[list[bytes], list[bytes]]]:
        info = self.catalog.get(table)
        return self.scan(info.prefix, table_prefix(info.id + 1), version)

    def scan_changes(self, table: str, from_ts: int, to_ts: int) -> list[ChangeRecord]:
        """Net changes of ``table`` in (from_ts, to_ts], in key order (see
        actions.scan_changes), as one list: for a caller that needs them all at once."""
        return [c for chunk in self.scan_changes_chunks(table, from_ts, to_ts) for c in chunk]

    def scan_changes_chunks(
        self, table: str, from_ts: int, to_ts: int, chunk_rows: int = 0
    ) -> Iterator[list[ChangeRecord]]:
        """Net changes of ``table`` in (from_ts, to_ts] (see actions.scan_changes), in key
        order, in chunks of at most ``chunk_rows`` records (default SCAN_CHUNK_ROWS) and about
        SCAN_CHUNK_BYTES of images (never an empty one).

        Bounded memory: the changed keys are taken in windows of at most CHANGE_WINDOW_CHUNKS
        chunks (and CHANGE_WINDOW_KEYS keys), each found by one pass over the change index
        resumed above the last key of the previous window, and the images are read a chunk at a
        time. Every pass and every chunk is one short LMDB read transaction of its own (none
        stays open while the consumer is slow: an open read transaction keeps LMDB from reusing
        pages); MVCC makes them one consistent read at (from_ts, to_ts], as ``scan``'s chunks
        are. Each checks the safepoint (SnapshotTooOld once GC passed from_ts: hold a lease)
        and resolves the locks in its way."""
        info = self._change_interval(table, from_ts, to_ts)
        chunk_rows = chunk_rows or SCAN_CHUNK_ROWS
        window = min(CHANGE_WINDOW_KEYS, chunk_rows * CHANGE_WINDOW_CHUNKS)
        return self._scan_changes(info.id, table, from_ts, to_ts, chunk_rows, window)

    def count_changes(self, table: str, from_ts: int, to_ts: int) -> tuple[int, int]:
        """(restored, removed): how many records of ``scan_changes(table, from_ts, to_ts)``
        have an old image and how many do not (what rolling ``table`` back to from_ts would
        restore and delete), counted as the change is read: no image is held past its
        comparison. Read as ``scan_changes_chunks`` reads (windows of keys, short read
        transactions)."""
        info = self._change_interval(table, from_ts, to_ts)
        restored = removed = 0
        for keys in self._change_windows(info.id, table, from_ts, to_ts, CHANGE_WINDOW_KEYS):
            for i in range(0, len(keys), SCAN_CHUNK_ROWS):
                part = keys[i : i + SCAN_CHUNK_ROWS]
                count = partial(actions.count_changes, keys=part, from_ts=from_ts, to_ts=to_ts)
                r, d = self._read_changes(count, table, from_ts, to_ts)
                restored += r
                removed += d
        return restored, removed

    def _change_interval(self, table: str, from_ts: int, to_ts: int) -> TableInfo:
        check_ts(to_ts=to_ts)
        if from_ts < 0 or from_ts >= to_ts:
            raise InvalidArgument(
                f"table {table!r}: need 0 <= from_ts < to_ts, got ({from_ts}, {to_ts}]"
            )
        return self.catalog.get(table)

    def _read_changes(self, fn: Callable[[Reader], T], table: str, from_ts: int, to_ts: int) -> T:
        return self._read(fn, to_ts, table, oldest=from_ts, what="change scan from")

    def _change_windows(
        self, table_id: int, table: str, from_ts: int, to_ts: int, window: int
    ) -> Iterator[list[bytes]]:
        """The changed keys in key order, ``window`` at a time (one pass each)."""
        after: bytes | None = None
        while True:
            find = partial(
                actions.changed_keys,
                table_id=table_id,
                from_ts=from_ts,
                to_ts=to_ts,
                after=after,
                max_keys=window,
            )
            keys, more = self._read_changes(find, table, from_ts, to_ts)
            if keys:
                yield keys
            if not more:
                return
            after = keys[-1]

    def _scan_changes(
        self, table_id: int, table: str, from_ts: int, to_ts: int, chunk_rows: int, window: int
    ) -> Iterator[list[ChangeRecord]]:
        rows = self._change_rows(chunk_rows, [])
        for keys in self._change_windows(table_id, table, from_ts, to_ts, window):
            i = 0
            while i < len(keys):
                part = keys[i : i + rows]
                i += len(part)
                fail_point("store.scan_changes.chunk")
                read = partial(actions.change_records, keys=part, from_ts=from_ts, to_ts=to_ts)
                recs = self._read_changes(read, table, from_ts, to_ts)
                if recs:
                    yield recs
                    rows = self._change_rows(chunk_rows, recs)

    def resolved_ts(self, table: str) -> int:
        """No commit at or below the answer can still appear in ``table``.

        Takes a TSO timestamp, then opens a read transaction of its own (it must open after the
        timestamp: see actions.resolved_ts). Never call it with a read transaction open on this
        thread: the timestamp may write the TSO's window through the writer, and the writer may
        be waiting for that transaction to end to grow the map (refused: RuntimeError).

        The table's oldest lock, when it is old, is looked at through its primary
        (``self.stale_locks``): a decided client transaction nobody reads any more is finished
        in the background, so the answer moves on instead of staying below it for good."""
        self.storage.no_read_open("resolved_ts")
        info = self.catalog.get(table)
        if self.clock is None:
            raise FailedPrecondition("resolved_ts needs a TSO; this store has none")
        now = self.clock()
        with self._inflight_cond:
            floor = min(self._inflight, default=now + 1) - 1
        with self.storage.read_txn() as r:
            oldest = oldest_lock(r, info.id)
        if oldest is None:
            return min(floor, now)
        try:
            self.stale_locks.settle(*oldest)
        except Exception as e:  # a side job: the answer stands without it
            log.warning("table %s: looking at its oldest lock failed: %s", table, e)
        return min(floor, now, oldest[0] - 1)

    def advance_safepoint(self, safepoint: int) -> bool:
        """Move the GC safepoint up to ``safepoint`` (durably) before anything at it is
        collected; False if it is not above the current one (the safepoint never moves back).
        From the moment this returns, reads and change scans below it are refused
        (SnapshotTooOld) and so are prewrites at or below it. It never passes what the TSO has
        issued (INVALID_ARGUMENT), nor what ``gc_guard`` (the coordinator's holds) allows
        (FAILED_PRECONDITION)."""
        check_issued(self._tso, safepoint=safepoint)
        with self._safepoint_lock:
            if safepoint <= self.safepoint:
                return False
            if self.gc_guard is not None:
                self.gc_guard(safepoint)
            self.committer.run(
                lambda ctx: ctx.buf.put("meta", GC_SAFEPOINT, str(safepoint).encode())
            )
            self.safepoint = safepoint
            return True

    def gc_step(self, cursor: GcCursor, budget: int = GC_STEP_RECORDS) -> GcStep:
        """One bounded step of a GC pass at the current safepoint (see ``kvstore.gc_pass``):
        planned on a read transaction, its deletes in one short write."""
        return gc_step(self.storage, self.committer, self.safepoint, cursor, budget)

    def gc(self, safepoint: int) -> int:
        """Move the safepoint to ``safepoint`` (see ``advance_safepoint``) and collect a whole
        pass at it, step by step; returns how many versions were removed. Afterwards a read at
        any ts >= safepoint returns what it returned before."""
        self.advance_safepoint(safepoint)
        return run_pass(self.gc_step)

    def split_range(
        self, start: bytes, end: bytes, rows_per_split: int = 100_000, max_splits: int = 64
    ) -> tuple[list[bytes], int]:
        """Boundaries for parallel readers of [start, end) (see kvstore.planning)."""
        if len(start) < 4 or not end or end <= start:
            raise InvalidArgument(
                f"split_range needs start < end within a table, got [{start.hex()}, {end.hex()})"
            )
        with self.storage.read_txn() as r:
            return planning.split_range(r, start, end, max(rows_per_split, 1), max_splits or 64)

    def change_boundary(
        self,
        table: str,
        from_ts: int,
        to_ts: int,
        max_changes: int,
        reader: Reader | None = None,
    ) -> tuple[int, int]:
        """The end ts of a change read of about ``max_changes`` changes (see kvstore.planning),
        read in ``reader`` when the caller has one open (no second read transaction)."""
        info = self.catalog.get(table)
        if max_changes <= 0 or from_ts >= to_ts:
            raise InvalidArgument(f"table {table!r}: need max_changes > 0 and from_ts < to_ts")
        with self.storage.read_txn(within=reader) as r:
            return planning.change_boundary(r, info.id, from_ts, to_ts, max_changes)

    def stats(self) -> dict:
        return {
            "map_size": self.storage.map_size(),
            "used_bytes": self.storage.used_bytes(),
            "group_commits": self.committer.groups,
            "grouped_actions": self.committer.actions,
        }
