"""The Python client: ``coordinator.connect(address)`` returns a ``Client``.

It talks to ``snapview serve`` over gRPC (one channel for the Coordinator and KvStore services).
Transport failures (UNAVAILABLE, DEADLINE_EXCEEDED) are retried with bounded backoff
(``RetryPolicy``); nothing else is retried behind the caller's back, except waiting out a live
lock on a read, which is bounded by ``lock_wait_s``.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import grpc

from coordinator.connection import DEFAULT_ADDRESS as DEFAULT_ADDRESS  # re-exported
from coordinator.connection import ConnectionSettings
from coordinator.errors import BarrierNotReached
from coordinator.jobs import JobClient, downstream_tables
from coordinator.lease import DEFAULT_LEASE_TTL_S, Lease
from coordinator.reports import DelayInfo, GcInfo, LeaseInfo, ServerStatus, TopologyInfo
from coordinator.revisions import (
    Revision,
    arrow_mutations,
    call_revise,
    correctable_table,
    count_changes,
    default_who,
    dry_run_record,
    new_revision_key,
    wait_revised,
    write_arrow_corrections,
)
from coordinator.snapshot import Snapshot
from coordinator.times import with_wall
from coordinator.transaction import Transaction
from coordinator.tso_client import TsoBatcher, TsoStreamFetcher
from kvstore.errors import (
    InvalidArgument,
    KeyIsLocked,
    TableNotFound,
    Unauthenticated,
    Unavailable,
)
from kvstore.fork_safe_channel import ForkSafeChannel, inherited, process_lock
from kvstore.lock_resolution import resolve_lock
from kvstore.mvcc.keys import table_prefix
from kvstore.mvcc.records import Mutation
from kvstore.remote import CallMetadata, RemoteStore, RetryPolicy, RpcCaller
from kvstore.results import DropResult
from kvstore.table_info import TableInfo
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb
from snapview_proto.snapview.v1 import coordinator_pb2_grpc as cpb_grpc

if TYPE_CHECKING:  # pyarrow loads on the first read: the CLI's status, tables... never need it
    import pyarrow as pa

T = TypeVar("T")
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 256 << 20),
    ("grpc.max_send_message_length", 256 << 20),
    # Reconnect quickly to a restarted server (gRPC's default backoff starts at 1 s and grows).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]


def connect(
    address: str | ConnectionSettings | None = None,
    *,
    token: str | None = None,
    token_file: str | None = None,
    tls_ca: str | None = None,
    tls_ca_file: str | None = None,
    retry: RetryPolicy | None = None,
    lock_wait_s: float = 30.0,
    probe: bool = True,
) -> Client:
    """Connect to a snapview server.

    ``address`` is ``HOST:PORT`` or a ``ConnectionSettings``; the other settings come from the
    keywords (``token`` or ``token_file``, ``tls_ca``: the root certificate that turns on TLS;
    ``tls_ca_file`` is its older name) and then from the environment
    (``ConnectionSettings.from_env``: SNAPVIEW_ADDRESS, SNAPVIEW_TOKEN_FILE, SNAPVIEW_TLS_CA;
    default address localhost:50051).

    With ``probe`` (default) one call with a short deadline checks that the settings fit the
    server, so a server that needs TLS or a token is named as such at once instead of after the
    transport retries run out: ``Unavailable("server at X requires TLS: pass tls_ca ...")``,
    ``Unauthenticated("server at X needs a token ...")``. A server that does not answer yet (not
    started, restarting) is not an error here: the first call waits for it under ``retry``."""
    base = address if isinstance(address, ConnectionSettings) else ConnectionSettings.from_env()
    settings = base.with_(
        address=None if isinstance(address, ConnectionSettings) else address,
        token=token,
        token_file=token_file,
        tls_ca=tls_ca or tls_ca_file,
    )
    secret = settings.resolved_token()
    _check_fork_support()
    if settings.tls_ca:
        with open(settings.tls_ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())

        def open_channel() -> grpc.Channel:
            _check_fork_support()
            return grpc.secure_channel(settings.address, creds, options=GRPC_OPTIONS)
    else:

        def open_channel() -> grpc.Channel:
            _check_fork_support()
            return grpc.insecure_channel(settings.address, options=GRPC_OPTIONS)

    # A channel per process: a forked child that uses this client opens its own (never the
    # parent's, which would hang it).
    channel = ForkSafeChannel(open_channel)
    metadata: CallMetadata = (("authorization", f"Bearer {secret}"),) if secret else ()
    if probe:
        try:
            _probe(channel, settings, metadata)
        except BaseException:
            channel.close()
            raise
    client = Client(channel, settings.address, retry or RetryPolicy(), metadata, lock_wait_s)
    client.settings = settings
    return client


PROBE_TIMEOUT_S = 1.5


def _existed_at(info: TableInfo, at: int | None) -> None:
    """Refuse a read of ``info`` at ``at`` when the name meant another table then: ``info`` was
    created after ``at`` and a table of its name had been dropped before. (A table with no
    predecessor is simply empty before it was created, as the store answers.)"""
    if at is not None and info.recreated and at < info.created_ts:
        raise TableNotFound.from_message(
            f"table {info.name!r} did not exist at {with_wall(at)}: the table of that name was "
            f"created at {with_wall(info.created_ts)} (a table dropped before it is not readable)"
        )


_FORK_SUPPORT_OFF = ("0", "false", "no", "off")
# The first process of this program that opened a channel: gRPC is running there from then on.
_grpc_pid: int | None = None


def _check_fork_support() -> None:
    """Refuse, with the reason, to open a channel where gRPC cannot work: in a process forked
    after its parent started gRPC, when the program turned gRPC's fork support off
    (GRPC_ENABLE_FORK_SUPPORT=false). gRPC would hang there in the first call, past every
    deadline. snapview never sets the variable (a library must not change gRPC for the whole
    process); this names the program's own setting instead of hanging."""
    global _grpc_pid
    pid = os.getpid()
    if _grpc_pid is None:
        _grpc_pid = pid
        return
    if _grpc_pid == pid:
        return
    if os.environ.get("GRPC_ENABLE_FORK_SUPPORT", "").strip().lower() in _FORK_SUPPORT_OFF:
        raise Unavailable(
            f"process {pid} was forked from process {_grpc_pid} after gRPC started there, and "
            "GRPC_ENABLE_FORK_SUPPORT="
            f"{os.environ['GRPC_ENABLE_FORK_SUPPORT']!r} turns off gRPC's fork support: gRPC "
            "cannot work in this process. Leave GRPC_ENABLE_FORK_SUPPORT unset, or start it with "
            "multiprocessing's 'spawn' or 'forkserver' method"
        )


