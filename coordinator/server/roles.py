"""Who may call what: the server's tokens, their roles, and the one table of RPCs per role.

``snapview serve`` takes up to two token files (docs/design.md §8 "Roles"):

* ``--token-file``: the **admin** token, full access (what the one shared token always meant).
* ``--read-token-file``: the **read** token, for normal operation: every read, snapshots and
  barrier planning, the TSO, leases, and the calls a job makes to maintain its view or sink
  (job registration and reports, epochs, Percolator transactions, creating tables). It cannot
  drop tables, run GC, revise or rebuild, release or unregister another job, see other holders'
  lease ids, or resolve a transaction against its primary (kvstore.actions.txn_guard).

A call without a known token is refused UNAUTHENTICATED before any message of it is read; a
known token whose role may not call the method, PERMISSION_DENIED naming the method and the role
it needs. Health checks need no token. Every method of both services is in exactly one of
``READ_METHODS`` and ``ADMIN_METHODS`` (a test walks the descriptors), and a snapview method in
neither needs admin, so a new RPC is closed until it is placed.

A server without tokens (loopback) gives every caller the admin role, as before. The lease id is
the capability to renew and release a lease: only its taker and the admin ever see it (GcStatus
hides ids from the read role; ``redact_gc_status``).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from kvstore.errors import InvalidArgument

READ, ADMIN = "read", "admin"
ROLES = (READ, ADMIN)

# "Service/Method" of snapview.v1; see the module docstring for the rule of the split.
READ_METHODS = frozenset(
    {
        # the store: reads, planning reads, creating a table, checked Percolator calls
        "KvStore/Get",
        "KvStore/Scan",
        "KvStore/ScanRanges",
        "KvStore/ScanChanges",
        "KvStore/ResolvedTs",
        "KvStore/SplitRange",
        "KvStore/ChangeBoundary",
        "KvStore/DescribeTable",
        "KvStore/ListTables",
        "KvStore/CreateTable",
        "KvStore/Prewrite",
        "KvStore/Commit",
        "KvStore/Rollback",
        "KvStore/CheckTxnStatus",
        "KvStore/ResolveLocks",
        "KvStore/TxnHeartbeat",
        # the coordinator: TSO, epochs, a job's own calls, snapshots, status, leases
        "Coordinator/Tso",
        "Coordinator/TsoStream",
        "Coordinator/OpenTransaction",
        "Coordinator/CommitTransaction",
        "Coordinator/AbortTransaction",
        "Coordinator/HeartbeatTransaction",
        "Coordinator/GetEpoch",
        "Coordinator/Status",
        "Coordinator/RegisterJob",
        "Coordinator/ReportJob",
        "Coordinator/Topology",
        "Coordinator/Snapshot",
        "Coordinator/PlanBarriers",
        "Coordinator/Delay",
        "Coordinator/AcquireLease",
        "Coordinator/RenewLease",
        "Coordinator/ReleaseLease",
        "Coordinator/GcStatus",
        "Coordinator/GetRevision",
        "Coordinator/ListRevisions",
    }
)
ADMIN_METHODS = frozenset(
    {
        "KvStore/DropTable",
        "KvStore/Gc",
        "Coordinator/UnregisterJob",
        "Coordinator/ReleaseJob",
        "Coordinator/Revise",
        "Coordinator/BeginCorrections",
        "Coordinator/Rebuild",
    }
)
_SNAPVIEW_PREFIX = "/snapview.v1."
_HEALTH_PREFIX = "/grpc.health.v1.Health/"


def required_role(method: str) -> str | None:
    """The role a call of ``method`` (``/package.Service/Method``) needs; None: no token
    (health checks). A snapview method in no table needs admin; anything else (reflection)
    the read role."""
    if method.startswith(_HEALTH_PREFIX):
        return None
    if method.startswith(_SNAPVIEW_PREFIX):
        name = method[len(_SNAPVIEW_PREFIX) :]
        return READ if name in READ_METHODS else ADMIN
    return READ


def _read_token(path: str, flag: str) -> str:
    with open(path) as f:
        token = f.read().strip()
    if not token:
        raise InvalidArgument(f"{flag} {path} is empty")
    return token


class Roles:
    """The server's tokens by role. Compares in constant time; never prints a token."""

    def __init__(self, admin: str, read: str | None = None) -> None:
        if not admin:
            raise InvalidArgument("the admin token is empty")
        if read is not None and hmac.compare_digest(read.encode(), admin.encode()):
            raise InvalidArgument("the read token and the admin token must differ")
        self._bearer = {ADMIN: f"Bearer {admin}".encode()}
        if read is not None:
            self._bearer[READ] = f"Bearer {read}".encode()

    @classmethod
    def load(cls, token_file: str | None, read_token_file: str | None = None) -> Roles | None:
        """The roles of ``--token-file`` (admin) and ``--read-token-file`` (read); None when
        neither is given (every caller is admin). A read token needs an admin token beside it:
        without one, nobody could drop, collect or revise."""
        if token_file is None:
            if read_token_file is not None:
                raise InvalidArgument(
                    "--read-token-file needs --token-file (the admin token) beside it"
                )
            return None
        admin = _read_token(token_file, "auth token file")
        read = _read_token(read_token_file, "read token file") if read_token_file else None
        return cls(admin, read)

    def tokens(self) -> tuple[str, ...]:
        """Every role's token (for entry points that take any of them, as ``/metrics`` does)."""
        return tuple(b.decode()[len("Bearer ") :] for b in self._bearer.values())

    def role_of_bearer(self, value: str | bytes) -> str | None:
        """The role an ``authorization`` header value grants, or None."""
        got = value.encode() if isinstance(value, str) else bytes(value)
        found = None
        for role, expected in self._bearer.items():  # every role compared: no early exit
            if hmac.compare_digest(got, expected):
                found = role
        return found

    def role_of(self, metadata: Any) -> str | None:
        """The role a call's metadata (its ``authorization: Bearer TOKEN``) grants, or None."""
        for key, value in metadata or ():
            if key == "authorization":
                return self.role_of_bearer(value)
        return None

    def check_token(self, role: str, token: str) -> bool:
        """Whether ``token`` (without "Bearer ") grants ``role``: the admin token grants both
        roles, the read token the read role (for the metrics endpoint and other entry points)."""
        got = self.role_of_bearer(f"Bearer {token}")
        return got == ADMIN or (got is not None and got == role)

    def is_admin(self, context: Any) -> bool:
        """Whether the call behind a servicer ``context`` presented the admin token."""
        return self.role_of(context.invocation_metadata()) == ADMIN


