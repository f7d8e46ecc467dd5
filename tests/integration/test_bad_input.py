"""Bad input gets a precise status code and a message naming the table, key or field; nothing is
written; the server never answers UNKNOWN and stays up."""

from __future__ import annotations

import grpc
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import coordinator
from coordinator.jobs import JobState
from kvstore.errors import InvalidArgument, NotFound, SchemaMismatch, ValueTooLarge
from kvstore.mvcc.records import LockOp
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb
from snapview_proto.snapview.v1 import kvstore_pb2 as kpb
from tests.conftest import cli


@pytest.fixture
def accounts(client, table_name):
    client.create_table(table_name, "id BIGINT, balance BIGINT, note STRING", primary_key=["id"])
    return table_name


def assert_nothing_written(client, table):
    assert client.read(table).num_rows == 0


def test_unknown_table(client):
    """Reading or writing an unknown table: NOT_FOUND naming it."""
    with pytest.raises(NotFound, match="table 'ghost' does not exist"):
        client.read("ghost")
    with pytest.raises(NotFound, match="ghost"):
        with client.transaction() as t:
            t.put("ghost", {"id": 1})


@pytest.mark.parametrize(
    "row, field",
    [
        ({"id": 1, "balance": "ten"}, "balance"),  # wrong type
        ({"balance": 10}, "id"),  # missing key column
        ({"id": 1, "balance": 1, "colour": "red"}, "colour"),  # extra column
    ],
)
def test_row_not_matching_schema(client, accounts, row, field):
    """A row that does not fit: INVALID_ARGUMENT naming table and column; nothing written."""
    with pytest.raises(SchemaMismatch) as e:
        with client.transaction() as t:
            t.put(accounts, {"id": 99, "balance": 1})
            t.put(accounts, row)
    assert e.value.code == "INVALID_ARGUMENT"
    assert repr(accounts) in str(e.value) and repr(field) in str(e.value)
    assert_nothing_written(client, accounts)


def test_malformed_row_bytes_rejected_by_server(client, accounts):
    """Raw bytes that are not a row of the schema: the server answers INVALID_ARGUMENT naming
    the table and key, and writes nothing of the request."""
    info = client.describe_table(accounts)
    good_key = info.key_codec.encode({"id": 1})
    good = info.row_codec.encode({"id": 1, "balance": 5})
    bad_key = info.key_codec.encode({"id": 2})
    ts = client.tso()
    with pytest.raises(InvalidArgument) as e:
        client.store.prewrite(
            [(LockOp.PUT, good_key, good), (LockOp.PUT, bad_key, b"\x01junk")], good_key, ts
        )
    assert accounts in str(e.value) and bad_key.hex() in str(e.value)
    assert_nothing_written(client, accounts)
    # a row whose key columns disagree with its key
    other = info.row_codec.encode({"id": 3, "balance": 5})
    with pytest.raises(InvalidArgument, match="do not match its key"):
        client.store.prewrite([(LockOp.PUT, bad_key, other)], bad_key, client.tso())


def test_malformed_key_rejected(client, accounts):
    """A key that does not decode for its table: INVALID_ARGUMENT naming the table."""
    info = client.describe_table(accounts)
    with pytest.raises(InvalidArgument, match=f"table '{accounts}': malformed key"):
        client.store.prewrite(
            [(LockOp.DELETE, info.prefix + b"\x01", b"")], info.prefix + b"\x01", client.tso()
        )


def test_oversized_value(client, accounts):
    """A value above the limit: INVALID_ARGUMENT naming table, key and sizes; nothing written."""
    with pytest.raises(ValueTooLarge) as e:
        with client.transaction() as t:
            t.put(accounts, {"id": 1, "balance": 1, "note": "x" * (5 << 20)})
    assert e.value.code == "INVALID_ARGUMENT"
    assert accounts in str(e.value) and "exceeds the limit" in str(e.value)
    assert_nothing_written(client, accounts)