def _probe(channel: grpc.Channel, s: ConnectionSettings, metadata: CallMetadata) -> None:
    """One Tso call with a short deadline; raise a clear error if the settings do not fit the
    server (TLS, certificate, token). Anything else is left to the caller's retries."""
    err = _try_tso(channel, metadata)
    if err is None:
        return
    code, details = err
    where = f"server at {s.address}"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        if metadata:
            raise Unauthenticated(f"{where} refused the token (check token / token_file)")
        raise Unauthenticated(
            f"{where} needs a token: pass token or token_file (SNAPVIEW_TOKEN_FILE; CLI "
            "--token-file; Spark option token or tokenFile)"
        )
    if code != grpc.StatusCode.UNAVAILABLE:
        return
    if "CERTIFICATE_VERIFY_FAILED" in details:
        raise Unavailable(
            f"{where} speaks TLS, but its certificate does not verify against tls_ca "
            f"{s.tls_ca!r} (or its name does not match {s.address!r})"
        )
    if s.tls_ca and "WRONG_VERSION_NUMBER" in details:
        raise Unavailable(f"{where} does not speak TLS: leave out tls_ca")
    if not s.tls_ca and ("Socket closed" in details or "reset" in details.lower()):
        # Something hung up on plain HTTP/2. Does it speak TLS? Ask with a TLS handshake.
        with grpc.secure_channel(s.address, grpc.ssl_channel_credentials()) as tls:
            tls_err = _try_tso(tls, metadata)
        # Only a TLS answer counts: a handshake that got through (a reply, even an error) or a
        # certificate our default roots do not know. A timeout or a hang-up proves nothing.
        no_answer = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        if (
            tls_err is None
            or tls_err[0] not in no_answer
            or "CERTIFICATE_VERIFY_FAILED" in tls_err[1]
        ):
            raise Unavailable(
                f"{where} requires TLS: pass tls_ca, the root certificate to verify it with "
                "(SNAPVIEW_TLS_CA; CLI --tls-ca; Spark option tlsCa)"
            )


