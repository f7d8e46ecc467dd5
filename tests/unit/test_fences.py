"""Table fences on a real LMDB store: while a revision fences a table, no other transaction
locks or one-phase commits a key of it (TableFenced, UNAVAILABLE: clients retry), the revision
itself still writes, other tables are untouched, and lifting the fence lets writers in again."""

from __future__ import annotations

import pytest

from kvstore import actions
from kvstore.errors import TableFenced, Unavailable
from kvstore.mvcc.records import LockOp


@pytest.fixture
def tables(store):
    a = store.create_table("fenced_a", "id BIGINT, v BIGINT", ["id"])
    b = store.create_table("fenced_b", "id BIGINT, v BIGINT", ["id"])
    return a, b


def _put(info, k: int, v: int):
    return (LockOp.PUT, info.key_codec.encode({"id": k}), info.row_codec.encode({"id": k, "v": v}))


def test_a_fence_refuses_other_writers_of_its_table_only(store, clock, tables):
    a, b = tables
    store.run_write(lambda ctx: actions.set_fence(ctx, a.id, a.name, 7))
    m = _put(a, 1, 1)
    with pytest.raises(TableFenced, match="'fenced_a' is being revised \\(revision 7\\)"):
        store.prewrite([m], m[1], clock())
    with pytest.raises(TableFenced):
        store.prewrite([m], m[1], clock(), try_one_pc=True)
    # One request touching both tables is refused whole: nothing of it is written.
    mb = _put(b, 1, 1)
    with pytest.raises(TableFenced):
        store.prewrite([mb, m], mb[1], clock())
    assert store.get(mb[1], clock()) is None
    assert issubclass(TableFenced, Unavailable)  # retried by the client's RetryPolicy
    # Another table is not fenced.
    assert store.prewrite([mb], mb[1], clock(), try_one_pc=True) > 0
    # The revision holding the fence writes through it, with locks or in one phase.
    start = clock()
    store.run_write(lambda ctx: actions.prewrite(ctx, [m], m[1], start, 3000, 1, 7))
    store.commit(start, clock(), [m[1]])
    assert store.get(m[1], clock()) == m[2]
    m3 = _put(a, 3, 3)
    start = clock()
    store.run_write(lambda ctx: actions.one_pc_commit(ctx, [m3], m3[1], start, clock(), 7))
    assert store.get(m3[1], clock()) == m3[2]
    # Lifted: writers get in again, and the record is gone when no fence is left.
    store.run_write(lambda ctx: actions.clear_fence(ctx, a.id))
    m2 = _put(a, 2, 2)
    assert store.prewrite([m2], m2[1], clock(), try_one_pc=True) > 0
    with store.storage.read_txn() as r:
        assert actions.fences(r) == {}
