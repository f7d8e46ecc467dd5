"""What an incremental epoch reads, against a real ``snapview serve``: the columnar reads
(``StoreInputs.changes_arrow``, ``fetch_arrow``) give the same rows as the row reads
(``changes``, ``fetch``), by primary key, by a range of its leading columns, and through an index
state table that lags the source (the rows that gained a looked-up value since the index's version
come from the change), at the old and at the new barrier, over gRPC and read directly."""

from __future__ import annotations

import pytest

from kvstore.direct import DirectPrewriter
from kvstore.direct_reads import DirectReader
from kvstore.table_info import STATE
from spark_sink.ivm.inputs import StoreInputs
from spark_sink.ivm.ops.operator import NEW, OLD, Access, choose_access
from spark_sink.ivm.ops.scan import index_table
from tests.conftest import connected, server_fixture

store_inputs_server = server_fixture("store_inputs")


@pytest.fixture(scope="module")
def loaded(store_inputs_server):
    for c in connected(store_inputs_server):
        yield c, *_load(c)


def _load(c):
    src = c.create_table("si_src", "id BIGINT, k INT, v STRING", primary_key=["id"])
    st = index_table(
        "si_view",
        Access("si_src", ("k",), "index", "k"),
        {"id": "BIGINT", "k": "INT", "v": "STRING"},
        ("id",),
    )
    ix = c.create_table(st.name, st.ddl, list(st.primary_key), kind=STATE)
    with c.transaction() as t:
        for i in range(200):
            row = {"id": i, "k": i % 10 if i % 13 else None, "v": f"r{i}"}
            t.put("si_src", row)
            if row["k"] is not None:
                t.put(st.name, {"k": row["k"], "p_id": i})
    old = c.tso()
    with c.transaction() as t:  # the source moves on; the index stays at its old version
        for i in range(0, 200, 5):
            t.delete("si_src", {"id": i})
        for i in range(1, 200, 5):
            t.put("si_src", {"id": i, "k": (i + 3) % 10, "v": "moved"})
        for i in range(200, 230):
            t.put("si_src", {"id": i, "k": i % 4, "v": "new"})
    new = c.tso()
    return src, ix, old, new


def _inputs(c, src, ix, old, new, direct=None) -> StoreInputs:
    return StoreInputs(
        c,
        {"si_src": src},
        {"si_src": old},
        {"si_src": new},
        old,
        {("si_src", "k"): ix},
        direct=direct,
    )


def _rows(table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


@pytest.mark.parametrize("how", ["rpc", "direct"])
def test_the_columnar_reads_equal_the_row_reads(loaded, how):
    c, src, ix, old, new = loaded
    direct = None
    if how == "direct":
        st = c.status()
        prewriter = DirectPrewriter(st.lmdb_path, st.map_size_bytes)
        direct = DirectReader(prewriter.storage)
    try:
        inputs = _inputs(c, src, ix, old, new, direct)
        rows, weights = inputs.changes("si_src")
        data, w = inputs.changes_arrow("si_src")
        got = [tuple(r.values()) for r in data.to_pylist()]
        assert sorted(zip(rows, weights, strict=True), key=repr) == sorted(
            zip(got, w.to_pylist(), strict=True), key=repr
        )
        assert len(rows) > 60  # deletes, moves and inserts: both images of each move
        by_pk = Access("si_src", ("id",), "pk")
        by_k = Access("si_src", ("k",), "index", "k")
        for access, values in (
            (by_pk, {(1,), (2,), (5,), (205,), (999,)}),
            (by_k, {(1,), (4,), (3,)}),
        ):
            for side in (OLD, NEW):
                want = sorted(inputs.fetch(access, side, values), key=repr)
                got = _rows(inputs.fetch_arrow(access, side, values))
                assert got == want, (access.kind, side)
                assert want, (access.kind, side)
                # the same rows over the columns asked for (the index's gains among them)
                some = sorted(inputs.fetch(access, side, values, ("v", "id")), key=repr)
                assert some == sorted(((r[2], r[0]) for r in want), key=repr), (access, side)
        # through the lagging index at the new barrier: a row that moved to k = 4 is found
        moved = {r for r in inputs.fetch(by_k, NEW, {(4,)}) if r[2] == "moved"}
        assert moved and moved <= set(_rows(inputs.fetch_arrow(by_k, NEW, {(4,)})))
        assert _rows(inputs.fetch_arrow(by_k, NEW, set())) == []
    finally:
        if direct is not None:
            prewriter.close()


def test_choose_access_prefers_the_key_then_its_leading_columns_then_an_index():
    pk = ("o", "n")
    assert choose_access("t", ("n", "o"), pk).kind == "pk"
    by_o = choose_access("t", ("x", "o"), pk)
    assert (by_o.kind, by_o.prefix) == ("prefix", ("o",))
    by_n = choose_access("t", ("n",), pk)  # not a leading column: an index
    assert (by_n.kind, by_n.index_column) == ("index", "n")


@pytest.mark.parametrize("how", ["rpc", "direct"])
def test_a_lookup_by_leading_key_columns_reads_the_rows_of_those_values(store_inputs_server, how):
    """A table keyed (o, n) looked up by o (and by o with a non-key column): each value's rows
    at the old and at the new barrier, exactly, row and columnar reads alike, with no index."""
    for c in connected(store_inputs_server):
        info = c.create_table("si_lines", "o BIGINT, n INT, x STRING", primary_key=["o", "n"])
        at_old: dict[tuple, tuple] = {}
        with c.transaction() as t:
            for o in range(1, 40):
                for n in range(o % 5):
                    row = (o, n, f"x{o}.{n}")
                    t.put("si_lines", dict(zip(("o", "n", "x"), row, strict=True)))
                    at_old[row[:2]] = row
        old = c.tso()
        at_new = dict(at_old)
        with c.transaction() as t:
            for o, n in list(at_old):
                if (o + n) % 3 == 0:
                    t.delete("si_lines", {"o": o, "n": n})
                    del at_new[(o, n)]
            for o in (7, 8, 100):
                row = (o, 9, "new")
                t.put("si_lines", dict(zip(("o", "n", "x"), row, strict=True)))
                at_new[row[:2]] = row
        new = c.tso()
        direct = prewriter = None
        if how == "direct":
            st = c.status()
            prewriter = DirectPrewriter(st.lmdb_path, st.map_size_bytes)
            direct = DirectReader(prewriter.storage)
        try:
            inputs = StoreInputs(
                c, {"si_lines": info}, {"si_lines": old}, {"si_lines": new}, old, {}, direct=direct
            )
            for access, values in (
                (choose_access("si_lines", ("o",), ("o", "n")), {(7,), (8,), (9,), (100,), (999,)}),
                (choose_access("si_lines", ("o", "x"), ("o", "n")), {(6, "?"), (7, "new")}),
            ):
                assert access.kind == "prefix"
                wanted = {v[0] for v in values}
                for side, rows in ((OLD, at_old), (NEW, at_new)):
                    want = sorted(r for r in rows.values() if r[0] in wanted)
                    assert want, side
                    assert sorted(inputs.fetch(access, side, values)) == want, side
                    some = inputs.fetch(access, side, values, ("x", "o"))
                    assert sorted(some) == sorted((r[2], r[0]) for r in want), side
                    assert sorted(_rows(inputs.fetch_arrow(access, side, values))) == want, side
        finally:
            c.drop_table("si_lines")
            if prewriter is not None:
                prewriter.close()
