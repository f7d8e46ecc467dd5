"""A view dropped and built again under the same name starts clean (issue 24, item 4): its new
job does not inherit the dropped job's epochs, so the view holds the whole query's result, not
the delta since the dropped view's last barrier. The same for ``drop_old_table``."""

from __future__ import annotations

import pytest

from spark_sink import MaterializedView
from tests.conftest import client_fixture, server_fixture

QUERY = "SELECT g, SUM(v), COUNT(*) FROM {src} GROUP BY g"


rebuild_server = server_fixture("rebuild", "--barrier-interval", "200ms")
rc = client_fixture("rebuild_server")


def _insert(c, src: str, ids) -> None:
    with c.transaction() as t:
        for i in ids:
            t.put(src, {"id": i, "g": 0, "v": 1})


def _build(spark, server, src: str, view: str, drop_old: bool = False) -> MaterializedView:
    b = (
        MaterializedView.builder(spark)
        .coordinator(server.address)
        .query(QUERY.format(src=src))
        .target(view)
        .primary_key("g")
        .column_names("g", "s", "n")
        .drop_old_table(drop_old)
    )
    return b.build()


def _contents(c, view: str) -> dict:
    c.describe_table(view, refresh=True)  # the view's table may be a new one since the last read
    return {r["g"]: (r["s"], r["n"]) for r in c.snapshot([view]).read(view).to_pylist()}


def _maintained(c, v: MaterializedView) -> dict:
    v.maintain_available(until=c.tso(), timeout=60)
    return _contents(c, v.target)


@pytest.mark.parametrize("how", ["drop_table", "drop_old_table"])
def test_a_view_dropped_and_built_again_holds_the_whole_result(spark, rebuild_server, rc, how):
    src, view = f"r_{how}", f"r_view_{how}"
    rc.create_table(src, "id BIGINT, g INT, v BIGINT", primary_key=["id"])
    _insert(rc, src, range(5))
    assert _maintained(rc, _build(spark, rebuild_server, src, view)) == {0: (5, 5)}
    if how == "drop_table":
        rc.drop_table(view, cascade=True)
    _insert(rc, src, (5, 6))
    again = _build(spark, rebuild_server, src, view, drop_old=how == "drop_old_table")
    assert _maintained(rc, again) == {0: (7, 7)}
