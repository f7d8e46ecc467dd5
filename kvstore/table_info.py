"""TableInfo: a table's definition and its codecs, as the catalog stores it and the wire carries it.

Plain data with no storage behind it: a client process (a Spark executor, a user's script) holds
and pickles these without loading LMDB or the server (``kvstore.catalog`` keeps them in the store).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from kvstore.mvcc.keys import KeyCodec, table_prefix
from kvstore.schema import TableSchema, parse_ddl

if TYPE_CHECKING:
    from kvstore.rowcodec import RowCodec


@dataclass(frozen=True)
class TableInfo:
    name: str
    id: int
    schema: str
    primary_key: tuple[str, ...]
    kind: str = "root"
    hidden_row_id: bool = False
    created_ts: int = 0
    # A table of this name was dropped before this one was created: at a ts before created_ts
    # the name meant that other table, so this one cannot answer a read there.
    recreated: bool = False

    @property
    def user_key(self) -> tuple[str, ...]:
        """The primary key columns its creator gave; () for an append-only table, whose key is
        the hidden row id."""
        return () if self.hidden_row_id else tuple(self.primary_key)

    def __reduce__(self):
        # Pickle the definition only (Spark ships readers to executors); codecs are rebuilt.
        return (
            TableInfo,
            (
                self.name,
                self.id,
                self.schema,
                self.primary_key,
                self.kind,
                self.hidden_row_id,
                self.created_ts,
                self.recreated,
            ),
        )

    @property
    def definition(self) -> tuple:
        """What makes two tables of one name the same table to a writer: columns, key, kind and
        hidden row id (not the id or the creation ts)."""
        return (self.schema, self.primary_key, self.kind, self.hidden_row_id)

    @cached_property
    def table_schema(self) -> TableSchema:
        return TableSchema(
            self.name, parse_ddl(self.schema, self.name), list(self.primary_key), self.hidden_row_id
        )

    @cached_property
    def row_codec(self) -> RowCodec:
        # numpy and pyarrow load here, on a table's first row, not with the client
        from kvstore.rowcodec import RowCodec

        return RowCodec(self.table_schema)

    @cached_property
    def key_codec(self) -> KeyCodec:
        return KeyCodec(self.id, self.table_schema)

    @property
    def prefix(self) -> bytes:
        return table_prefix(self.id)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "name": self.name,
                "id": self.id,
                "schema": self.schema,
                "primary_key": list(self.primary_key),
                "kind": self.kind,
                "hidden_row_id": self.hidden_row_id,
                "created_ts": self.created_ts,
                "recreated": self.recreated,
            }
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> TableInfo:
        d = json.loads(raw)
        return cls(
            d["name"],
            d["id"],
            d["schema"],
            tuple(d["primary_key"]),
            d["kind"],
            d["hidden_row_id"],
            d["created_ts"],
            d.get("recreated", False),  # absent in catalogs written before it existed
        )


# A state table of view V (incremental maintenance) is named V + STATE_INFIX + what it holds.
STATE = "state"
STATE_INFIX = "__sv_"  # a state table of view V is named V + STATE_INFIX + what it holds


def state_tables_of(view: str, tables: Iterable[TableInfo]) -> list[str]:
    """The names of view ``view``'s state tables among ``tables`` (TableInfo)."""
    prefix = view + STATE_INFIX
    return [t.name for t in tables if t.kind == STATE and t.name.startswith(prefix)]


def owner_of_state(name: str) -> str:
    """The view a state table belongs to."""
    return name.rsplit(STATE_INFIX, 1)[0]
