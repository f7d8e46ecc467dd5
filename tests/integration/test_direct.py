"""Direct prewrites into the server's LMDB environment from another process (kvstore.direct)."""

from __future__ import annotations

import pytest

import coordinator
from kvstore.direct import DirectPrewriter, DirectUnavailable, same_instance
from kvstore.errors import InvalidArgument, KeyIsLocked, SchemaMismatch
from kvstore.mvcc.records import LockOp
from tests.conftest import server_fixture


def _rows(info, ids, v="x"):
    return [
        (
            LockOp.PUT,
            info.key_codec.encode({"id": i}),
            info.row_codec.encode({"id": i, "v": v * 50}),
        )
        for i in ids
    ]


small_server = server_fixture("d", "--map-size-mb", "1", scope="function")


def test_direct_prewrite_then_coordinator_commit(small_server):
    """Rows locked directly become visible, all at once, when the epoch commits; the map the
    server grows meanwhile is adopted; a full map hands the chunk back to the server."""
    c = coordinator.connect(small_server.address)
    info = c.create_table("t", "id BIGINT, v STRING", primary_key=["id"])
    st = c.status()
    assert same_instance(st.data_dir, st.instance_id)
    assert not same_instance(st.data_dir, "another-server")
    direct = DirectPrewriter(st.lmdb_path, st.map_size_bytes)
    e = c.jobs.open_transaction("t", 0, batch="b:0", owner="o")
    handed_back = 0
    for start in range(0, 20_000, 2000):
        muts = _rows(info, range(start, start + 2000))
        try:
            direct.prewrite(info, muts, e.primary_key, e.start_ts, 20_000)
        except DirectUnavailable:
            handed_back += 1  # the 1 MiB map is full: the server takes the chunk and grows it
            c.prewrite(muts, e.primary_key, e.start_ts, 20_000)
    assert handed_back >= 1
    assert c.status().map_size_bytes > st.map_size_bytes
    done = c.jobs.commit_transaction("t", e.epoch, e.start_ts)
    assert c.read("t", at=done.commit_ts).num_rows == 20_000
    c.close()


def test_direct_prewrite_hands_back_what_needs_the_server(server, client, table_name):
    """A lock in the way is raised (the caller then goes through the server); a bad row is
    refused before anything is written, like the server would."""
    info = client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    st = client.status()
    direct = DirectPrewriter(st.lmdb_path, st.map_size_bytes)
    other = client.tso()
    client.store.prewrite(_rows(info, [1]), info.key_codec.encode({"id": 1}), other, 60_000)
    e = client.jobs.open_transaction(table_name, 0, batch="b:0", owner="o")
    with pytest.raises(KeyIsLocked):
        direct.prewrite(info, _rows(info, [0, 1, 2]), e.primary_key, e.start_ts, 20_000)
    bad = [(LockOp.PUT, info.key_codec.encode({"id": 5}), b"\x01junk")]
    with pytest.raises(SchemaMismatch):
        direct.prewrite(info, bad, e.primary_key, e.start_ts, 20_000)
    # A key twice in one call is refused as the server refuses it, even for rows encoded here.
    twice = _rows(info, [7, 8]) + _rows(info, [7], v="y")
    with pytest.raises(InvalidArgument, match=r"key \(7,\) appears twice"):
        direct.prewrite(info, twice, e.primary_key, e.start_ts, 20_000, encoded_here=True)
    client.jobs.abort_transaction(table_name, e.epoch, e.start_ts)
    client.store.rollback(other, [info.key_codec.encode({"id": 1})])
    assert client.read(table_name).num_rows == 0


def test_direct_deletes_of_keys_encoded_here(server, client, table_name):
    """A DELETE built in this process (the writer's own key codec) is locked directly and
    removes the row at commit; one built elsewhere is handed back to the server, which checks
    its key."""
    info = client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    with client.transaction() as t:
        for i in range(4):
            t.put(table_name, {"id": i, "v": "x"})
    st = client.status()
    direct = DirectPrewriter(st.lmdb_path, st.map_size_bytes)
    e = client.jobs.open_transaction(table_name, 0, batch="b:0", owner="o")
    gone = [(LockOp.DELETE, info.key_codec.encode({"id": i}), b"") for i in (1, 2)]
    with pytest.raises(DirectUnavailable, match="DELETE"):
        direct.prewrite(info, gone, e.primary_key, e.start_ts, 20_000)
    muts = gone + _rows(info, [9])
    direct.prewrite(info, muts, e.primary_key, e.start_ts, 20_000, encoded_here=True)
    done = client.jobs.commit_transaction(table_name, e.epoch, e.start_ts)
    got = sorted(r["id"] for r in client.read(table_name, at=done.commit_ts).to_pylist())
    assert got == [0, 3, 9]
