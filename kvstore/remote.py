"""RemoteStore: the LocalStore interface over gRPC, for processes that do not own the LMDB files.

Transport trouble (UNAVAILABLE, DEADLINE_EXCEEDED) and a server busy with its heavy calls
(RESOURCE_EXHAUSTED marked ServerBusy) are retried with bounded exponential backoff
(``RetryPolicy``); every store RPC is idempotent, so a retry after a lost answer is safe. Other
status codes become the matching ``kvstore.errors`` exception, and Percolator outcomes in a
response are raised as their TxnError.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import grpc
from google.protobuf.message import Message
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from kvstore import errors, limits, wire
from kvstore.grpc_errors import ERROR_CLASS_KEY
from kvstore.limits import split_keys
from kvstore.mvcc.keys import table_id_of, table_prefix
from kvstore.mvcc.records import Mutation
from kvstore.results import ChangeRecord, DropResult, TxnStatusResult
from kvstore.table_info import TableInfo
from snapview_proto.snapview.v1 import kvstore_pb2 as pb
from snapview_proto.snapview.v1 import kvstore_pb2_grpc as pb_grpc

T = TypeVar("T")
CallMetadata = tuple[tuple[str, str], ...]
"""gRPC metadata sent with every call, e.g. (("authorization", "Bearer ..."),)."""
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_ERRORS: dict[grpc.StatusCode, type[errors.SnapviewError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgument,
    grpc.StatusCode.NOT_FOUND: errors.NotFound,
    grpc.StatusCode.ALREADY_EXISTS: errors.AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: errors.FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: errors.Unavailable,
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: errors.Unauthenticated,
    grpc.StatusCode.ABORTED: errors.Aborted,
    grpc.StatusCode.DATA_LOSS: errors.DataLoss,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ResourceExhausted,
}


@dataclass(frozen=True)
class RetryPolicy:
    """How a client retries transport failures and a server busy with its heavy calls
    (ServerBusy). Nothing else is retried here.

    The defaults ride out a server restart (about 1.5 s) and a pause: waits start at 50 ms and
    never exceed 0.5 s, so a client notices a restarted server within half a second, for up to
    30 s in all."""

    max_attempts: int = 100
    """Attempts in all, the first included."""
    max_elapsed_s: float = 30.0
    """Give up after this long, whatever the attempt count."""
    initial_backoff_s: float = 0.05
    """The first wait; each further wait doubles it."""
    max_backoff_s: float = 0.5
    """No single wait is longer than this."""
    rpc_timeout_s: float = 60.0
    """Deadline of one attempt."""


def _retryable(e: BaseException) -> bool:
    """Transport trouble, or a server busy with its heavy calls (kvstore.heavy_calls: a
    RESOURCE_EXHAUSTED the server marks ServerBusy; any other RESOURCE_EXHAUSTED is final)."""
    if not isinstance(e, grpc.RpcError):
        return False
    code = e.code()
    return code in RETRYABLE or (
        code is grpc.StatusCode.RESOURCE_EXHAUSTED and _class_from_trailer(e) is errors.ServerBusy
    )


def _class_from_trailer(e: grpc.RpcError) -> type[errors.RequestError] | None:
    try:
        md = dict(e.trailing_metadata() or ())
    except Exception:  # noqa: BLE001 - some RpcErrors carry no call
        return None
    cls = errors.error_class(md.get(ERROR_CLASS_KEY, ""))
    return cls if cls is not None and cls.code == e.code().name else None


def translate_rpc_error(e: grpc.RpcError) -> errors.SnapviewError:
    """The kvstore.errors exception for a failed call: the server's own class when it named one
    (e.g. ValueTooLarge), else the class for the status code; the server's message is kept."""
    cls = _class_from_trailer(e) or _ERRORS.get(e.code(), errors.SnapviewError)
    if cls is errors.TableNotFound:
        return errors.TableNotFound.from_message(e.details() or "")
    err = cls(e.details() or str(e.code()))
    if cls is errors.SnapviewError:
        err.code = e.code().name
    return err