def caller_is_admin(roles: Roles | None, context: Any) -> bool:
    """Whether the call may act as admin: always on a server without tokens."""
    return roles is None or roles.is_admin(context)


class RoleInterceptor(grpc.aio.ServerInterceptor):
    """Lets a call through only with a token whose role may call its method. Refusals are
    stream handlers: they read no request message first, so a client that opens a stream and
    sends nothing is turned away as fast as one that sends garbage."""

    def __init__(self, roles: Roles) -> None:
        self.roles = roles

        async def deny(requests: Any, context: grpc.aio.ServicerContext) -> None:
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "missing or wrong auth token (send 'authorization: Bearer TOKEN')",
            )

        self._deny = grpc.stream_stream_rpc_method_handler(deny)

    def _forbid(self, method: str, role: str, needs: str) -> grpc.RpcMethodHandler:
        name = method.rsplit("/", 2)[-2:]
        message = f"{'/'.join(name)} needs the {needs} token; this call presented the {role} token"

        async def forbid(requests: Any, context: grpc.aio.ServicerContext) -> None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, message)

        return grpc.stream_stream_rpc_method_handler(forbid)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        needs = required_role(details.method)
        if needs is None:
            return await continuation(details)
        role = self.roles.role_of(details.invocation_metadata)
        if role is None:
            return self._deny
        if role == ADMIN or role == needs:
            return await continuation(details)
        return self._forbid(details.method, role, needs)


HIDDEN_ID = "(hidden)"


def redact_gc_status(resp: Any) -> None:
    """Hide lease ids in a GcStatusResponse (in place) for a caller without the admin role: a
    lease id is the capability to renew and release the lease, so only its taker knows it. The
    page token (the id to continue after) is dropped too: the read role sees one page of leases
    (up to 10,000, the default server cap) and the totals; paging through all is the admin's."""
    for x in resp.leases:
        x.id = HIDDEN_ID
    resp.next_page_token = ""
    for h in resp.holds:
        # the leases' hold is named "HOLDER (ID)[ and N younger lease(s)]" (coordinator.server.gc)
        if h.kind != "lease":
            continue
        m = re.fullmatch(r"(.*) \([^()]*\)( and \d+ younger lease\(s\))?", h.name, flags=re.S)
        if m:
            h.name = f"{m.group(1)} ({HIDDEN_ID}){m.group(2) or ''}"