def _try_tso(channel: grpc.Channel, metadata: CallMetadata) -> tuple[grpc.StatusCode, str] | None:
    try:
        cpb_grpc.CoordinatorStub(channel).Tso(
            cpb.TsoRequest(count=1), timeout=PROBE_TIMEOUT_S, metadata=metadata
        )
        return None
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


# How long a Revise call may take: a rollback of a large change is one long write on the server.
REVISE_TIMEOUT_S = 3600.0


def _ttl_ms(ttl_s: float) -> int:
    if not ttl_s > 0:
        raise InvalidArgument(f"lease ttl_s must be positive, got {ttl_s}")
    return max(1, int(ttl_s * 1000))


class Client:
    """Tables, transactions, timestamps and snapshot reads over one gRPC channel.

    Thread-safe and fork-safe: a child forked after ``connect`` (``multiprocessing``'s default
    on Linux) may go on using the client; its first call there opens a channel and a timestamp
    stream of the child's own. What belongs to the parent process stays with it: leases the
    parent took are renewed and released by the parent only."""

    def __init__(
        self,
        channel: grpc.Channel,
        address: str,
        retry: RetryPolicy,
        metadata: CallMetadata = (),
        lock_wait_s: float = 30.0,
    ) -> None:
        self.address = address
        self.settings = ConnectionSettings(address)
        """How this client reached the server (``connect`` fills it in)."""
        self.channel = channel
        self.retry = retry
        self.lock_wait_s = lock_wait_s
        self.store = RemoteStore(channel, retry, metadata)
        self._stub = cpb_grpc.CoordinatorStub(channel)
        self._rpc = RpcCaller(retry, metadata)
        self._metadata = metadata
        self._tso_parts = self._start_tso()
        self.jobs = JobClient(self._stub, self._rpc)
        """The job protocol (epochs, registry, barrier plans) on this client's channel."""
        self._closed = threading.Event()

    # ------------------------------------------------------------------ timestamps

    def _start_tso(self) -> tuple[int, TsoStreamFetcher, TsoBatcher]:
        idle = self.channel.idle if isinstance(self.channel, ForkSafeChannel) else lambda: True
        stream = TsoStreamFetcher(
            lambda reqs: self._stub.TsoStream(reqs, metadata=self._metadata),
            self._fetch_tso,
            cpb.TsoRequest,
            idle,
        )
        return os.getpid(), stream, TsoBatcher(stream.fetch)

    def _tso_batcher(self) -> TsoBatcher:
        """This process's batcher: the stream and thread of a parent do not exist in its child."""
        parts = self._tso_parts
        if parts[0] != os.getpid():
            with process_lock():
                parts = self._tso_parts
                if parts[0] != os.getpid():
                    inherited(parts)
                    parts = self._tso_parts = self._start_tso()
        return parts[2]

    def _fetch_tso(self, count: int) -> int:
        return self._rpc.unary(self._stub.Tso, cpb.TsoRequest(count=count)).first

    def tso(self) -> int:
        """A fresh timestamp, greater than every timestamp issued before this call began.
        Concurrent callers share one request on the client's TSO stream."""
        return self._tso_batcher().get()

    # ------------------------------------------------------------------ tables

    def create_table(
        self,
        name: str,
        schema: str,
        primary_key: list[str] | None = None,
        kind: str = "root",
        if_not_exists: bool = False,
    ) -> TableInfo:
        """Create a table from a Spark DDL schema. ``primary_key=[]`` makes an append-only table
        whose rows are keyed by a hidden row id. Raises AlreadyExists / InvalidArgument."""
        return self.store.create_table(name, schema, primary_key, kind, if_not_exists)

    def drop_table(self, name: str, if_exists: bool = False, cascade: bool = False) -> DropResult:
        """Drop ``name``. A table that views (or other registered jobs) read is refused with
        FailedPrecondition naming them, unless ``cascade``: then everything downstream of it is
        dropped too, in the same write. The writer job of every dropped table is unregistered, so
        a running view job stops at its next step. The result is true when the table existed."""
        return self.store.drop_table(name, if_exists, cascade)

    def describe_table(self, name: str, refresh: bool = False) -> TableInfo:
        """The table's definition (cached per client; ``refresh`` asks the server again)."""
        return self.store.describe_table(name, refresh)

    def tables(self) -> list[TableInfo]:
        return self.store.list_tables()

    # ------------------------------------------------------------------ transactions

    def transaction(self, lock_ttl_ms: int = 3000) -> Transaction:
        """A Percolator transaction reading at a fresh start_ts. As a context manager it commits
        on normal exit and rolls back on an exception. A conflict raises
        ``coordinator.WriteConflict``, which is safe to retry with a new transaction."""
        return Transaction(self, lock_ttl_ms)

    def with_lock_wait(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` until it stops raising KeyIsLocked (bounded by ``lock_wait_s``). The server
        already resolves decided transactions; this waits out live ones."""
        deadline = time.monotonic() + self.lock_wait_s
        delay = 0.005
        while True:
            try:
                return fn()
            except KeyIsLocked:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def prewrite(
        self,
        mutations: Sequence[Mutation],
        primary: bytes,
        start_ts: int,
        ttl_ms: int = 3000,
        txn_size: int = 0,
        try_one_pc: bool = False,
    ) -> int:
        """store.prewrite that deals with locks in the way: a decided or expired transaction's
        lock is resolved through its primary and the prewrite retried; a live one is waited out
        (up to lock_wait_s). Conflicts and rollbacks are raised as they come."""
        store = self.store

        def attempt() -> int:
            try:
                return store.prewrite(mutations, primary, start_ts, ttl_ms, txn_size, try_one_pc)
            except KeyIsLocked as e:
                resolve_lock(store, e)
                raise

        return self.with_lock_wait(attempt)

    # ------------------------------------------------------------------ reads

    def by_name(self, table: str, call: Callable[[TableInfo], T], at: int | None = None) -> T:
        """``call(info)`` with ``table``'s definition (cached per client), as of ``at`` if given.

        A client caches table ids; when another client drops ``table`` and makes a new one of
        that name, the server refuses the cached id (``table id N does not exist``). Then the
        definition is asked for again by name and ``call`` runs once more with the new table.
        A read at ``at`` before the table now named ``table`` was created, when a table of that
        name had been dropped before it (``TableInfo.recreated``), is refused with TableNotFound
        saying so: the rows of the dropped table are not the new table's, and the new table had
        none then, so no answer there would be true. A table with no predecessor reads as empty
        before its creation (a stale snapshot of a new table)."""
        info = self.describe_table(table)
        _existed_at(info, at)
        try:
            return call(info)
        except TableNotFound as e:
            fresh = self.store.refreshed(info, e)
            if fresh is None:
                raise
        _existed_at(fresh, at)
        return call(fresh)

    def get(self, table: str, key: dict, at: int | None = None) -> dict | None:
        """One row by primary key at ``at`` (default: a fresh timestamp), or None."""

        def get(info: TableInfo) -> dict | None:
            ts = at or self.tso()
            k = info.key_codec.encode(key)
            raw = self.with_lock_wait(lambda: self.store.get(k, ts))
            return None if raw is None else info.row_codec.decode(raw)

        return self.by_name(table, get, at)

    def _read_chunks(self, table: str, at: int | None) -> tuple[TableInfo, list[list[bytes]]]:
        def scan(info: TableInfo) -> tuple[TableInfo, list[list[bytes]]]:
            ts = at or self.tso()
            start, end = table_prefix(info.id), table_prefix(info.id + 1)
            chunks = self.with_lock_wait(lambda: list(self.store.scan(start, end, ts)))
            return info, [values for _, values in chunks]

        return self.by_name(table, scan, at)

    def read_batches(self, table: str, at: int | None = None) -> Iterator[pa.RecordBatch]:
        info, chunks = self._read_chunks(table, at)
        for values in chunks:
            yield info.row_codec.decode_arrow(values)

    def read(self, table: str, at: int | None = None) -> pa.Table:
        """The whole table as of ``at`` (default: a fresh timestamp, i.e. the latest committed
        state) as a pyarrow Table in primary-key order. Repeating a read at the same ``at``
        returns the same rows, whatever commits later. A read at ``at`` before the table was
        created raises TableNotFound (a table of that name dropped before is not readable)."""
        import pyarrow as pa

        info, chunks = self._read_chunks(table, at)
        batches = [info.row_codec.decode_arrow(values) for values in chunks]
        return pa.Table.from_batches(batches, schema=info.table_schema.arrow_schema())

    def resolved_ts(self, table: str) -> int:
        return self.store.resolved_ts(table)

    # ------------------------------------------------------------------ snapshots and operations

    def snapshot(
        self,
        tables: list[str],
        mode: str = "snapshot",
        barrier: int = 0,
        wait_s: float = 0.0,
        lease_s: float | None = None,
    ) -> Snapshot:
        """A consistent read point for ``tables`` (``snap.barrier``, ``snap.read_ts(t)``,
        ``snap.read(t)``).

        mode ``snapshot``: the newest barrier all of them have (or ``barrier``), each table at
        its read ts there, so together they show one state of the sources. mode ``latest``: all
        at one fresh timestamp, each table at its own newest version (not consistent across
        views). ``wait_s`` waits that long for a common barrier before raising
        BarrierNotReached.

        ``lease_s``: hold a reader lease with this TTL on the snapshot's oldest read ts,
        renewed in the background until ``snap.release()`` (or the end of a ``with`` block), so
        GC never collects what the snapshot reads. Without one, reads fail with SnapshotTooOld
        once the snapshot is older than the server's ``--retention``."""
        if isinstance(tables, str):
            tables = [tables]
        req = cpb.SnapshotRequest(tables=list(tables), mode=mode, barrier=barrier)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                r = self._rpc.unary(self._stub.Snapshot, req)
                break
            except BarrierNotReached:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)
        reads = {x.table: x.read_ts for x in r.reads}
        lease = None
        if lease_s is not None and reads:
            holder = f"snapshot of {', '.join(reads)}"
            lease = self.lease(min(reads.values()), ttl_s=lease_s, holder=holder[:200])
        return Snapshot(self, r.barrier, r.mode, reads, r.barrier_wall_ms, lease)

    def lease(
        self,
        ts: int,
        ttl_s: float = DEFAULT_LEASE_TTL_S,
        holder: str | None = None,
        renew: bool = True,
    ) -> Lease:
        """A reader lease on ``ts``: the GC safepoint stays at or below ``ts`` while the lease
        lives. It renews itself every ``ttl_s / 3`` until released (a context manager), unless
        ``renew`` is False (then it lapses ``ttl_s`` after its last ``renew()``, by anyone
        holding its id: ``renew_lease``). ``holder`` names it in ``snapview leases`` (default:
        host and pid). Raises SnapshotTooOld if the safepoint already passed ``ts``."""
        req = cpb.AcquireLeaseRequest(
            holder=holder if holder is not None else f"{socket.gethostname()} pid {os.getpid()}",
            ts=ts,
            ttl_ms=_ttl_ms(ttl_s),
        )
        return Lease(self, self._rpc.unary(self._stub.AcquireLease, req), renew=renew)

    def renew_lease(self, lease_id: str, ttl_s: float, ts: int = 0) -> None:
        """Extend lease ``lease_id`` (taken elsewhere, e.g. by a Spark driver) by ``ttl_s`` from
        now; LeaseNotFound if it already expired."""
        req = cpb.RenewLeaseRequest(id=lease_id, ttl_ms=_ttl_ms(ttl_s), ts=ts)
        self._rpc.unary(self._stub.RenewLease, req)

    def release_lease(self, lease_id: str) -> bool:
        """Give back lease ``lease_id`` (idempotent); whether it was still held."""
        req = cpb.ReleaseLeaseRequest(id=lease_id)
        return self._rpc.unary(self._stub.ReleaseLease, req).existed

    def gc_status(self, page_size: int = 0, page_token: str = "", holder: str = "") -> GcInfo:
        """The GC safepoint, what holds it (oldest first), GC progress, the count of live leases
        (``lease_count``: of ``holder`` if given; ``total_leases``: all) and one page of them
        in id order: the first ``page_size`` (default 1,000, at most 10,000), or those after
        ``page_token`` (a previous answer's ``next_page_token``, '' after the last page)."""
        req = cpb.GcStatusRequest(page_size=page_size, page_token=page_token, holder=holder)
        return GcInfo.from_pb(self._rpc.unary(self._stub.GcStatus, req))

    def iter_leases(self, holder: str = "", page_size: int = 0) -> Iterator[LeaseInfo]:
        """Every live reader lease (of ``holder`` if given), in id order, a page at a time: a
        lease live throughout comes exactly once, one taken or released meanwhile may or may
        not."""
        token = ""
        while True:
            st = self.gc_status(page_size, token, holder)
            yield from st.leases
            token = st.next_page_token
            if not token:
                return

    # ------------------------------------------------------------------ revisions

    def revise(
        self,
        table: str,
        *,
        to_ts: int | None = None,
        to_barrier: int | None = None,
        corrections: object = None,
        mode: str = "upsert",
        dry_run: bool = False,
        who: str | None = None,
        key: str | None = None,
    ) -> Revision:
        """Revise root table ``table`` in one new transaction and return its record.

        Exactly one of: ``to_barrier`` or ``to_ts`` (roll the table back: every row changed
        since then gets its value there back, rows inserted since are deleted; writers of the
        table wait while it is applied), or ``corrections`` (a ``pyarrow.Table``, or a Spark
        DataFrame written from the executors) applied in ``mode`` ``upsert`` or ``delete``
        (the rows name keys). History is kept: the table reads as before at any ts below the
        revision's ``commit_ts``. Every view downstream reaches the revision at
        ``revision.barrier``; ``wait_revised`` waits for them. ``dry_run`` writes nothing and
        returns the counts. Refused: a view or state table (FailedPrecondition; rebuild it), a
        target below the GC safepoint (SnapshotTooOld), a missing table (TableNotFound).

        A rollback runs under a revision ``key`` (default: a fresh one for this call): a call
        whose answer is lost is asked again with the same key, and the server answers with the
        revision it ran, never a second one; pass the same ``key`` again to get that revision
        (a key whose revision was aborted is refused: use a new one). Once committed, a
        revision is never reported as failed; RevisionOutcomeUnknown (naming the key or the id)
        when its outcome could not be learned."""
        who = who if who is not None else default_who()
        given = sum(x is not None for x in (to_ts, to_barrier, corrections))
        if given != 1:
            raise InvalidArgument(
                f"table {table!r}: give exactly one of to_ts, to_barrier and corrections"
            )
        if corrections is not None:
            if key is not None:
                # Keys are kept for rollbacks only (the Revise call): a correction set is begun
                # and committed by separate calls of this client, none of them repeated.
                raise InvalidArgument(
                    f"table {table!r}: a revision key applies to a rollback (to_ts or "
                    "to_barrier), not to corrections"
                )
            if hasattr(corrections, "sparkSession") and hasattr(corrections, "mapInArrow"):
                # A Spark DataFrame: its rows are written by the executors. The writer lives
                # with the other Spark writers (spark_sink), imported only here, where the
                # caller already runs Spark (the one call from this package into spark_sink;
                # tests/unit/test_layering.py allows exactly this one).
                from spark_sink.revision import write_dataframe_corrections

                return write_dataframe_corrections(
                    self,
                    table,
                    corrections,  # type: ignore[arg-type]
                    mode,
                    who,
                    dry_run=dry_run,
                )
            import pyarrow as pa

            if not isinstance(corrections, pa.Table):
                raise InvalidArgument(
                    f"table {table!r}: corrections must be a pyarrow.Table or a Spark "
                    f"DataFrame, not {type(corrections).__name__}"
                )
            if dry_run:
                info = correctable_table(self, table, mode)
                muts = arrow_mutations(info, corrections, mode)
                restored, removed = count_changes(self, muts, self.tso())
                return dry_run_record(self, table, mode, who, restored, removed)
            return write_arrow_corrections(self, table, corrections, mode, who)
        req = cpb.ReviseRequest(
            table=table,
            to_ts=to_ts or 0,
            to_barrier=to_barrier or 0,
            dry_run=dry_run,
            who=who,
            key=key if key is not None else new_revision_key(),
        )
        if dry_run:  # writes nothing: retried (e.g. while the server is busy, ServerBusy)
            return Revision.from_pb(self._rpc.unary(self._stub.Revise, req, REVISE_TIMEOUT_S))
        # Retried only under its key: run again without it after writers committed, a
        # rollback would undo their writes too.
        return Revision.from_pb(call_revise(self, req, REVISE_TIMEOUT_S))

    def downstream(self, table: str) -> list[str]:
        """The views computed from ``table`` through view jobs, directly or not, upstream first
        (the views a revision of ``table`` reaches at its barrier)."""
        jobs = [j for j in self.topology().jobs if j.kind == "view"]
        return downstream_tables(table, [(j.sink, list(j.sources)) for j in jobs])

    def rebuild(self, view: str, who: str | None = None) -> Revision:
        """Ask ``view``'s job to recompute the view at its next barrier (a rebuild already
        pending is returned instead); the views downstream follow at the same barrier."""
        req = cpb.RebuildRequest(view=view, who=who if who is not None else default_who())
        return Revision.from_pb(self._rpc.unary(self._stub.Rebuild, req))

    def revision(self, revision_id: int) -> Revision:
        """The record of revision ``revision_id`` (NotFound if none)."""
        req = cpb.GetRevisionRequest(id=revision_id)
        return Revision.from_pb(self._rpc.unary(self._stub.GetRevision, req))

    def revisions(self, table: str | None = None, limit: int = 0) -> list[Revision]:
        """Recorded revisions, newest first (of ``table`` only, and at most ``limit``)."""
        req = cpb.ListRevisionsRequest(table=table or "", limit=limit)
        return [
            Revision.from_pb(r) for r in self._rpc.unary(self._stub.ListRevisions, req).revisions
        ]

    def wait_revised(
        self,
        revision: Revision | int,
        timeout_s: float = 300.0,
        progress: Callable[[Revision, dict[str, tuple[int, str]]], None] | None = None,
    ) -> int:
        """Wait until every view downstream of the revision has its barrier; return the barrier
        (see ``coordinator.revisions.wait_revised``)."""
        return wait_revised(self, revision, timeout_s, progress)

    def topology(self) -> TopologyInfo:
        """Every registered job (``JobInfo``, by name) and every table with its writer."""
        return TopologyInfo.from_pb(self._rpc.unary(self._stub.Topology, cpb.TopologyRequest()))

    def delay(self) -> DelayInfo:
        """The newest barrier and how far behind every table is, with its critical path."""
        return DelayInfo.from_pb(self._rpc.unary(self._stub.Delay, cpb.DelayRequest()))

    def status(self) -> ServerStatus:
        """The server's version, a fresh timestamp, table and job counts, space used."""
        return ServerStatus.from_pb(self._rpc.unary(self._stub.Status, cpb.StatusRequest()))

    def close(self) -> None:
        pid, stream, batcher = self._tso_parts
        if pid == os.getpid():  # a parent's stream and thread are the parent's to close
            batcher.close()
            stream.close()
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
