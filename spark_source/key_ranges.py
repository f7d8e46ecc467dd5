"""Primary-key ranges: what the partitions of a snapshot read cover.

Filters are not pushed into them: Spark 4.3 keeps the read it planned during filter pushdown on the
data source object that every query of a loaded DataFrame shares (every scan of it in one query
too), so ranges narrowed for one query's filter would be read by the next query (the whole table
asked for, the filtered rows returned). Spark evaluates every filter on the rows read.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvstore.mvcc.keys import table_prefix
from kvstore.table_info import TableInfo


def after(key: bytes) -> bytes:
    """The smallest bound above every version of ``key`` (user key + 8-byte ts suffix) and below
    every other user key: keys are prefix-free, so the next key differs inside key's length."""
    return key + b"\xff" * 9


@dataclass(frozen=True)
class KeyRange:
    start: bytes  # inclusive
    end: bytes  # exclusive

    @property
    def empty(self) -> bool:
        return self.start >= self.end


def full_range(info: TableInfo) -> KeyRange:
    """Every key of the table ``info``: its key prefix up to the next table's."""
    return KeyRange(table_prefix(info.id), table_prefix(info.id + 1))
