"""Primary-key ranges: the partitions of a snapshot read, narrowed by pushed-down filters."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from kvstore.errors import SnapviewError
from kvstore.mvcc.keys import table_prefix
from kvstore.schema import to_storage
from kvstore.table_info import TableInfo


def after(key: bytes) -> bytes:
    """The smallest bound above every version of ``key`` (user key + 8-byte ts suffix) and below
    every other user key: keys are prefix-free, so the next key differs inside key's length."""
    return key + b"\xff" * 9


@dataclass(frozen=True)
class KeyRange:
    start: bytes  # inclusive
    end: bytes  # exclusive
    point: bool = False  # exactly one key: no need to plan splits

    @property
    def empty(self) -> bool:
        return self.start >= self.end


def full_range(info: TableInfo) -> KeyRange:
    return KeyRange(table_prefix(info.id), table_prefix(info.id + 1))


def _intersect(ranges: list[KeyRange], other: list[KeyRange]) -> list[KeyRange]:
    out = [
        KeyRange(max(a.start, b.start), min(a.end, b.end), a.point or b.point)
        for a in ranges
        for b in other
    ]
    return sorted((r for r in out if not r.empty), key=lambda r: r.start)


def push_key_filters(info: TableInfo, filters: list) -> tuple[list[KeyRange], list]:
    """Narrow the table's key range by the filters on a single-column primary key.

    Returns (ranges, filters Spark must still evaluate). A pushed filter is exact (keys are
    memcomparable), so it is not returned. Filters on other columns, on a compound key, or whose
    value does not convert to the key's type are returned untouched."""
    ranges = [full_range(info)]
    if len(info.table_schema.primary_key) != 1 or info.hidden_row_id:
        return ranges, list(filters)
    col = info.table_schema.key_columns[0]
    kc = info.key_codec

    def key(v) -> bytes:
        return kc.encode_values((to_storage(info.name, col, v),))

    prefix, end = table_prefix(info.id), table_prefix(info.id + 1)
    remaining = []
    for f in filters:
        if getattr(f, "attribute", None) != (col.name,):
            remaining.append(f)
            continue
        try:
            if isinstance(f, EqualTo):
                k = key(f.value)
                narrowed = [KeyRange(k, after(k), True)]
            elif isinstance(f, In):
                ks = sorted({key(v) for v in f.value})
                narrowed = [KeyRange(k, after(k), True) for k in ks]
            elif isinstance(f, GreaterThan):
                narrowed = [KeyRange(after(key(f.value)), end)]
            elif isinstance(f, GreaterThanOrEqual):
                narrowed = [KeyRange(key(f.value), end)]
            elif isinstance(f, LessThan):
                narrowed = [KeyRange(prefix, key(f.value))]
            elif isinstance(f, LessThanOrEqual):
                narrowed = [KeyRange(prefix, after(key(f.value)))]
            elif isinstance(f, IsNotNull):
                continue  # key columns are never null
            else:
                remaining.append(f)
                continue
        except (SnapviewError, TypeError, ValueError, OverflowError):
            remaining.append(f)
            continue
        ranges = _intersect(ranges, narrowed)
    return ranges, remaining
