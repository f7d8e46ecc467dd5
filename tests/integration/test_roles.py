"""Roles (docs/design.md §8): the read token cannot drop, collect, revise or release another
holder's lease; every RPC is tried with both tokens and with none; and no token, admin
included, can roll back or resolve a transaction an epoch or a revision owns against its
primary."""

from __future__ import annotations

import threading

import grpc
import pytest

import coordinator
from coordinator.server.revisions import rollback_primary_key
from coordinator.server.roles import ADMIN_METHODS, HIDDEN_ID
from kvstore.errors import PermissionDenied
from kvstore.mvcc.records import LockOp
from kvstore.results import LOCKED
from snapview.embedded import EmbeddedServer
from tests.conftest import cli, serve, wait_for
from tests.integration.test_bad_input import _all_methods, _call

ADMIN_TOKEN, READ_TOKEN = "adm1n-token", "r3ad-token"


def _token_files(d):
    admin, read = d / "admin", d / "read"
    admin.write_text(ADMIN_TOKEN + "\n")
    read.write_text(READ_TOKEN + "\n")
    return str(admin), str(read)


# Not server_fixture: files are written before the server starts and their paths go to the tests.
@pytest.fixture(scope="module")
def roles_server(tmp_path_factory):
    """(server, admin token file, read token file)."""
    d = tmp_path_factory.mktemp("roles")
    admin, read = _token_files(d)
    for srv in serve(d / "data", "--token-file", admin, "--read-token-file", read):
        yield srv, admin, read


@pytest.fixture(scope="module")
def admin(roles_server):
    with coordinator.connect(roles_server[0].address, token=ADMIN_TOKEN) as c:
        yield c


@pytest.fixture(scope="module")
def reader(roles_server):
    with coordinator.connect(roles_server[0].address, token=READ_TOKEN) as c:
        yield c


class _Metadata(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds ``md`` to every call of a channel (test_bad_input's _call sends none)."""

    def __init__(self, md):
        self.md = md

    def _with(self, details):
        return details._replace(metadata=self.md)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with(details), request)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._with(details), requests)


def _raw(address: str, method: str, kind: str, token: str | None) -> grpc.RpcError | None:
    """An empty request to ``method`` with ``token``: the error it got, or None."""
    md = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(address) as ch:
        ch_md = grpc.intercept_channel(ch, _Metadata(md))
        try:
            _call(ch_md, method, kind, b"")
        except grpc.RpcError as e:
            return e
    return None


@pytest.mark.parametrize("method, kind", list(_all_methods()))
def test_every_rpc_with_each_role(roles_server, method, kind):
    """The read token gets PERMISSION_DENIED naming the RPC and the admin role exactly for the
    admin RPCs; the admin token never; no token, UNAUTHENTICATED everywhere."""
    srv = roles_server[0]
    name = method.removeprefix("/snapview.v1.")  # "Service/Method"
    admin_only = name in ADMIN_METHODS
    e = _raw(srv.address, method, kind, READ_TOKEN)
    if admin_only:
        assert e is not None and e.code() == grpc.StatusCode.PERMISSION_DENIED, e
        assert name in e.details() and "admin token" in e.details(), e.details()
        assert "read token" in e.details()
    else:
        assert e is None or e.code() not in (
            grpc.StatusCode.PERMISSION_DENIED,
            grpc.StatusCode.UNAUTHENTICATED,
        ), (e.code(), e.details())
    e = _raw(srv.address, method, kind, ADMIN_TOKEN)
    assert e is None or e.code() not in (
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    ), (e.code(), e.details())
    e = _raw(srv.address, method, kind, None)
    assert e is not None and e.code() == grpc.StatusCode.UNAUTHENTICATED


def test_read_token_reads_writes_and_cannot_drop(admin, reader, table_name):
    """A job's work goes with the read token (create, transactions, reads); drop does not."""
    reader.create_table(table_name, "id BIGINT, v BIGINT", primary_key=["id"])
    with reader.transaction() as t:
        t.put(table_name, {"id": 1, "v": 1})
    assert reader.read(table_name).num_rows == 1
    with pytest.raises(PermissionDenied, match="DropTable needs the admin token"):
        reader.drop_table(table_name)
    with pytest.raises(PermissionDenied, match="Gc needs the admin token"):
        reader.store.gc(1)
    admin.drop_table(table_name)


def test_read_token_resolves_only_through_the_primary(admin, reader, table_name):
    """Read role: a Rollback of a secondary whose primary is undecided, or a ResolveLocks that
    disagrees with the primary, is refused; deciding through the primary (the client's own
    commit and rollback) works. The admin's raw call may roll back the secondary alone."""
    reader.create_table(table_name, "id BIGINT, v BIGINT", primary_key=["id"])
    info = reader.describe_table(table_name)
    k1, k2, k3 = (info.key_codec.encode({"id": i}) for i in (1, 2, 3))

    def prewrite(keys):
        ts = reader.tso()
        muts = [(LockOp.PUT, k, info.row_codec.encode({"id": i, "v": ts})) for i, k in keys]
        reader.store.prewrite(muts, muts[0][1], ts)
        return ts

    ts = prewrite([(1, k1), (2, k2), (3, k3)])
    with pytest.raises(PermissionDenied, match="not decided yet"):
        reader.store.rollback(ts, [k2])
    with pytest.raises(PermissionDenied, match=f"start_ts={ts}"):
        reader.store.resolve_locks(ts, 0)
    admin.store.rollback(ts, [k3])  # raw: the operator's repair
    reader.store.rollback(ts, [k1, k2])  # names the primary: decides the whole transaction
    assert reader.store.resolve_locks(ts, 0) == 0  # agrees with the primary, nothing left
    ts = prewrite([(1, k1), (2, k2)])
    with pytest.raises(PermissionDenied):
        reader.store.commit(ts, reader.tso(), [k2])  # a secondary before its primary
    commit_ts = reader.tso()
    reader.store.commit(ts, commit_ts, [k1])
    with pytest.raises(PermissionDenied, match=f"committed at {commit_ts}"):
        reader.store.resolve_locks(ts, 0)
    assert reader.store.resolve_locks(ts, commit_ts) == 1
    assert reader.read(table_name).num_rows == 2


