"""Bounded requests (issue 11, item 6): no single request can hold the store's writer or the
server's memory for as long as it likes; clients split, so a transaction of any size still
commits atomically."""

from __future__ import annotations

import grpc
import pytest

from kvstore import wire
from kvstore.errors import RequestTooLarge
from kvstore.limits import MAX_REQUEST_BYTES, MAX_REQUEST_MUTATIONS
from kvstore.mvcc.records import LockOp
from snapview_proto.snapview.v1 import kvstore_pb2 as kpb


@pytest.fixture
def items(client, table_name):
    client.create_table(table_name, "id BIGINT, body STRING", primary_key=["id"])
    return table_name


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _muts(client, table, n, body=""):
    info = client.describe_table(table)
    return [
        (
            LockOp.PUT,
            info.key_codec.encode({"id": i}),
            info.row_codec.encode({"id": i, "body": body}),
        )
        for i in range(n)
    ]


def test_too_many_mutations_are_refused_and_nothing_is_locked(client, items):
    muts = _muts(client, items, MAX_REQUEST_MUTATIONS + 1)
    with pytest.raises(RequestTooLarge, match=f"the limit is {MAX_REQUEST_MUTATIONS}"):
        client.store.prewrite(muts, muts[0][1], client.tso())
    assert client.read(items).num_rows == 0  # no lock in the way, nothing written


def test_too_many_bytes_are_refused(client, items):
    """Nine 4 MiB rows: within the message limit but above MAX_REQUEST_BYTES of mutations."""
    muts = _muts(client, items, 9, body="x" * ((4 << 20) - 64))
    assert sum(len(k) + len(v) for _, k, v in muts) > MAX_REQUEST_BYTES
    with pytest.raises(RequestTooLarge, match="bytes of keys and values"):
        client.store.prewrite(muts, muts[0][1], client.tso())
    assert client.read(items).num_rows == 0


def test_a_90_mb_request_is_refused_before_it_is_parsed(server, client, items):
    """The probe's 90 MB prewrite: RESOURCE_EXHAUSTED from gRPC at once, and the server's memory
    stays where it was (it used to end at 1.37 GB RSS for good)."""
    pid = server.proc.pid
    before = _rss_mb(pid)
    batch = kpb.MutationBatch(
        ops=bytes(1_000_000),
        keys=b"\x00\x00\x00\x10" * 1_000_000,
        key_sizes=[4] * 1_000_000,
        values=b"v" * (86 << 20),
        value_sizes=[0] * 1_000_000,
    )
    req = kpb.PrewriteRequest(packed=batch, primary=b"\x00\x00\x00\x10", start_ts=client.tso())
    with grpc.insecure_channel(
        server.address, options=[("grpc.max_send_message_length", 256 << 20)]
    ) as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/snapview.v1.KvStore/Prewrite")(req.SerializeToString(), timeout=30)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value.details()
    assert _rss_mb(pid) < before + 150, (before, _rss_mb(pid))
    with client.transaction() as t:  # the server is fine
        t.put(items, {"id": 1, "body": "ok"})


def test_a_large_transaction_is_split_and_commits_atomically(client, items):
    """40k rows (above one request's limit) in one transaction: the client splits the
    prewrites, and readers see none of it, then all of it."""
    n = 2 * MAX_REQUEST_MUTATIONS + 7
    before = client.tso()
    with client.transaction() as t:
        for i in range(n):
            t.put(items, {"id": i, "body": "b"})
    assert client.read(items, at=before).num_rows == 0
    assert client.read(items).num_rows == n


def test_packed_prewrite_is_checked_too(server, client, items):
    """The packed form counts the same as the plain one."""
    muts = _muts(client, items, MAX_REQUEST_MUTATIONS + 1)
    req = kpb.PrewriteRequest(
        packed=wire.pack_mutations(muts), primary=muts[0][1], start_ts=client.tso()
    )
    with grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/snapview.v1.KvStore/Prewrite")(req.SerializeToString(), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "the limit is" in e.value.details()
