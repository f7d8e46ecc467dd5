"""spark_sink.ivm.index_state: the index state table's change computed over Arrow equals the
row-by-row rule (Python's equality) over seeded random changes: NULL index values, entries
repeated, rows whose indexed value did not change (put, never deleted), moved rows, and index
columns of several types. A planted rule that forgets the anti-join (deletes what a new image
still has) is caught."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pyarrow as pa
import pytest

from spark_sink.ivm import index_state
from spark_sink.ivm.index_state import index_change, index_change_rows

VALUES = {
    "int": (pa.int32(), lambda rng: rng.choice([None, 1, 2, 3, 7])),
    "string": (pa.string(), lambda rng: rng.choice([None, "a", "b", "ü", ""])),
    "date": (pa.date32(), lambda rng: rng.choice([None, dt.date(2024, 1, 1), dt.date(1970, 1, 2)])),
    "decimal": (
        pa.decimal128(10, 2),
        lambda rng: rng.choice([None, Decimal("1.50"), Decimal("0.00")]),
    ),
}


def _change(rng: random.Random, kind: str) -> tuple[pa.Table, pa.Array, list[tuple], list[int]]:
    """A change of t(id, c, v): old images (-1) and new images (+1) of some keys, as a table
    and as tuples."""
    typ, value = VALUES[kind]
    rows: list[tuple] = []
    weights: list[int] = []
    for key in rng.sample(range(40), rng.randrange(0, 25)):
        old = (key, value(rng), rng.randrange(9)) if rng.random() < 0.8 else None
        new = (key, value(rng) if rng.random() < 0.5 else (old or (0, None))[1], 1)
        if rng.random() < 0.2:
            new = None
        for img, w in ((old, -1), (new, 1)):
            if img is not None:
                rows.append(img)
                weights.append(w)
    schema = pa.schema([("id", pa.int64()), ("c", typ), ("v", pa.int64())])
    data = pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)
    return data, pa.array(weights, pa.int64()), rows, weights


def _as_sets(put: pa.Table, gone: pa.Table) -> tuple[set, set]:
    return (
        {tuple(r.values()) for r in put.to_pylist()},
        {tuple(r.values()) for r in gone.to_pylist()},
    )


@pytest.mark.parametrize("kind", sorted(VALUES))
@pytest.mark.parametrize("seed", range(3))
def test_the_arrow_rule_equals_the_row_rule(kind, seed):
    rng = random.Random(seed * 31 + len(kind))
    for _ in range(60):
        data, weights, rows, ws = _change(rng, kind)
        put, gone = index_change(data, weights, "c", ("id",))
        assert put.schema.names == gone.schema.names == ["k", "p_id"]
        got_put, got_gone = _as_sets(put, gone)
        assert len(got_put) == put.num_rows and len(got_gone) == gone.num_rows  # no repeats
        want_put, want_gone = index_change_rows(rows, ws, ("id", "c", "v"), "c", ("id",))
        assert (got_put, got_gone) == ({tuple(x) for x in want_put}, {tuple(x) for x in want_gone})


def test_an_unchanged_entry_is_put_and_never_deleted():
    data = pa.table({"id": [1, 1, 2, 2, 3], "c": [5, 5, 6, 7, None], "v": [0, 1, 0, 1, 1]})
    put, gone = index_change(data, pa.array([-1, 1, -1, 1, 1], pa.int64()), "c", ("id",))
    assert sorted(tuple(r.values()) for r in put.to_pylist()) == [(5, 1), (7, 2)]
    assert [tuple(r.values()) for r in gone.to_pylist()] == [(6, 2)]


def test_a_rule_that_forgets_the_kept_entries_is_caught(monkeypatch):
    """The comparison above can fail: without the anti-join an entry both deleted and put is
    deleted."""
    monkeypatch.setattr(index_state, "_without", lambda gone, put, names: gone.select(names))
    data = pa.table({"id": [1, 1], "c": [5, 5], "v": [0, 1]})
    put, gone = index_state.index_change(data, pa.array([-1, 1], pa.int64()), "c", ("id",))
    want = index_change_rows([(1, 5, 0), (1, 5, 1)], [-1, 1], ("id", "c", "v"), "c", ("id",))
    assert _as_sets(put, gone) != ({tuple(x) for x in want[0]}, {tuple(x) for x in want[1]})
