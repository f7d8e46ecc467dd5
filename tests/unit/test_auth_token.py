"""The server's token check (exact match only, compared in constant time) and its role table:
every RPC of both services is in exactly one role."""

from __future__ import annotations

import hmac

import pytest

from coordinator.server import roles
from coordinator.server.roles import ADMIN, ADMIN_METHODS, READ, READ_METHODS, Roles
from kvstore.errors import InvalidArgument
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb
from snapview_proto.snapview.v1 import kvstore_pb2 as kpb


def all_methods() -> list[str]:
    """ "Service/Method" of every RPC, from the generated descriptors."""
    return [
        f"{svc}/{m.name}"
        for pb, svc in ((kpb, "KvStore"), (cpb, "Coordinator"))
        for m in pb.DESCRIPTOR.services_by_name[svc].methods
    ]


def test_every_rpc_is_in_exactly_one_role_table():
    """A new RPC fails here until it is given a role (and is admin-only until then)."""
    methods = all_methods()
    assert not READ_METHODS & ADMIN_METHODS
    missing = [m for m in methods if (m in READ_METHODS) + (m in ADMIN_METHODS) != 1]
    assert missing == [], f"RPCs without a role in coordinator.server.roles: {missing}"
    stale = (READ_METHODS | ADMIN_METHODS) - set(methods)
    assert not stale, f"role table names RPCs that do not exist: {stale}"
    assert roles.required_role("/snapview.v1.KvStore/NoSuchRpc") == ADMIN  # closed by default
    assert roles.required_role("/grpc.health.v1.Health/Check") is None


def test_token_check_accepts_only_the_exact_bearer_token():
    r = Roles("s3cret", "r3ad")
    assert r.role_of((("authorization", "Bearer s3cret"),)) == ADMIN
    assert r.role_of((("x-other", "1"), ("authorization", b"Bearer s3cret"))) == ADMIN
    assert r.role_of((("authorization", "Bearer r3ad"),)) == READ
    for md in [
        (),
        None,
        (("authorization", "Bearer s3cre"),),
        (("authorization", "Bearer s3cret "),),
        (("authorization", "Bearer S3CRET"),),
        (("authorization", "s3cret"),),
        (("authorization", "Bearer s3cret\u00e9"),),  # not ASCII: no TypeError, just no
        (("x-authorization", "Bearer s3cret"),),
    ]:
        assert r.role_of(md) is None, md
    assert r.check_token(READ, "r3ad") and r.check_token(READ, "s3cret")
    assert r.check_token(ADMIN, "s3cret") and not r.check_token(ADMIN, "r3ad")
    assert not r.check_token(READ, "nope")


def test_token_is_compared_with_compare_digest(monkeypatch):
    """A plain == leaks through its timing how much of a guess was right."""
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(roles.hmac, "compare_digest", spy)
    r = Roles("s3cret")
    assert r.role_of((("authorization", "Bearer s3cret"),)) == ADMIN
    assert r.role_of((("authorization", "Bearer nope"),)) is None
    assert calls == [(b"Bearer s3cret", b"Bearer s3cret"), (b"Bearer nope", b"Bearer s3cret")]


def test_token_files(tmp_path):
    admin, read, empty = tmp_path / "a", tmp_path / "r", tmp_path / "e"
    admin.write_text("one\n")
    read.write_text("two\n")
    empty.write_text("\n")
    assert Roles.load(None) is None
    assert Roles.load(str(admin), str(read)).role_of((("authorization", "Bearer two"),)) == READ
    with pytest.raises(InvalidArgument, match="needs --token-file"):
        Roles.load(None, str(read))
    with pytest.raises(InvalidArgument, match="must differ"):
        Roles.load(str(admin), str(admin))
    with pytest.raises(InvalidArgument, match="is empty"):
        Roles.load(str(admin), str(empty))


def test_gc_status_hides_lease_ids_from_the_read_role():
    resp = cpb.GcStatusResponse(
        leases=[cpb.Lease(id="abc123", holder="nightly")],
        holds=[
            cpb.GcHold(kind="lease", name="nightly (abc123)"),
            cpb.GcHold(kind="job", name="j (abc123)"),
        ],
    )
    roles.redact_gc_status(resp)
    assert [x.id for x in resp.leases] == [roles.HIDDEN_ID]
    assert [h.name for h in resp.holds] == [f"nightly ({roles.HIDDEN_ID})", "j (abc123)"]
