"""The Python client: ``coordinator.connect(address)`` returns a ``Client``.

It talks to ``snapview serve`` over gRPC (one channel for the Coordinator and KvStore services).
Transport failures (UNAVAILABLE, DEADLINE_EXCEEDED) are retried with bounded backoff
(``RetryPolicy``); nothing else is retried behind the caller's back, except waiting out a live
lock on a read, which is bounded by ``lock_wait_s``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import grpc

from coordinator.errors import BarrierNotReached
from coordinator.jobs import JobClient
from coordinator.snapshot import Snapshot
from coordinator.transaction import Transaction
from coordinator.tso_client import TsoBatcher, TsoStreamFetcher
from kvstore.errors import KeyIsLocked
from kvstore.lock_resolution import resolve_lock
from kvstore.mvcc.records import Mutation
from kvstore.remote import CallMetadata, RemoteStore, RetryPolicy, RpcCaller
from kvstore.table_info import TableInfo
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb
from snapview_proto.snapview.v1 import coordinator_pb2_grpc as cpb_grpc

if TYPE_CHECKING:  # pyarrow loads on the first read: the CLI's status, tables... never need it
    import pyarrow as pa

T = TypeVar("T")
DEFAULT_ADDRESS = "localhost:50051"
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 256 << 20),
    ("grpc.max_send_message_length", 256 << 20),
    # Reconnect quickly to a restarted server (gRPC's default backoff starts at 1 s and grows).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]


def connect(
    address: str | None = None,
    *,
    token: str | None = None,
    token_file: str | None = None,
    tls_ca_file: str | None = None,
    retry: RetryPolicy | None = None,
    lock_wait_s: float = 30.0,
) -> Client:
    """Connect to a snapview server (default: $SNAPVIEW_COORDINATOR or localhost:50051).

    ``token``/``token_file`` send the shared auth token; ``tls_ca_file`` turns on TLS with that
    root certificate. The connection is lazy: the first call reaches the server."""
    address = address or os.environ.get("SNAPVIEW_COORDINATOR", DEFAULT_ADDRESS)
    if token_file:
        with open(token_file) as f:
            token = f.read().strip()
    if tls_ca_file:
        with open(tls_ca_file, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(address, creds, options=GRPC_OPTIONS)
    else:
        channel = grpc.insecure_channel(address, options=GRPC_OPTIONS)
    metadata: CallMetadata = (("authorization", f"Bearer {token}"),) if token else ()
    return Client(channel, address, retry or RetryPolicy(), metadata, lock_wait_s)


class Client:
    """Tables, transactions, timestamps and snapshot reads over one gRPC channel.

    Thread-safe. Not fork-safe: a forked child (e.g. a Spark worker) must connect anew."""

    def __init__(
        self,
        channel: grpc.Channel,
        address: str,
        retry: RetryPolicy,
        metadata: CallMetadata = (),
        lock_wait_s: float = 30.0,
    ) -> None:
        self.address = address
        self.channel = channel
        self.retry = retry
        self.lock_wait_s = lock_wait_s
        self.store = RemoteStore(channel, retry, metadata)
        self._stub = cpb_grpc.CoordinatorStub(channel)
        self._rpc = RpcCaller(retry, metadata)
        self._tso_stream = TsoStreamFetcher(
            lambda reqs: self._stub.TsoStream(reqs, metadata=metadata),
            self._fetch_tso,
            cpb.TsoRequest,
        )
        self._tso = TsoBatcher(self._tso_stream.fetch)
        self.jobs = JobClient(self._stub, self._rpc)
        """The job protocol (epochs, registry, barrier plans) on this client's channel."""
        self._closed = threading.Event()

    # ------------------------------------------------------------------ timestamps

    def _fetch_tso(self, count: int) -> int:
        return self._rpc.unary(self._stub.Tso, cpb.TsoRequest(count=count)).first

    def tso(self) -> int:
        """A fresh timestamp, greater than every timestamp issued before this call began.
        Concurrent callers share one request on the client's TSO stream."""
        return self._tso.get()

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

    def drop_table(self, name: str, if_exists: bool = False) -> bool:
        return self.store.drop_table(name, if_exists)

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

    def get(self, table: str, key: dict, at: int | None = None) -> dict | None:
        """One row by primary key at ``at`` (default: a fresh timestamp), or None."""
        info = self.describe_table(table)
        ts = at or self.tso()
        k = info.key_codec.encode(key)
        raw = self.with_lock_wait(lambda: self.store.get(k, ts))
        return None if raw is None else info.row_codec.decode(raw)

    def read_batches(self, table: str, at: int | None = None) -> Iterator[pa.RecordBatch]:
        info = self.describe_table(table)
        ts = at or self.tso()
        chunks = self.with_lock_wait(lambda: list(self.store.scan_table(table, ts)))
        for _, values in chunks:
            yield info.row_codec.decode_arrow(values)

    def read(self, table: str, at: int | None = None) -> pa.Table:
        """The whole table as of ``at`` (default: a fresh timestamp, i.e. the latest committed
        state) as a pyarrow Table in primary-key order. Repeating a read at the same ``at``
        returns the same rows, whatever commits later."""
        import pyarrow as pa

        info = self.describe_table(table)
        batches = list(self.read_batches(table, at))
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
    ) -> Snapshot:
        """A consistent read point for ``tables`` (``snap.barrier``, ``snap.read_ts(t)``,
        ``snap.read(t)``).

        mode ``snapshot``: the newest barrier all of them have (or ``barrier``), each table at
        its read ts there, so together they show one state of the sources. mode ``latest``: all
        at one fresh timestamp, each table at its own newest version (not consistent across
        views). ``wait_s`` waits that long for a common barrier before raising
        BarrierNotReached."""
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
        return Snapshot(
            self, r.barrier, r.mode, {x.table: x.read_ts for x in r.reads}, r.barrier_wall_ms
        )

    def topology(self) -> cpb.TopologyResponse:
        return self._rpc.unary(self._stub.Topology, cpb.TopologyRequest())

    def delay(self) -> cpb.DelayResponse:
        return self._rpc.unary(self._stub.Delay, cpb.DelayRequest())

    def status(self) -> cpb.StatusResponse:
        return self._rpc.unary(self._stub.Status, cpb.StatusRequest())

    def close(self) -> None:
        self._tso.close()
        self._tso_stream.close()
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
