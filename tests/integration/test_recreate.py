"""A long-lived client after another client drops and recreates a table (issue 24, item 7).

Client A caches table ids. B drops ``t`` and makes a new ``t``: A's next calls go to the new
table (its id asked for again by name, once), and no read of A mixes the old and the new table:
a read at a timestamp before the new table existed is refused, not answered from either."""

from __future__ import annotations

import pytest

import coordinator
from tests.conftest import client_fixture

SCHEMA = "id BIGINT, v BIGINT"


other = client_fixture("server")  # client B, beside the module's client A


def _recreate(b: coordinator.Client, name: str, rows: list[dict], schema: str = SCHEMA) -> None:
    b.drop_table(name)
    b.create_table(name, schema, primary_key=["id"])
    with b.transaction() as txn:
        for r in rows:
            txn.put(name, r)


def _make(a: coordinator.Client, name: str) -> int:
    """``name`` with row 1, read by A (so A caches its id); a ts when it held that row."""
    a.create_table(name, SCHEMA, primary_key=["id"])
    with a.transaction() as txn:
        txn.put(name, {"id": 1, "v": 1})
    assert a.read(name).to_pylist() == [{"id": 1, "v": 1}]
    return a.tso()


def test_reads_and_writes_of_a_long_lived_client_reach_the_new_table(client, other, table_name):
    a, b = client, other
    _make(a, table_name)
    _recreate(b, table_name, [{"id": 2, "v": 2}])
    assert a.read(table_name).to_pylist() == [{"id": 2, "v": 2}]
    assert a.get(table_name, {"id": 2}) == {"id": 2, "v": 2}

    _recreate(b, table_name, [{"id": 3, "v": 3}])
    assert a.get(table_name, {"id": 3}) == {"id": 3, "v": 3}  # a point read refreshes too

    _recreate(b, table_name, [{"id": 4, "v": 4}])
    with a.transaction() as txn:  # began after the recreate: its writes are for the new table
        txn.put(table_name, {"id": 5, "v": 5})  # encoded with the cached (dropped) id
    assert b.read(table_name).to_pylist() == [{"id": 4, "v": 4}, {"id": 5, "v": 5}]


def test_a_read_before_the_new_table_existed_is_refused_not_mixed(client, other, table_name):
    a, b = client, other
    before = _make(a, table_name)
    snap = a.snapshot([table_name], mode="latest")
    _recreate(b, table_name, [{"id": 2, "v": 2}])
    for read in (
        lambda: a.read(table_name, at=before),
        lambda: a.get(table_name, {"id": 1}, at=before),
        lambda: snap.read(table_name),
    ):
        with pytest.raises(coordinator.TableNotFound, match="did not exist at"):
            read()
    assert a.read(table_name).to_pylist() == [{"id": 2, "v": 2}]  # and the latest is the new one


def test_a_table_with_no_predecessor_reads_empty_before_it_was_made(client, other, table_name):
    """Only a name that meant another table is refused before its creation: a new name is
    simply empty then (a stale snapshot of a table just made), and ``recreated`` tells them
    apart on every client."""
    a, b = client, other
    before = a.tso()
    a.create_table(table_name, SCHEMA, primary_key=["id"])
    assert not a.describe_table(table_name).recreated
    assert a.read(table_name, at=before).num_rows == 0
    assert a.get(table_name, {"id": 1}, at=before) is None
    _recreate(b, table_name, [])
    assert b.describe_table(table_name).recreated


def test_a_transaction_that_began_before_the_recreate_applies_nothing(client, other, table_name):
    a, b = client, other
    _make(a, table_name)
    txn = a.transaction()
    assert txn.get(table_name, {"id": 1}) == {"id": 1, "v": 1}  # it read the old table
    txn.put(table_name, {"id": 7, "v": 7})
    _recreate(b, table_name, [{"id": 2, "v": 2}])
    with pytest.raises(coordinator.TableNotFound, match="after this transaction began.*retry"):
        txn.commit()
    assert b.read(table_name).to_pylist() == [{"id": 2, "v": 2}]
    with a.transaction() as retry:  # the retry, a new transaction, writes the new table
        retry.put(table_name, {"id": 7, "v": 7})
    assert b.read(table_name).to_pylist() == [{"id": 2, "v": 2}, {"id": 7, "v": 7}]


def test_a_table_made_anew_with_another_schema_or_not_at_all(client, other, table_name):
    a, b = client, other
    _make(a, table_name)
    _recreate(b, table_name, [{"id": 2, "w": "x"}], schema="id BIGINT, w STRING")
    assert a.read(table_name).to_pylist() == [{"id": 2, "w": "x"}]
    b.drop_table(table_name)
    with pytest.raises(coordinator.TableNotFound, match=f"table '{table_name}' does not exist"):
        a.read(table_name)
