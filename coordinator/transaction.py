"""Client-side Percolator transactions.

Writes are buffered and sent at commit. If every mutation fits in one store call (at most
ONE_PC_MAX_MUTATIONS and ONE_PC_MAX_BYTES), the store commits them in that same call (one-phase
commit: no locks left for anyone to see). Otherwise two-phase commit: prewrite the primary's batch
first, then the rest; take commit_ts; commit the primary (the moment of truth); then commit the
secondaries (if this process dies here, readers finish them through the primary).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from kvstore.errors import SnapviewError, TableNotFound, TxnError, WriteConflict
from kvstore.limits import split_mutations
from kvstore.mvcc.keys import table_id_of, table_prefix
from kvstore.mvcc.records import LockOp, Mutation
from kvstore.schema import ROW_ID_COLUMN
from kvstore.table_info import TableInfo

if TYPE_CHECKING:
    from coordinator.client import Client

ONE_PC_MAX_MUTATIONS = 4096
ONE_PC_MAX_BYTES = 16 << 20
# Mutations per prewrite request: below the server's limit (kvstore.limits), so a bulk
# transaction holds the store's writer for short steps and one-row transactions slip between.
PREWRITE_BATCH = 4096


class TransactionClosed(SnapviewError):
    code = "FAILED_PRECONDITION"


class Transaction:
    """One snapshot-isolation transaction. Reads see the state at ``start_ts`` plus this
    transaction's own writes; ``commit_ts`` is set after a successful commit that wrote
    something (None for a read-only transaction)."""

    def __init__(self, client: Client, lock_ttl_ms: int = 3000) -> None:
        self.client = client
        self.lock_ttl_ms = lock_ttl_ms
        self.start_ts = client.tso()
        self.commit_ts: int | None = None
        self._writes: dict[bytes, tuple[LockOp, bytes, str]] = {}
        self._tables: dict[str, TableInfo] = {}  # the definitions the writes were encoded with
        self._row_seq = 0
        self._done = False

    def _table(self, table: str) -> TableInfo:
        info = self._tables.get(table)
        if info is None:
            info = self._tables[table] = self.client.describe_table(table)
        return info

    def _check_open(self) -> None:
        if self._done:
            raise TransactionClosed(f"transaction start_ts={self.start_ts} is already finished")

    def get(self, table: str, key: dict) -> dict | None:
        """The row with primary key ``key`` as this transaction sees it, or None."""
        self._check_open()
        if table in self._tables:  # written to already: read the same table
            info = self._tables[table]
            k = info.key_codec.encode(key)
            if k in self._writes:
                op, value, _ = self._writes[k]
                return info.row_codec.decode(value) if op is LockOp.PUT else None

        def get(info: TableInfo) -> dict | None:
            k = info.key_codec.encode(key)
            raw = self.client.with_lock_wait(lambda: self.client.store.get(k, self.start_ts))
            return None if raw is None else info.row_codec.decode(raw)

        # at start_ts: a table made (again) after this transaction began is refused, not read
        return self.client.by_name(table, get, self.start_ts)

    def put(self, table: str, row: dict) -> None:
        """Insert or replace ``row`` (a dict of column -> value). Raises SchemaMismatch naming the
        column when the row does not fit the table. An append-only table gets a fresh row id."""
        self._check_open()
        info = self._table(table)
        if info.hidden_row_id:
            if ROW_ID_COLUMN in row:
                raise SnapviewError(f"table {table!r}: {ROW_ID_COLUMN} is assigned by snapview")
            row = {**row, ROW_ID_COLUMN: struct.pack(">QI", self.start_ts, self._row_seq)}
            self._row_seq += 1
        value = info.row_codec.encode(row)
        self._writes[info.key_codec.encode(row)] = (LockOp.PUT, value, table)

    def delete(self, table: str, key: dict) -> None:
        """Delete the row with primary key ``key`` (a no-op if there is none)."""
        self._check_open()
        info = self._table(table)
        self._writes[info.key_codec.encode(key)] = (LockOp.DELETE, b"", table)

    def _mutations(self) -> list[Mutation]:
        return [(op, k, v) for k, (op, v, _) in sorted(self._writes.items())]

    def commit(self) -> int | None:
        """Commit; returns commit_ts (None if nothing was written). On WriteConflict (or a lock
        that will not go away) everything this transaction prewrote is rolled back and the error
        is raised: the transaction had no effect and may be retried from scratch."""
        self._check_open()
        self._done = True
        muts = self._mutations()
        if not muts:
            return None
        for attempt in (1, 2):
            try:
                return self._commit(muts)
            except TableNotFound as e:
                # Refused whole (nothing of the table written); earlier batches of a large
                # transaction stay prewritten for the retry (same start_ts: idempotent).
                try:
                    if attempt == 1 and self._retarget(e):
                        muts = self._mutations()
                        continue
                except BaseException:
                    self._rollback_quietly([m for m in muts if table_id_of(m[1]) != e.table])
                    raise
                self._rollback_quietly([m for m in muts if table_id_of(m[1]) != e.table])
                raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _retarget(self, err: TableNotFound) -> bool:
        """After the server refused a table id this transaction's writes were encoded with (the
        table was dropped and its name taken by a new table): move the writes to the new table
        when that is what the transaction meant, i.e. the new table existed when the
        transaction began and has the same definition; then the commit is tried once more.
        Otherwise raise TableNotFound saying so: nothing was applied, and a new transaction
        (which sees the new table) may be tried."""
        stale = next((t for t in self._tables.values() if t.id == err.table), None)
        if stale is None:
            return False
        fresh = self.client.store.refreshed(stale, err)
        if fresh is None:
            return False
        same = fresh.definition == stale.definition
        if not same or fresh.created_ts >= self.start_ts:
            raise TableNotFound.from_message(
                f"table {stale.name!r} was dropped and made anew (id {stale.id}, now {fresh.id}) "
                f"{'after this transaction began' if same else 'with another definition'}: "
                f"nothing of transaction start_ts={self.start_ts} was applied; retry it"
            ) from err
        old, new = table_prefix(stale.id), table_prefix(fresh.id)
        self._writes = {
            (new + k[len(old) :] if table_id_of(k) == stale.id else k): w
            for k, w in self._writes.items()
        }
        self._tables[stale.name] = fresh
        return True

    def _key_name(self, key: bytes) -> str:
        """``table 'name' key (values...)``, decoded with the definition the write used."""
        for info in self._tables.values():
            if info.id == table_id_of(key):
                try:
                    values = tuple(info.key_codec.decode(key))
                    cols = info.primary_key
                    if len(cols) == len(values):
                        return f"table {info.name!r} key " + ", ".join(
                            f"{c}={v!r}" for c, v in zip(cols, values, strict=True)
                        )
                    return f"table {info.name!r} key {values}"
                except Exception:  # noqa: BLE001 - a message: fall back to the bytes
                    break
        return f"key {key.hex()}"

    def _commit(self, muts: list[Mutation]) -> int | None:
        primary = muts[0][1]
        store = self.client.store
        size = sum(len(k) + len(v) for _, k, v in muts)
        try:
            if len(muts) <= ONE_PC_MAX_MUTATIONS and size <= ONE_PC_MAX_BYTES:
                self.commit_ts = self.client.prewrite(
                    muts, primary, self.start_ts, self.lock_ttl_ms, len(muts), try_one_pc=True
                )
                return self.commit_ts
            for b in split_mutations(muts, max_mutations=PREWRITE_BATCH):
                self.client.prewrite(b, primary, self.start_ts, self.lock_ttl_ms, len(muts))
        except WriteConflict as e:
            self._rollback_quietly(muts)
            raise e.named(self._key_name(e.key)) from None
        except TxnError:
            self._rollback_quietly(muts)
            raise
        commit_ts = self.client.tso()
        store.commit(self.start_ts, commit_ts, [primary])
        self.commit_ts = commit_ts
        try:
            store.resolve_locks(self.start_ts, commit_ts)
        except SnapviewError:
            pass  # committed at the primary; readers finish the secondaries
        return commit_ts

    def _rollback_quietly(self, muts: list[Mutation]) -> None:
        try:
            self.client.store.rollback(self.start_ts, [k for _, k, _ in muts])
        except SnapviewError:
            pass  # the locks expire and are rolled back by whoever meets them

    def rollback(self) -> None:
        """Discard the transaction (nothing was sent before commit, so nothing to undo)."""
        self._done = True
        self._writes.clear()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._done:
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()
