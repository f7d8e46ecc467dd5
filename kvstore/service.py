"""The KvStore gRPC service: translates snapview.v1 requests to LocalStore commands.

Percolator outcomes (TxnError) go into the response's KeyError; request errors become status
codes (see grpc_errors). The service holds no state of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import grpc

from kvstore import wire
from kvstore.errors import InvalidArgument, RequestTooLarge, TxnError
from kvstore.grpc_errors import generic_handler
from kvstore.limits import MAX_REQUEST_BYTES, MAX_REQUEST_MUTATIONS
from kvstore.mvcc.records import Mutation
from kvstore.store import Guard, LocalStore
from kvstore.validation import check_range_count
from snapview_proto.snapview.v1 import kvstore_pb2 as pb

SERVICE_NAME = "snapview.v1.KvStore"


def check_key_count(method: str, n: int) -> None:
    """Refuse a request naming more keys than kvstore.limits allows."""
    if n > MAX_REQUEST_MUTATIONS:
        raise RequestTooLarge(
            f"{method}: {n} keys in one request; the limit is {MAX_REQUEST_MUTATIONS} "
            "(split the request)"
        )


def check_request_size(method: str, mutations: list[Mutation]) -> None:
    """Refuse a prewrite above kvstore.limits: it would hold the store's single writer (and the
    server's memory) for as long as it takes."""
    check_key_count(method, len(mutations))
    size = sum(len(k) + len(v) for _, k, v in mutations)
    if size > MAX_REQUEST_BYTES:
        raise RequestTooLarge(
            f"{method}: {size} bytes of keys and values in one request; the limit is "
            f"{MAX_REQUEST_BYTES} (split the request)"
        )


class CallerRoles(Protocol):
    """What the service asks of the server's roles (coordinator.server.roles.Roles)."""

    def is_admin(self, context: Any) -> bool: ...


