"""Table schemas: the Spark DDL subset snapview stores, and conversions of Python values.

Supported types: BIGINT, INT, DOUBLE, BOOLEAN, STRING, DECIMAL(p,s), DATE, TIMESTAMP, and BINARY
(used for the hidden ``_row_id`` of append-only tables). Every column is nullable except the
primary-key columns. TIMESTAMP is stored as microseconds since the Unix epoch in UTC; a naive
``datetime`` is taken to be UTC.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvstore.errors import InvalidArgument, SchemaMismatch, cut

if TYPE_CHECKING:  # pyarrow loads when an Arrow type is first asked for, not with the client
    import pyarrow as pa

ROW_ID_COLUMN = "_row_id"
_EPOCH_DATE = dt.date(1970, 1, 1)
# For scaleb, which rounds to its context's precision (28 digits by default, so a DECIMAL(38, s)
# of more than 28 digits was silently rounded on write and on read): with this one it is exact.
_DECIMAL_CTX = decimal.Context(prec=decimal.MAX_PREC)
_EPOCH_DT = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)

_ALIASES = {
    "BIGINT": "BIGINT",
    "LONG": "BIGINT",
    "INT": "INT",
    "INTEGER": "INT",
    "DOUBLE": "DOUBLE",
    "BOOLEAN": "BOOLEAN",
    "BOOL": "BOOLEAN",
    "STRING": "STRING",
    "DECIMAL": "DECIMAL",
    "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP",
    "BINARY": "BINARY",
}
# Bytes a column takes in the fixed part of a row (rowcodec) and in a key (keycodec).
FIXED_WIDTH = {
    "BIGINT": 8,
    "INT": 4,
    "DOUBLE": 8,
    "BOOLEAN": 1,
    "DATE": 4,
    "TIMESTAMP": 8,
    "DECIMAL": 16,
    "STRING": 4,
    "BINARY": 4,
}
VARIABLE = frozenset({"STRING", "BINARY"})


@dataclass(frozen=True)
class DataType:
    """One column type; ``precision``/``scale`` are set for DECIMAL only."""

    kind: str
    precision: int = 0
    scale: int = 0

    def ddl(self) -> str:
        return f"DECIMAL({self.precision},{self.scale})" if self.kind == "DECIMAL" else self.kind

    def arrow(self) -> pa.DataType:
        import pyarrow as pa

        return {
            "BIGINT": pa.int64(),
            "INT": pa.int32(),
            "DOUBLE": pa.float64(),
            "BOOLEAN": pa.bool_(),
            "STRING": pa.string(),
            "DATE": pa.date32(),
            "TIMESTAMP": pa.timestamp("us", tz="UTC"),
            "BINARY": pa.binary(),
        }.get(self.kind) or pa.decimal128(self.precision, self.scale)


@dataclass(frozen=True)
class Column:
    name: str
    type: DataType
    nullable: bool = True


def parse_type(text: str, where: str = "") -> DataType:
    """Parse one Spark DDL type name such as ``BIGINT`` or ``DECIMAL(10,2)``."""
    m = re.fullmatch(r"\s*([A-Za-z]+)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*", text)
    kind = _ALIASES.get(m.group(1).upper()) if m else None
    if m is None or kind is None:
        raise InvalidArgument(
            f"{where}unsupported type {cut(text.strip())}; supported: "
            "BIGINT, INT, DOUBLE, BOOLEAN, STRING, DECIMAL(p,s), DATE, TIMESTAMP"
        )
    if kind != "DECIMAL":
        if m.group(2):
            raise InvalidArgument(f"{where}type {kind} takes no parameters")
        return DataType(kind)
    precision = int(m.group(2) or 10)
    scale = int(m.group(3) or 0)
    if not (1 <= precision <= 38 and 0 <= scale <= precision):
        raise InvalidArgument(f"{where}DECIMAL({precision},{scale}) needs 1<=p<=38 and 0<=s<=p")
    return DataType("DECIMAL", precision, scale)


def _split_top_level(ddl: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in ddl:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_ddl(ddl: str, table: str = "") -> list[Column]:
    """Parse ``"id BIGINT, name STRING NOT NULL"`` into columns; names must be unique."""
    where = f"table {table!r}: " if table else ""
    cols: list[Column] = []
    for part in _split_top_level(ddl):
        m = re.fullmatch(r"`?([A-Za-z_][A-Za-z0-9_]*)`?\s+(.+?)(\s+NOT\s+NULL)?", part, re.I)
        if not m:
            raise InvalidArgument(f"{where}cannot parse column definition {cut(part)}")
        name = m.group(1)
        if any(c.name.lower() == name.lower() for c in cols):
            raise InvalidArgument(f"{where}duplicate column {cut(name)}")
        cols.append(
            Column(
                name, parse_type(m.group(2), f"{where}column {name!r}: "), nullable=not m.group(3)
            )
        )
    if not cols:
        raise InvalidArgument(f"{where}schema has no columns")
    return cols


def to_ddl(columns: list[Column]) -> str:
    return ", ".join(
        f"{c.name} {c.type.ddl()}" + ("" if c.nullable else " NOT NULL") for c in columns
    )


class TableSchema:
    """The columns of one table and which of them form the primary key.

    ``columns`` are stored in every row, in this order. An append-only table (no primary key) gets
    a hidden BINARY column ``_row_id`` as its last column and key; user-facing reads drop it.
    """

    def __init__(
        self, table: str, columns: list[Column], primary_key: list[str], hidden_row_id: bool = False
    ) -> None:
        self.table = table
        by_name = {c.name: c for c in columns}
        if hidden_row_id:
            if primary_key:
                raise InvalidArgument(
                    f"table {table!r}: a table with a primary key needs no row id"
                )
            if ROW_ID_COLUMN in by_name:
                raise InvalidArgument(f"table {table!r}: column name {ROW_ID_COLUMN} is reserved")
            columns = [*columns, Column(ROW_ID_COLUMN, DataType("BINARY"), nullable=False)]
            primary_key = [ROW_ID_COLUMN]
        if not primary_key:
            raise InvalidArgument(
                f"table {table!r}: primary_key is empty; pass columns or use an "
                "append-only table (primary_key=[])"
            )
        for k in primary_key:
            if k not in by_name and k != ROW_ID_COLUMN:
                raise InvalidArgument(
                    f"table {table!r}: primary key column {cut(k)} is not in the "
                    f"schema ({', '.join(by_name)})"
                )
        if len(set(primary_key)) != len(primary_key):
            raise InvalidArgument(f"table {table!r}: primary key repeats a column")
        pk = set(primary_key)
        self.columns = [Column(c.name, c.type, c.nullable and c.name not in pk) for c in columns]
        self.primary_key = list(primary_key)
        self.hidden_row_id = hidden_row_id
        self.index = {c.name: i for i, c in enumerate(self.columns)}
        self.key_columns = [self.columns[self.index[k]] for k in primary_key]

    @property
    def visible_columns(self) -> list[Column]:
        return [c for c in self.columns if not (self.hidden_row_id and c.name == ROW_ID_COLUMN)]

    def ddl(self) -> str:
        return to_ddl(self.visible_columns)

    def arrow_schema(self, include_hidden: bool = False) -> pa.Schema:
        import pyarrow as pa

        cols = self.columns if include_hidden else self.visible_columns
        return pa.schema([pa.field(c.name, c.type.arrow(), nullable=c.nullable) for c in cols])


def to_storage(table: str, col: Column, value: object) -> object:
    """Convert a Python value to its stored form (ints for DECIMAL/DATE/TIMESTAMP).

    Raises SchemaMismatch naming table, column and value when the value does not fit.
    """
    kind = col.type.kind

    def bad(expect: str) -> SchemaMismatch:
        return SchemaMismatch(
            f"table {table!r} column {col.name!r}: expected {expect}, got "
            f"{type(value).__name__} {value!r:.80}"
        )

    if value is None:
        if not col.nullable:
            raise SchemaMismatch(
                f"table {table!r} column {col.name!r}: null in a NOT NULL (or primary key) column"
            )
        return None
    if kind in ("BIGINT", "INT"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad(kind)
        lo, hi = _INT64 if kind == "BIGINT" else _INT32
        if not lo <= value <= hi:
            raise bad(f"{kind} in [{lo}, {hi}]")
        return value
    if kind == "DOUBLE":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("DOUBLE")
        return float(value)
    if kind == "BOOLEAN":
        if not isinstance(value, bool):
            raise bad("BOOLEAN")
        return value
    if kind == "STRING":
        if not isinstance(value, str):
            raise bad("STRING")
        return value
    if kind == "BINARY":
        if not isinstance(value, bytes | bytearray):
            raise bad("BINARY")
        return bytes(value)
    if kind == "DATE":
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            raise bad("DATE (datetime.date)")
        return (value - _EPOCH_DATE).days
    if kind == "TIMESTAMP":
        if not isinstance(value, dt.datetime):
            raise bad("TIMESTAMP (datetime.datetime)")
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        delta = value - _EPOCH_DT
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if kind == "DECIMAL":
        if isinstance(value, bool) or not isinstance(value, int | decimal.Decimal):
            raise bad(f"{col.type.ddl()} (decimal.Decimal or int)")
        d = decimal.Decimal(value)
        if not d.is_finite():
            raise bad(f"finite {col.type.ddl()}")
        unscaled = d.scaleb(col.type.scale, _DECIMAL_CTX)
        if unscaled != unscaled.to_integral_value():
            raise bad(f"{col.type.ddl()} with at most {col.type.scale} fractional digits")
        n = int(unscaled)
        if abs(n) >= 10**col.type.precision:
            raise bad(f"{col.type.ddl()} with at most {col.type.precision} digits")
        return n
    raise AssertionError(f"unhandled type {kind}")  # parse_type admits no other kind


def from_storage(col: Column, value: object) -> object:
    """Inverse of ``to_storage``."""
    if value is None:
        return None
    kind = col.type.kind
    if kind not in ("DATE", "TIMESTAMP", "DECIMAL"):
        return value
    assert isinstance(value, int), f"stored {kind} is an int (to_storage), got {value!r:.80}"
    if kind == "DATE":
        return _EPOCH_DATE + dt.timedelta(days=value)
    if kind == "TIMESTAMP":
        return _EPOCH_DT + dt.timedelta(microseconds=value)
    return decimal.Decimal(value).scaleb(-col.type.scale, _DECIMAL_CTX)
