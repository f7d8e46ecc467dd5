"""An outer join side's match counts (spark_sink.ivm.outer.MatchCounts): a step reads the old
counts by key and records the new ones; stepped again for the same keys and change (the row
rules taking an epoch the columnar path handed back after it stepped), each key is written once;
a count below 0 is refused, naming the key."""

from __future__ import annotations

import pytest

from kvstore.errors import SchemaMismatch
from kvstore.table_info import TableInfo
from spark_sink.ivm.ops.outer_join import matches_table
from spark_sink.ivm.outer import MatchCounts


class _Stored:
    def __init__(self, rows: dict[tuple, list]) -> None:
        self.rows = rows

    def read_state(self, info: TableInfo, keys: list[tuple]) -> dict[tuple, list]:
        return {k: self.rows[k] for k in keys if k in self.rows}


def _counts(rows: dict[tuple, list]) -> MatchCounts:
    st = matches_table("v", 0, "left", ["bigint"])
    info = TableInfo(st.name, 70, st.ddl, st.primary_key, kind="state")
    return MatchCounts(info, _Stored(rows), "v")  # type: ignore[arg-type]


def test_a_step_records_the_changed_counts():
    m = _counts({(1,): [2], (2,): [1]})
    got = m.step({(1,), (2,), (3,)}, {(1,): 1, (2,): -1, (3,): 2})
    assert got == {(1,): (2, 3), (2,): (1, 0), (3,): (0, 2)}
    assert sorted(m.upserts) == [[1, 3], [3, 2]] and m.deletes == [[2, 0]]


def test_a_step_taken_again_writes_each_key_once():
    m = _counts({(1,): [2], (2,): [1]})
    keys, change = {(1,), (2,), (3,)}, {(1,): 1, (2,): -1, (3,): 2}
    first = m.step(keys, change)
    assert m.step(keys, change) == first
    assert sorted(m.upserts) == [[1, 3], [3, 2]] and m.deletes == [[2, 0]]


def test_a_count_below_zero_names_the_key():
    m = _counts({(1,): [1]})
    with pytest.raises(SchemaMismatch, match=r"join key \(1,\) would have -1 matches"):
        m.step({(1,)}, {(1,): -2})
