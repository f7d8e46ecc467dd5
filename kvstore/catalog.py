"""The table catalog: name -> TableInfo, kept in the ``catalog`` CF, cached in memory.

Table ids start at FIRST_TABLE_ID; ids below it are reserved for snapview's own keys (the
coordinator's epoch status keys live in SYSTEM_TABLE_ID, defined with the key layout in
``kvstore.mvcc.keys``). Ids are never reused, so a key of a dropped table can never be read as a
row of a newer one; a dropped table leaves a tombstone under its id
(``kvstore.meta_keys.dropped_table_key``), so a write into it is refused for good, naming it
(``kvstore.actions.fence.check_not_dropped``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct

from kvstore.actions.resolve_locks import settle_txn
from kvstore.errors import AlreadyExists, InvalidArgument, TableNotFound, cut
from kvstore.group_commit import WriteContext
from kvstore.meta_keys import (
    DROPPED_TABLE_PREFIX,
    NEXT_TABLE_ID,
    dropped_name_key,
    dropped_table_key,
)
from kvstore.mvcc.keys import table_id_of, table_prefix
from kvstore.mvcc.records import Lock
from kvstore.schema import TableSchema, parse_ddl
from kvstore.storage import Reader
from kvstore.table_info import STATE, TableInfo

FIRST_TABLE_ID = 16
KINDS = ("root", "view", STATE)


MAX_SCHEMA_CHARS = 256 << 10  # a DDL string of a few thousand columns
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_table_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"table name {cut(name)} is not an identifier ([A-Za-z_][A-Za-z0-9_]*,"
            " at most 128 characters)"
        )


def make_table_info(
    name: str,
    schema: str,
    primary_key: list[str],
    kind: str,
    hidden_row_id: bool,
    table_id: int,
    created_ts: int,
) -> TableInfo:
    """Validate a table definition; raises InvalidArgument naming the table and field."""
    check_table_name(name)
    if kind not in KINDS:
        raise InvalidArgument(f"table {name!r}: kind {cut(kind)} is not one of {KINDS}")
    if not primary_key and not hidden_row_id:
        hidden_row_id = True  # an append-only table: rows are keyed by a hidden _row_id
    if not isinstance(schema, str):
        raise InvalidArgument(f"table {name!r}: schema must be a DDL string such as 'id BIGINT'")
    if len(schema) > MAX_SCHEMA_CHARS:
        raise InvalidArgument(
            f"table {name!r}: schema has {len(schema)} characters; the limit is {MAX_SCHEMA_CHARS}"
        )
    ts = TableSchema(name, parse_ddl(schema, name), list(primary_key), hidden_row_id)
    return TableInfo(name, table_id, ts.ddl(), tuple(primary_key), kind, hidden_row_id, created_ts)


class Catalog:
    """In-memory view of the catalog CF. Mutations go through the group committer (actions
    below) and update the cache only after their group is durable."""

    def __init__(self) -> None:
        self.by_name: dict[str, TableInfo] = {}
        self.by_id: dict[int, TableInfo] = {}
        self.dropped: dict[int, str] = {}  # id -> name of each dropped table (for messages)

    def load(self, reader: Reader) -> None:
        self.by_name.clear()
        self.by_id.clear()
        self.dropped.clear()
        for _, raw in reader.iter_range("catalog", b"", None):
            self.remember(TableInfo.from_json(raw))
        for k, raw in reader.iter_prefix("meta", DROPPED_TABLE_PREFIX):
            self.dropped[table_id_of(k[len(DROPPED_TABLE_PREFIX) :])] = json.loads(raw)["name"]

    def remember(self, info: TableInfo) -> None:
        self.by_name[info.name] = info
        self.by_id[info.id] = info

    def forget(self, name: str) -> None:
        info = self.by_name.pop(name, None)
        if info is not None:
            self.by_id.pop(info.id, None)
            self.dropped[info.id] = name

    def get(self, name: str) -> TableInfo:
        try:
            return self.by_name[name]
        except KeyError:
            raise TableNotFound(name) from None

    def get_id(self, table_id: int) -> TableInfo:
        """The live table ``table_id``; TableNotFound naming the table if it was dropped."""
        try:
            return self.by_id[table_id]
        except KeyError:
            name = self.dropped.get(table_id)
            if name is not None:
                raise TableNotFound.dropped(name, table_id) from None
            raise TableNotFound(table_id) from None


def create_table_action(
    ctx: WriteContext,
    name: str,
    schema: str,
    primary_key: list[str],
    kind: str,
    hidden_row_id: bool,
    if_not_exists: bool,
    created_ts: int,
) -> tuple[TableInfo, bool]:
    """Create a table; returns (info, created). Invariant: names are unique and ids never reused.
    An existing table of the same name is returned when ``if_not_exists`` and its definition
    matches; a different definition is refused either way."""
    raw_id = ctx.reader.get("meta", NEXT_TABLE_ID)
    next_id = struct.unpack(">I", raw_id)[0] if raw_id else FIRST_TABLE_ID
    wanted = make_table_info(name, schema, primary_key, kind, hidden_row_id, next_id, created_ts)
    if ctx.reader.get("meta", dropped_name_key(name)) is not None:
        # Another table had this name before: a read of the name at a ts before created_ts
        # would be a read of that one, which this table cannot answer (client.by_name).
        wanted = dataclasses.replace(wanted, recreated=True)
    raw = ctx.reader.get("catalog", name.encode())
    if raw is not None:
        existing = TableInfo.from_json(raw)
        same = existing.definition == wanted.definition
        if if_not_exists and same:
            return existing, False
        raise AlreadyExists(
            f"table {name!r} already exists"
            + ("" if same else f" with another definition ({existing.schema})")
        )
    ctx.buf.put("catalog", name.encode(), wanted.to_json())
    ctx.buf.put("meta", NEXT_TABLE_ID, struct.pack(">I", next_id + 1))
    return wanted, True


def drop_table_action(ctx: WriteContext, name: str, if_exists: bool) -> bool:
    """Drop a table and every record of it (locks, versions, values, change index), and leave
    its tombstone, so no write lands in its id later.

    A transaction holding a lock in the table is settled through its primary first: rolled back
    for good unless its primary committed already (then it is committed), so its keys in other
    tables are never left half done, and it cannot commit later."""
    check_table_name(name)
    raw = ctx.reader.get("catalog", name.encode())
    if raw is None:
        if if_exists:
            return False
        raise TableNotFound(name)
    info = TableInfo.from_json(raw)
    prefix = table_prefix(info.id)
    for start_ts, primary in _lock_holders(ctx, prefix).items():
        settle_txn(ctx, primary, start_ts)
    doomed = [
        (cf, k)
        for cf in ("lock", "write", "data", "changes")
        for k, _ in ctx.reader.iter_prefix(cf, prefix)
    ]
    doomed += [
        (cf, k)
        for cf in ("txn_locks", "txn_ranges")
        for k, _ in ctx.reader.iter_range(cf, b"", None)
        if k[8:12] == prefix
    ]
    for cf, k in doomed:
        ctx.buf.delete(cf, k)
    ctx.buf.delete("catalog", name.encode())
    tomb = json.dumps({"name": name, "id": info.id}).encode()
    ctx.buf.put("meta", dropped_table_key(prefix), tomb)
    ctx.buf.put("meta", dropped_name_key(name), json.dumps({"name": name}).encode())
    return True


def _lock_holders(ctx: WriteContext, prefix: bytes) -> dict[int, bytes]:
    """start_ts -> primary of every transaction holding a lock in the table of ``prefix`` (a
    damaged lock names none: it is deleted with the table)."""
    holders: dict[int, bytes] = {}
    for _, raw in ctx.reader.iter_prefix("lock", prefix):
        start_ts = Lock.start_ts_of(raw)
        if start_ts not in holders:
            try:
                holders[start_ts] = Lock.parse(raw).primary
            except ValueError:
                continue
    return holders