def test_commit_ts_not_after_start_ts(client, accounts):
    """commit_ts <= start_ts: INVALID_ARGUMENT naming both; the lock stays for a proper commit."""
    info = client.describe_table(accounts)
    k = info.key_codec.encode({"id": 1})
    start = client.tso()
    client.store.prewrite(
        [(LockOp.PUT, k, info.row_codec.encode({"id": 1, "balance": 1}))], k, start
    )
    with pytest.raises(InvalidArgument, match=f"commit_ts {start} must be greater than start_ts"):
        client.store.commit(start, start, [k])
    client.store.commit(start, client.tso(), [k])
    assert client.read(accounts).num_rows == 1


@pytest.mark.parametrize("key", [b"", b"\x00\x00\x00\x10" + b"k" * 600])
def test_keys_outside_lmdb_limits(client, key):
    """An empty or over-long key gets INVALID_ARGUMENT naming the key, not an LMDB failure."""
    ts = client.tso()
    for call in (
        lambda: client.store.commit(ts, ts + 1, [key]),
        lambda: client.store.rollback(ts, [key]),
        lambda: client.store.check_txn_status(key, ts),
        lambda: client.store.txn_heartbeat(key, ts, 100),
        lambda: client.store.get(key, ts),
    ):
        with pytest.raises(InvalidArgument, match="key"):
            call()


def test_bad_table_definitions(client):
    """create_table refuses bad names, types and keys with INVALID_ARGUMENT naming them."""
    with pytest.raises(InvalidArgument, match="not an identifier"):
        client.create_table("bad name", "id BIGINT", ["id"])
    with pytest.raises(InvalidArgument, match="unsupported type 'UUID'"):
        client.create_table("t_bad_type", "id UUID", ["id"])
    with pytest.raises(InvalidArgument, match="primary key column 'nope'"):
        client.create_table("t_bad_pk", "id BIGINT", ["nope"])
    with pytest.raises(coordinator.AlreadyExists):
        client.create_table("t_dup", "id BIGINT", ["id"])
        client.create_table("t_dup", "id BIGINT", ["id"])


def _all_methods():
    for svc_pb, svc in ((kpb, "KvStore"), (cpb, "Coordinator")):
        for m in svc_pb.DESCRIPTOR.services_by_name[svc].methods:
            kind = (
                ("stream_stream" if m.client_streaming else "unary_stream")
                if m.server_streaming
                else "unary_unary"
            )
            yield f"/snapview.v1.{svc}/{m.name}", kind


def _call(ch: grpc.Channel, method: str, kind: str, payload: bytes) -> list:
    """Send one raw request in the method's own call shape; return the raw responses."""
    if kind == "unary_unary":
        return [ch.unary_unary(method)(payload, timeout=10)]
    if kind == "unary_stream":
        return list(ch.unary_stream(method)(payload, timeout=10))
    return list(ch.stream_stream(method)(iter([payload]), timeout=10))


@pytest.mark.parametrize("method, kind", list(_all_methods()))
def test_garbage_bytes_to_every_method(server, method, kind):
    """Garbage sent to any RPC: INVALID_ARGUMENT naming the method's request; never UNKNOWN."""
    with grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            _call(ch, method, kind, b"\xff\xff\xff\xff garbage \x00\x01")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert method.split("/")[-1] in e.value.details()


@pytest.mark.parametrize("method, kind", list(_all_methods()))
def test_empty_request_to_every_method_is_never_unknown(server, method, kind):
    """An empty (all defaults) request gets a definite answer or a precise status, not UNKNOWN
    or INTERNAL, and the server stays up."""
    with grpc.insecure_channel(server.address) as ch:
        try:
            _call(ch, method, kind, b"")
        except grpc.RpcError as e:
            assert e.code() in (
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.FAILED_PRECONDITION,
            ), (e.code(), e.details())
    c = coordinator.connect(server.address)
    assert c.tso() > 0
    c.close()