def test_nobody_splits_an_epoch(admin, reader, table_name):
    """An open epoch's rows cannot be rolled back, resolved or committed one by one, with the
    admin token either; the epoch commits them all; afterwards resolution that agrees works."""
    reader.create_table(table_name, "id BIGINT, v BIGINT", primary_key=["id"])
    info = reader.describe_table(table_name)
    job = f"job_{table_name}"
    e = reader.jobs.open_transaction(job, 1)
    keys = [info.key_codec.encode({"id": i}) for i in range(3)]
    muts = [(LockOp.PUT, k, info.row_codec.encode({"id": i, "v": 1})) for i, k in enumerate(keys)]
    reader.store.prewrite(muts, e.primary_key, e.start_ts)
    for c in (admin, reader):
        with pytest.raises(PermissionDenied, match="only the server decides"):
            c.store.rollback(e.start_ts, [keys[1]])
        with pytest.raises(PermissionDenied, match="only the server decides"):
            c.store.rollback(e.start_ts, [e.primary_key, *keys])
        with pytest.raises(PermissionDenied, match="only the server decides"):
            c.store.resolve_locks(e.start_ts, 0)
        with pytest.raises(PermissionDenied, match="only the server decides"):
            c.store.commit(e.start_ts, c.tso(), [keys[0]])
    done = reader.jobs.commit_transaction(job, 1, e.start_ts)
    assert reader.read(table_name, at=done.commit_ts).num_rows == 3
    assert admin.store.resolve_locks(e.start_ts, done.commit_ts) == 0


def test_leases_ids_are_their_takers(admin, reader):
    """The read role renews and releases the lease it took (its id is the capability), but
    never sees another's id; the admin sees every id and may release any."""
    mine = reader.lease(reader.tso(), ttl_s=30, holder="roles-mine")
    other = admin.lease(admin.tso(), ttl_s=30, holder="roles-other")
    seen = reader.gc_status()
    assert {x.id for x in seen.leases} == {HIDDEN_ID}
    assert not any(other.id in h.name or mine.id in h.name for h in seen.holds)
    assert {mine.id, other.id} <= {x.id for x in admin.gc_status().leases}
    mine.renew()
    mine.release()
    assert admin.release_lease(other.id)  # another holder's lease: the admin's call
    assert not {mine.id, other.id} & {x.id for x in admin.gc_status().leases}
    other._stop.set()


def test_cli_takes_either_token(roles_server, table_name, admin):
    srv, admin_file, read_file = roles_server
    admin.create_table(table_name, "id BIGINT", primary_key=["id"])
    r = cli("tables", "--address", srv.address, "--token-file", read_file)
    assert r.returncode == 0 and table_name in r.stdout, r.stderr
    r = cli("drop", table_name, "--address", srv.address, "--token-file", read_file)
    assert r.returncode == 1 and "DropTable needs the admin token" in r.stderr, r.stderr
    r = cli("drop", table_name, "--address", srv.address, "--token-file", admin_file)
    assert r.returncode == 0, r.stderr


def test_no_rollback_inside_a_running_revision(tmp_path):
    """The issue's case: while a revision holds its prewritten rows (a fail point keeps it there
    for 3 s), the admin's Rollback of one of them is refused; the revision then restores every
    row (before: recorded done, the rolled-back row kept its new value)."""
    admin_file, read_file = _token_files(tmp_path)
    with (
        EmbeddedServer(
            str(tmp_path / "d"),
            extra_args=["--token-file", admin_file, "--read-token-file", read_file],
            env={"SNAPVIEW_FAILPOINTS": "revision.prewritten=sleep(3000)"},
        ) as s,
        coordinator.connect(s.address, token=ADMIN_TOKEN) as c,
    ):
        c.create_table("acct", "id BIGINT, v BIGINT", primary_key=["id"])
        with c.transaction() as t:
            for i in range(3):
                t.put("acct", {"id": i, "v": 0})
        target = c.tso()
        with c.transaction() as t:
            for i in range(3):
                t.put("acct", {"id": i, "v": 1})
        done: list = []
        th = threading.Thread(target=lambda: done.append(c.revise("acct", to_ts=target)))
        th.start()
        # (a revision is listed as running from its record, before its transaction has a
        # start_ts: wait for that too)
        rev = wait_for(
            lambda: [r for r in c.revisions("acct") if r.state == "running" and r.start_ts], 5
        )[0]
        primary = rollback_primary_key(rev.id)
        wait_for(
            lambda: c.store.check_txn_status(primary, rev.start_ts).status == LOCKED, 5, "primary"
        )
        key = c.describe_table("acct").key_codec.encode({"id": 1})
        with pytest.raises(PermissionDenied, match="only the server decides"):
            c.store.rollback(rev.start_ts, [key])
        th.join(15)
        assert done and done[0].state == "done"
        assert sorted(r["v"] for r in c.read("acct").to_pylist()) == [0, 0, 0]


def test_serve_refuses_a_read_token_alone(tmp_path):
    _, read_file = _token_files(tmp_path)
    r = cli("serve", "--data-dir", str(tmp_path / "d"), "--read-token-file", read_file)
    assert r.returncode != 0 and "needs --token-file" in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()