class KvStoreService:
    """``roles``: the server's tokens; a caller without the admin role has its Commit, Rollback
    and ResolveLocks checked against the transaction's primary ("checked"), an admin's only
    where an epoch or a revision owns the transaction ("raw"; kvstore.actions.txn_guard).
    Without roles (a server without tokens) every caller is admin."""

    def __init__(self, store: LocalStore, roles: CallerRoles | None = None) -> None:
        self.store = store
        self.roles = roles

    def _guard(self, ctx: Any) -> Guard:
        return "raw" if self.roles is None or self.roles.is_admin(ctx) else "checked"

    def handler(self) -> grpc.GenericRpcHandler:
        return generic_handler(SERVICE_NAME, pb.DESCRIPTOR.services_by_name["KvStore"], self)

    def Prewrite(self, req: pb.PrewriteRequest, ctx: grpc.ServicerContext) -> pb.PrewriteResponse:
        muts = wire.mutations_from_pb(req.mutations)
        if req.HasField("packed"):
            muts += wire.unpack_mutations(req.packed)
        if not muts:
            raise InvalidArgument(
                "Prewrite needs at least one mutation: both mutations and packed are empty"
            )
        check_request_size("Prewrite", muts)
        try:
            ts = self.store.prewrite(
                muts,
                req.primary,
                req.start_ts,
                req.lock_ttl_ms or 3000,
                req.txn_size,
                req.try_one_pc,
            )
        except TxnError as e:
            return pb.PrewriteResponse(errors=[wire.key_error_to_pb(e)])
        return pb.PrewriteResponse(one_pc_commit_ts=ts)

    def Commit(self, req: pb.CommitRequest, ctx: grpc.ServicerContext) -> pb.CommitResponse:
        check_key_count("Commit", len(req.keys))
        try:
            self.store.commit(req.start_ts, req.commit_ts, list(req.keys), guard=self._guard(ctx))
        except TxnError as e:
            return pb.CommitResponse(error=wire.key_error_to_pb(e))
        return pb.CommitResponse()

    def Rollback(self, req: pb.RollbackRequest, ctx: grpc.ServicerContext) -> pb.RollbackResponse:
        check_key_count("Rollback", len(req.keys))
        try:
            self.store.rollback(req.start_ts, list(req.keys), guard=self._guard(ctx))
        except TxnError as e:
            return pb.RollbackResponse(error=wire.key_error_to_pb(e))
        return pb.RollbackResponse()

    def CheckTxnStatus(
        self, req: pb.CheckTxnStatusRequest, ctx: grpc.ServicerContext
    ) -> pb.CheckTxnStatusResponse:
        if not req.primary_key:
            raise InvalidArgument("CheckTxnStatus needs primary_key")
        try:
            r = self.store.check_txn_status(req.primary_key, req.lock_ts, req.rollback_if_not_exist)
        except TxnError as e:
            return pb.CheckTxnStatusResponse(error=wire.key_error_to_pb(e))
        return wire.status_to_pb(req.primary_key, r)

    def ResolveLocks(
        self, req: pb.ResolveLocksRequest, ctx: grpc.ServicerContext
    ) -> pb.ResolveLocksResponse:
        check_key_count("ResolveLocks", len(req.keys))
        try:
            n = self.store.resolve_locks(
                req.start_ts, req.commit_ts, keys=list(req.keys) or None, guard=self._guard(ctx)
            )
        except TxnError as e:
            return pb.ResolveLocksResponse(error=wire.key_error_to_pb(e))
        return pb.ResolveLocksResponse(resolved_keys=n)

    def TxnHeartbeat(
        self, req: pb.TxnHeartbeatRequest, ctx: grpc.ServicerContext
    ) -> pb.TxnHeartbeatResponse:
        try:
            ttl = self.store.txn_heartbeat(req.primary_key, req.start_ts, req.advise_ttl_ms)
        except TxnError as e:
            return pb.TxnHeartbeatResponse(error=wire.key_error_to_pb(e))
        return pb.TxnHeartbeatResponse(ttl_ms=ttl)

    def Get(self, req: pb.GetRequest, ctx: grpc.ServicerContext) -> pb.GetResponse:
        try:
            v = self.store.get(req.key, req.version)
        except TxnError as e:
            return pb.GetResponse(error=wire.key_error_to_pb(e))
        return pb.GetResponse(found=v is not None, value=v or b"")

    def Scan(self, req: pb.ScanRequest, ctx: grpc.ServicerContext) -> Iterator[pb.ScanChunk]:
        try:
            for keys, values in self.store.scan(
                req.start_key, req.end_key or None, req.version, req.limit, req.chunk_rows
            ):
                yield pb.ScanChunk(keys=keys, values=values)
        except TxnError as e:
            yield pb.ScanChunk(error=wire.key_error_to_pb(e))

    def ScanRanges(
        self, req: pb.ScanRangesRequest, ctx: grpc.ServicerContext
    ) -> Iterator[pb.ScanChunk]:
        check_range_count(len(req.ranges))  # before building a tuple per range
        chunks = self.store.scan_ranges(
            [(r.start_key, r.end_key) for r in req.ranges], req.version, req.limit, req.range_limit
        )
        try:
            for keys, values in chunks:
                yield pb.ScanChunk(keys=keys, values=values)
        except TxnError as e:
            yield pb.ScanChunk(error=wire.key_error_to_pb(e))

    def ScanChanges(
        self, req: pb.ScanChangesRequest, ctx: grpc.ServicerContext
    ) -> Iterator[pb.ChangeChunk]:
        # Streamed: the server holds a window of keys and one chunk, never the whole change;
        # and at most --max-heavy-calls such calls at once (kvstore.heavy_calls).
        heavy = self.store.heavy_calls
        with heavy.hold("ScanChanges"):
            try:
                chunks = self.store.scan_changes_chunks(
                    req.table, req.from_ts, req.to_ts, req.chunk_rows
                )
                # Read and encoded in the heavy calls' turn, sent outside it.
                yield from heavy.in_turns(
                    pb.ChangeChunk(changes=[wire.change_to_pb(c) for c in chunk])
                    for chunk in chunks
                )
            except TxnError as e:
                yield pb.ChangeChunk(error=wire.key_error_to_pb(e))

    def ResolvedTs(
        self, req: pb.ResolvedTsRequest, ctx: grpc.ServicerContext
    ) -> pb.ResolvedTsResponse:
        return pb.ResolvedTsResponse(resolved_ts=self.store.resolved_ts(req.table))

    def Gc(self, req: pb.GcRequest, ctx: grpc.ServicerContext) -> pb.GcResponse:
        return pb.GcResponse(versions_removed=self.store.gc(req.safepoint))

    def SplitRange(
        self, req: pb.SplitRangeRequest, ctx: grpc.ServicerContext
    ) -> pb.SplitRangeResponse:
        b, n = self.store.split_range(
            req.start_key, req.end_key, req.rows_per_split or 100_000, req.max_splits
        )
        return pb.SplitRangeResponse(boundaries=b, approx_rows=n)

    def ChangeBoundary(
        self, req: pb.ChangeBoundaryRequest, ctx: grpc.ServicerContext
    ) -> pb.ChangeBoundaryResponse:
        ts, n = self.store.change_boundary(req.table, req.from_ts, req.to_ts, req.max_changes)
        return pb.ChangeBoundaryResponse(ts=ts, changes=n)

    def CreateTable(self, req: pb.CreateTableRequest, ctx: grpc.ServicerContext) -> pb.TableInfo:
        info = self.store.create_table(
            req.name,
            req.schema,
            list(req.primary_key),
            req.kind or "root",
            req.if_not_exists,
            req.hidden_row_id,
        )
        return wire.table_to_pb(info)

    def DropTable(
        self, req: pb.DropTableRequest, ctx: grpc.ServicerContext
    ) -> pb.DropTableResponse:
        r = self.store.drop_table(req.name, req.if_exists, req.cascade)
        return pb.DropTableResponse(
            dropped=r.dropped,
            also_dropped=list(r.also_dropped),
            unregistered_jobs=list(r.unregistered_jobs),
        )

    def DescribeTable(
        self, req: pb.DescribeTableRequest, ctx: grpc.ServicerContext
    ) -> pb.TableInfo:
        return wire.table_to_pb(self.store.describe_table(req.name))

    def ListTables(
        self, req: pb.ListTablesRequest, ctx: grpc.ServicerContext
    ) -> pb.ListTablesResponse:
        return pb.ListTablesResponse(tables=[wire.table_to_pb(t) for t in self.store.list_tables()])