class RpcCaller:
    """Invokes stub methods with retries, metadata and error translation. ``on_error`` sees
    every translated error before it is raised (``RemoteStore`` forgets a table id the server
    no longer knows)."""

    def __init__(
        self,
        policy: RetryPolicy,
        metadata: CallMetadata = (),
        on_error: Callable[[errors.SnapviewError], None] | None = None,
    ) -> None:
        self.policy = policy
        self.metadata = metadata
        self._on_error = on_error

    def _error(self, e: grpc.RpcError) -> errors.SnapviewError:
        err = translate_rpc_error(e)
        if self._on_error is not None:
            self._on_error(err)
        return err

    def _retrying(self, attempts: int | None = None) -> Retrying:
        p = self.policy
        stop = stop_after_attempt(attempts or p.max_attempts) | stop_after_delay(p.max_elapsed_s)
        return Retrying(
            retry=retry_if_exception(_retryable),
            reraise=True,
            stop=stop,
            wait=wait_exponential(multiplier=p.initial_backoff_s, max=p.max_backoff_s),
        )

    def unary(
        self, method: Callable[..., T], request: Message, timeout_s: float | None = None
    ) -> T:
        """One call, retried (see RetryPolicy); each attempt's deadline is ``timeout_s``
        (default the policy's rpc_timeout_s)."""
        timeout = timeout_s or self.policy.rpc_timeout_s
        # The first attempt goes straight out: building a tenacity loop costs more than a
        # loopback RPC, and the retry machinery is only needed once a call has failed.
        try:
            return method(request, timeout=timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            if not _retryable(e) or self.policy.max_attempts <= 1:
                raise self._error(e) from None
        try:
            for attempt in self._retrying(self.policy.max_attempts - 1):
                with attempt:
                    return method(request, timeout=timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            raise self._error(e) from None
        raise AssertionError("unreachable: the retry loop returns or re-raises")

    def once(self, method: Callable[..., T], request: Message, timeout_s: float) -> T:
        """One attempt, never retried, with its own deadline: for a call whose repeat is not
        harmless (a revision), where a lost answer must reach the caller, not a second run."""
        try:
            return method(request, timeout=timeout_s, metadata=self.metadata)
        except grpc.RpcError as e:
            raise self._error(e) from None

    def stream(self, method: Callable[..., Iterable[T]], request: Message) -> list[T]:
        """A server-streaming call, collected; retried whole (the calls are read-only)."""
        try:
            for attempt in self._retrying():
                with attempt:
                    return list(
                        method(request, timeout=self.policy.rpc_timeout_s, metadata=self.metadata)
                    )
        except grpc.RpcError as e:
            raise self._error(e) from None
        raise AssertionError("unreachable: the retry loop returns or re-raises")


class RemoteStore:
    """The store over a gRPC channel; same methods and errors as LocalStore."""

    def __init__(
        self,
        channel: grpc.Channel,
        policy: RetryPolicy | None = None,
        metadata: CallMetadata = (),
    ) -> None:
        self.stub = pb_grpc.KvStoreStub(channel)
        self.rpc = RpcCaller(policy or RetryPolicy(), metadata, self._forget_dropped)
        self._tables: dict[str, TableInfo] = {}
        self._tables_by_id: dict[int, TableInfo] = {}

    def _forget_dropped(self, err: errors.SnapviewError) -> None:
        """The server knows no table of an id this client cached (another client dropped it,
        and may have made a new table of the same name): forget it, so the next call by name
        asks the server again instead of failing the same way for good (issue 24, item 7)."""
        if isinstance(err, errors.TableNotFound) and isinstance(err.table, int):
            stale = self._tables_by_id.pop(err.table, None)
            if stale is not None and self._tables.get(stale.name) is stale:
                del self._tables[stale.name]

    def refreshed(self, stale: TableInfo, err: errors.TableNotFound) -> TableInfo | None:
        """The table now named ``stale.name``, when ``err`` says ``stale`` (a cached definition)
        was dropped and the name was taken by a new table since; None when ``err`` is about
        something else. Raises TableNotFound naming the table if no table has that name now."""
        if err.table != stale.id:
            return None
        fresh = self.describe_table(stale.name, refresh=True)
        return fresh if fresh.id != stale.id else None

    # catalog
    def create_table(
        self,
        name: str,
        schema: str,
        primary_key: list[str] | None = None,
        kind: str = "root",
        if_not_exists: bool = False,
        hidden_row_id: bool = False,
    ) -> TableInfo:
        resp = self.rpc.unary(
            self.stub.CreateTable,
            pb.CreateTableRequest(
                name=name,
                schema=schema,
                primary_key=list(primary_key or []),
                kind=kind,
                if_not_exists=if_not_exists,
                hidden_row_id=hidden_row_id,
            ),
        )
        return self._remember(wire.table_from_pb(resp))

    def drop_table(self, name: str, if_exists: bool = False, cascade: bool = False) -> DropResult:
        self._tables.pop(name, None)
        r = self.rpc.unary(
            self.stub.DropTable,
            pb.DropTableRequest(name=name, if_exists=if_exists, cascade=cascade),
        )
        for t in r.also_dropped:
            self._tables.pop(t, None)
        return DropResult(r.dropped, tuple(r.also_dropped), tuple(r.unregistered_jobs))

    def describe_table(self, name: str, refresh: bool = False) -> TableInfo:
        if refresh or name not in self._tables:
            resp = self.rpc.unary(self.stub.DescribeTable, pb.DescribeTableRequest(name=name))
            self._remember(wire.table_from_pb(resp))
        return self._tables[name]

    def list_tables(self) -> list[TableInfo]:
        resp = self.rpc.unary(self.stub.ListTables, pb.ListTablesRequest())
        return [self._remember(wire.table_from_pb(t)) for t in resp.tables]

    def table_by_id(self, table_id: int) -> TableInfo:
        if table_id not in self._tables_by_id:
            self.list_tables()
        try:
            return self._tables_by_id[table_id]
        except KeyError:
            raise errors.TableNotFound(table_id) from None

    def _remember(self, info: TableInfo) -> TableInfo:
        old = self._tables.get(info.name)
        if old is not None and old.id != info.id:  # dropped and made anew: the old id is gone
            self._tables_by_id.pop(old.id, None)
        self._tables[info.name] = info
        self._tables_by_id[info.id] = info
        return info

    # transactional writes
    def prewrite(
        self,
        mutations: Sequence[Mutation],
        primary: bytes,
        start_ts: int,
        ttl_ms: int = 3000,
        txn_size: int = 0,
        try_one_pc: bool = False,
    ) -> int:
        resp = self.rpc.unary(
            self.stub.Prewrite,
            pb.PrewriteRequest(
                packed=wire.pack_mutations(mutations),
                primary=primary,
                start_ts=start_ts,
                lock_ttl_ms=ttl_ms,
                txn_size=txn_size,
                try_one_pc=try_one_pc,
            ),
        )
        if resp.errors:
            wire.raise_key_error(resp.errors[0])
        return resp.one_pc_commit_ts

    def commit(self, start_ts: int, commit_ts: int, keys: list[bytes]) -> None:
        resp = self.rpc.unary(
            self.stub.Commit, pb.CommitRequest(start_ts=start_ts, commit_ts=commit_ts, keys=keys)
        )
        wire.raise_key_error(resp.error)

    def rollback(self, start_ts: int, keys: list[bytes]) -> None:
        """Roll back ``keys`` of txn ``start_ts``, in requests within kvstore.limits (rollback is
        idempotent per key, so the split changes nothing)."""
        for run in split_keys(keys):
            resp = self.rpc.unary(
                self.stub.Rollback, pb.RollbackRequest(start_ts=start_ts, keys=run)
            )
            wire.raise_key_error(resp.error)

    def lock_clock_ms(self) -> int:
        """Now for lock TTLs as this client sees it: its wall clock. It only decides whether to
        ask the server to roll back a primary that has no lock yet; a primary lock's own expiry
        is judged by the server, on the TSO's clock."""
        return int(time.time() * 1000)

    def check_txn_status(
        self, primary: bytes, lock_ts: int, rollback_if_not_exist: bool = False
    ) -> TxnStatusResult:
        resp = self.rpc.unary(
            self.stub.CheckTxnStatus,
            pb.CheckTxnStatusRequest(
                primary_key=primary, lock_ts=lock_ts, rollback_if_not_exist=rollback_if_not_exist
            ),
        )
        wire.raise_key_error(resp.error)
        return wire.status_from_pb(resp)

    def resolve_locks(
        self, start_ts: int, commit_ts: int, *, keys: Sequence[bytes] | None = None
    ) -> int:
        """As ``LocalStore.resolve_locks``: the whole transaction, or only ``keys`` (at most
        kvstore.limits.MAX_REQUEST_MUTATIONS) with the rest left to the server."""
        resp = self.rpc.unary(
            self.stub.ResolveLocks,
            pb.ResolveLocksRequest(start_ts=start_ts, commit_ts=commit_ts, keys=keys or ()),
        )
        wire.raise_key_error(resp.error)
        return resp.resolved_keys

    def txn_heartbeat(self, primary: bytes, start_ts: int, advise_ttl_ms: int) -> int:
        resp = self.rpc.unary(
            self.stub.TxnHeartbeat,
            pb.TxnHeartbeatRequest(
                primary_key=primary, start_ts=start_ts, advise_ttl_ms=advise_ttl_ms
            ),
        )
        wire.raise_key_error(resp.error)
        return resp.ttl_ms

    # reads
    def get(self, key: bytes, version: int) -> bytes | None:
        resp = self.rpc.unary(self.stub.Get, pb.GetRequest(key=key, version=version))
        wire.raise_key_error(resp.error)
        return resp.value if resp.found else None

    def scan(
        self, start: bytes, end: bytes | None, version: int, limit: int = 0, chunk_rows: int = 0
    ) -> Iterator[tuple[list[bytes], list[bytes]]]:
        chunks = self.rpc.stream(
            self.stub.Scan,
            pb.ScanRequest(
                start_key=start,
                end_key=end or b"",
                version=version,
                limit=limit,
                chunk_rows=chunk_rows,
            ),
        )
        for c in chunks:
            wire.raise_key_error(c.error)
            yield list(c.keys), list(c.values)

    def scan_ranges(
        self,
        ranges: list[tuple[bytes, bytes]],
        version: int,
        limit: int = 0,
        range_limit: int = 0,
    ) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """As LocalStore.scan_ranges; a list above the request limits goes in several requests
        (checked whole first, so a range in another table is refused before any is sent)."""
        # Loaded here: kvstore.validation needs numpy, which a CLI call must not load.
        from kvstore.validation import check_key_ranges

        checked = check_key_ranges(ranges)
        return self._scan_ranges(checked, version, limit, range_limit)

    def _scan_ranges(
        self, ranges: list[tuple[bytes, bytes]], version: int, limit: int, range_limit: int
    ) -> Iterator[tuple[list[bytes], list[bytes]]]:
        remaining = limit
        for run in limits.split_ranges(ranges, limits.MAX_SCAN_RANGES) or [[]]:
            chunks = self.rpc.stream(
                self.stub.ScanRanges,
                pb.ScanRangesRequest(
                    ranges=[pb.KeyRange(start_key=s, end_key=e) for s, e in run],
                    version=version,
                    limit=remaining if limit else 0,
                    range_limit=range_limit,
                ),
            )
            for c in chunks:
                wire.raise_key_error(c.error)
                if c.keys:
                    yield list(c.keys), list(c.values)
                remaining -= len(c.keys)
            if limit and remaining <= 0:
                return

    def scan_table(self, table: str, version: int) -> Iterator[tuple[list[bytes], list[bytes]]]:
        info = self.describe_table(table)
        return self.scan(table_prefix(info.id), table_prefix(info.id + 1), version)

    def scan_changes(
        self, table: str, from_ts: int, to_ts: int, chunk_rows: int = 0
    ) -> list[ChangeRecord]:
        """As LocalStore.scan_changes; the server streams it in chunks of ``chunk_rows``
        (0: its default). Retried whole on transport trouble and while the server is busy
        (ServerBusy: its heavy-call limit), within the RetryPolicy."""
        chunks = self.rpc.stream(
            self.stub.ScanChanges,
            pb.ScanChangesRequest(table=table, from_ts=from_ts, to_ts=to_ts, chunk_rows=chunk_rows),
        )
        out: list[ChangeRecord] = []
        for c in chunks:
            wire.raise_key_error(c.error)
            out.extend(wire.change_from_pb(x) for x in c.changes)
        return out

    def resolved_ts(self, table: str) -> int:
        return self.rpc.unary(self.stub.ResolvedTs, pb.ResolvedTsRequest(table=table)).resolved_ts

    def split_range(
        self, start: bytes, end: bytes, rows_per_split: int = 100_000, max_splits: int = 64
    ) -> tuple[list[bytes], int]:
        r = self.rpc.unary(
            self.stub.SplitRange,
            pb.SplitRangeRequest(
                start_key=start, end_key=end, rows_per_split=rows_per_split, max_splits=max_splits
            ),
        )
        return list(r.boundaries), r.approx_rows

    def change_boundary(
        self, table: str, from_ts: int, to_ts: int, max_changes: int
    ) -> tuple[int, int]:
        r = self.rpc.unary(
            self.stub.ChangeBoundary,
            pb.ChangeBoundaryRequest(
                table=table, from_ts=from_ts, to_ts=to_ts, max_changes=max_changes
            ),
        )
        return r.ts, r.changes

    def gc(self, safepoint: int) -> int:
        return self.rpc.unary(self.stub.Gc, pb.GcRequest(safepoint=safepoint)).versions_removed


__all__ = ["RemoteStore", "RetryPolicy", "RpcCaller", "translate_rpc_error", "table_id_of"]