@pytest.mark.parametrize(
    "batch, message",
    [
        (
            kpb.MutationBatch(
                ops=b"\x00", keys=b"abcde", key_sizes=[4], values=b"", value_sizes=[0]
            ),
            "sizes do not add up",
        ),
        (
            kpb.MutationBatch(
                ops=b"\x00\x00", keys=b"abcde", key_sizes=[5], values=b"", value_sizes=[0]
            ),
            "2 ops but 1 key sizes",
        ),
        (
            kpb.MutationBatch(
                ops=b"\x09", keys=b"\x00\x00\x00\x10k", key_sizes=[5], values=b"", value_sizes=[0]
            ),
            "unknown op",
        ),
    ],
)
def test_malformed_packed_mutations(server, batch, message):
    """A packed mutation batch whose parts disagree: INVALID_ARGUMENT saying how."""
    from snapview_proto.snapview.v1 import kvstore_pb2_grpc

    with grpc.insecure_channel(server.address) as ch:
        stub = kvstore_pb2_grpc.KvStoreStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.Prewrite(
                kpb.PrewriteRequest(packed=batch, primary=b"\x00\x00\x00\x10k", start_ts=123),
                timeout=10,
            )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in e.value.details()


def _raw(server, service: str, method: str, req) -> grpc.RpcError:
    """Send ``req`` to ``service/method`` over raw gRPC; return the error it must fail with."""
    with grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary(f"/snapview.v1.{service}/{method}")(req.SerializeToString(), timeout=10)
    return e.value


@pytest.mark.parametrize("key", [b"", b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x10"])
def test_prewrite_put_with_a_key_too_short_to_name_a_table(server, client, key):
    """A PUT whose key is 0 to 4 bytes: INVALID_ARGUMENT naming the key, never INTERNAL."""
    req = kpb.PrewriteRequest(
        mutations=[kpb.Mutation(op=kpb.Mutation.PUT, key=key, value=b"x")],
        primary=key or b"\x00\x00\x00\x10p",
        start_ts=client.tso(),
    )
    err = _raw(server, "KvStore", "Prewrite", req)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert "key" in err.details()


@pytest.mark.parametrize("job", ["a\x00", "x y\nz", "j" * 10_000, "", "naïve"])
def test_one_rule_for_job_names(server, client, table_name, job):
    """RegisterJob, OpenTransaction, GetEpoch, PlanBarriers and UnregisterJob refuse the same
    names with the same message; a refused registration holds no table."""
    client.create_table(table_name, "id BIGINT", primary_key=["id"])
    for method, req in [
        ("RegisterJob", cpb.RegisterJobRequest(job=job, sink=table_name)),
        ("OpenTransaction", cpb.OpenTransactionRequest(job=job, epoch=1)),
        ("OpenTransaction", cpb.OpenTransactionRequest(job=job, batch="b", owner="o")),
        ("GetEpoch", cpb.GetEpochRequest(job=job, epoch=1)),
        ("PlanBarriers", cpb.PlanBarriersRequest(job=job)),
        ("UnregisterJob", cpb.UnregisterJobRequest(job=job)),
    ]:
        err = _raw(server, "Coordinator", method, req)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, err.details())
        assert err.details().startswith("job name "), (method, err.details())
        assert len(err.details()) < 300, (method, len(err.details()))
    client.jobs.register_job("good-job", table_name, [])  # the sink is free for a valid job
    client.jobs.unregister_job("good-job")


@pytest.mark.parametrize(
    "service, method, req, needle",
    [
        ("KvStore", "DescribeTable", kpb.DescribeTableRequest(name="q" * 10_000), "table name"),
        ("KvStore", "ScanChanges", kpb.ScanChangesRequest(table="q" * 10_000, to_ts=9), "table"),
        (
            "KvStore",
            "CreateTable",
            kpb.CreateTableRequest(name="big", schema="id BIGINT, " + "x" * (1 << 20)),
            "schema has",
        ),
        (
            "KvStore",
            "CreateTable",
            kpb.CreateTableRequest(name="big", schema="id BIGINT, " + "x" * 200_000),
            "cannot parse column definition",
        ),
        (
            "KvStore",
            "CreateTable",
            kpb.CreateTableRequest(name="big", schema="id BIGINT", primary_key=["i" * 20_000]),
            "primary key column",
        ),
        ("Coordinator", "Snapshot", cpb.SnapshotRequest(tables=["x" * 100_000]), "table"),
        (
            "Coordinator",
            "OpenTransaction",
            cpb.OpenTransactionRequest(job="j", batch="b" * 100_000, owner="o"),
            "batch has 100000 characters",
        ),
    ],
)
def test_long_input_gets_a_short_precise_error(server, service, method, req, needle):
    """A 10k-character name or a 1 MB schema: a precise status whose message names the field
    and is cut short (it used to overflow gRPC's header limit: RESOURCE_EXHAUSTED "Stream
    removed")."""
    err = _raw(server, service, method, req)
    assert err.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), (
        err.code(),
        err.details(),
    )
    assert needle in err.details()
    assert len(err.details()) <= 2100


