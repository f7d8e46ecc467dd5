"""Timestamps must come from the TSO (issue 11, items 2 and 3): a far-future commit_ts, start_ts
or GC safepoint is refused with INVALID_ARGUMENT, and writes keep working afterwards."""

from __future__ import annotations

import grpc
import pytest

from kvstore.errors import FailedPrecondition, InvalidArgument
from kvstore.mvcc.records import LockOp
from snapview_proto.snapview.v1 import kvstore_pb2 as kpb

FAR = (1 << 64) - 2


@pytest.fixture
def accounts(client, table_name):
    client.create_table(table_name, "id BIGINT, balance BIGINT", primary_key=["id"])
    return table_name


def _row(client, table, i, balance):
    info = client.describe_table(table)
    k = info.key_codec.encode({"id": i})
    return k, info.row_codec.encode({"id": i, "balance": balance})


def test_far_future_commit_ts_is_refused(client, accounts):
    """Commit at 2^64-2: INVALID_ARGUMENT naming commit_ts; the lock stays, a proper commit
    works, and a later writer of the key is not blocked."""
    k, v = _row(client, accounts, 1, 10)
    start = client.tso()
    client.store.prewrite([(LockOp.PUT, k, v)], k, start)
    with pytest.raises(InvalidArgument, match=r"commit_ts \d+ is above every timestamp the TSO"):
        client.store.commit(start, FAR, [k])
    client.store.commit(start, client.tso(), [k])
    with client.transaction() as t:
        t.put(accounts, {"id": 1, "balance": 20})
    assert client.read(accounts).to_pylist() == [{"id": 1, "balance": 20}]


def test_far_future_commit_ts_over_raw_grpc(server, client, accounts):
    """The same through raw gRPC (what a non-Python client could send): the status code is
    INVALID_ARGUMENT, and resolve_locks with a future commit_ts is refused too."""
    k, v = _row(client, accounts, 2, 5)
    start = client.tso()
    client.store.prewrite([(LockOp.PUT, k, v)], k, start)
    with grpc.insecure_channel(server.address) as ch:
        commit = ch.unary_unary("/snapview.v1.KvStore/Commit")
        with pytest.raises(grpc.RpcError) as e:
            commit(kpb.CommitRequest(start_ts=start, commit_ts=FAR, keys=[k]).SerializeToString())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "commit_ts" in e.value.details()
        resolve = ch.unary_unary("/snapview.v1.KvStore/ResolveLocks")
        with pytest.raises(grpc.RpcError) as e:
            resolve(kpb.ResolveLocksRequest(start_ts=start, commit_ts=FAR).SerializeToString())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    client.store.rollback(start, [k])


def test_far_future_start_ts_is_refused(client, accounts):
    """A prewrite at a start_ts the TSO never issued: INVALID_ARGUMENT; nothing locked."""
    k, v = _row(client, accounts, 3, 1)
    with pytest.raises(InvalidArgument, match=r"start_ts \d+ is above every timestamp"):
        client.store.prewrite([(LockOp.PUT, k, v)], k, FAR)
    with client.transaction() as t:
        t.put(accounts, {"id": 3, "balance": 2})
    assert client.read(accounts).num_rows == 1


def test_gc_safepoint_beyond_the_tso_is_refused(server, client, accounts):
    """Gc(2^64-2) is refused and does not move the safepoint: every later write still works. A
    safepoint the TSO has issued is accepted."""
    with grpc.insecure_channel(server.address) as ch:
        gc = ch.unary_unary("/snapview.v1.KvStore/Gc")
        with pytest.raises(grpc.RpcError) as e:
            gc(kpb.GcRequest(safepoint=FAR).SerializeToString())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "safepoint" in e.value.details()
    with pytest.raises(InvalidArgument, match="safepoint"):
        client.store.gc(client.tso() + (1 << 40))
    with client.transaction() as t:
        t.put(accounts, {"id": 4, "balance": 4})
    # An issued safepoint past the coordinator's holds (here: now - --retention) is refused too,
    # with FAILED_PRECONDITION naming the hold; one at the oldest hold is accepted.
    with pytest.raises(FailedPrecondition, match="retention hold"):
        client.store.gc(client.tso())
    client.store.gc(client.gc_status().holds[0].ts)
    with client.transaction() as t:
        t.put(accounts, {"id": 5, "balance": 5})
    assert sorted(r["id"] for r in client.read(accounts).to_pylist()) == [4, 5]