def test_prewrite_with_an_empty_packed_batch(server, client):
    """A Prewrite whose packed batch is set but empty: INVALID_ARGUMENT naming the field, never
    INTERNAL."""
    req = kpb.PrewriteRequest(primary=b"\x00\x00\x00\x10p", start_ts=client.tso())
    req.packed.CopyFrom(kpb.MutationBatch())
    err = _raw(server, "KvStore", "Prewrite", req)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert "packed" in err.details() and "mutations" in err.details()


ESCAPE = "\x1b]0;owned\x07\x1b[2J\r"  # sets the window title, clears the screen, rewinds


def test_control_characters_in_labels_are_refused(client, table_name):
    """A lease holder, a revision's who and key, an epoch's owner: INVALID_ARGUMENT naming the
    field and the character; ordinary printable text, unicode included, is accepted."""
    client.create_table(table_name, "id BIGINT", primary_key=["id"])
    ts = client.tso()
    cases = [
        ("holder", lambda v: client.lease(ts, ttl_s=5, holder=v, renew=False).release()),
        ("who", lambda v: client.revise(table_name, to_ts=ts, who=v)),
        ("key", lambda v: client.revise(table_name, to_ts=ts, who="ok", key=v)),
        ("owner", lambda v: client.jobs.open_transaction("ctl-job", 0, batch="b", owner=v)),
    ]
    for field, call in cases:
        for bad in (f"a{ESCAPE}b", "tab\there", "del\x7f", "c1\x9b", "bidi\u202eevil"):
            with pytest.raises(InvalidArgument, match=f"{field} .*control character"):
                call(bad)
    client.lease(ts, ttl_s=5, holder="Zoë ✓ 日本", renew=False).release()
    rev = client.revise(table_name, to_ts=ts, who="Zoë ✓ 日本", key="ключ-1")
    assert (rev.who, rev.key) == ("Zoë ✓ 日本", "ключ-1")


def test_a_job_error_is_escaped_in_snapview_jobs(server, client, table_name):
    """A job's reported error may span lines (it is kept as reported), but `snapview jobs`
    prints every control character in it escaped: nothing reaches the terminal raw."""
    client.create_table(table_name, "id BIGINT", primary_key=["id"])
    job = f"esc-{table_name}"
    client.jobs.register_job(job, table_name, [])
    client.jobs.report_job(job, JobState.FAILED, f"boom{ESCAPE}\nline 2\tend ☃")
    assert ESCAPE in next(j for j in client.jobs.list_jobs() if j.job == job).last_error
    out = cli("jobs", "--address", server.address)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith(job))
    assert "\\x1b]0;owned\\x07\\x1b[2J\\r\\nline 2\\tend ☃" in line
    assert not any(c in out.stdout for c in "\x1b\x07\r\t")


def test_snapview_revise_corrections_file_errors(server, client, table_name, tmp_path):
    """`snapview revise --corrections` with a missing file, a directory or a file that is not
    Parquet: one line saying which (exit 1), no traceback, nothing revised."""
    client.create_table(table_name, "id BIGINT, v BIGINT", primary_key=["id"])
    junk = tmp_path / "junk.parquet"
    junk.write_text("id,v\n1,2\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    pq.write_table(pa.table({"id": [1], "v": [2]}), folder / "part-0.parquet")
    for path, why in [
        (tmp_path / "missing.parquet", "no such file"),
        (folder, "is a directory"),
        (junk, "not a readable Parquet file"),
    ]:
        r = cli("revise", table_name, "--corrections", str(path), "--address", server.address)
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith(f"snapview: error: --corrections {path}: {why}"), r.stderr
    assert client.read(table_name).num_rows == 0 and client.revisions(table_name) == []
