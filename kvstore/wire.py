"""Conversions between the store's Python values and the snapview.v1 protobuf messages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import cast

from kvstore.errors import (
    InvalidArgument,
    KeyIsLocked,
    TxnAlreadyCommitted,
    TxnError,
    TxnLockNotFound,
    TxnRolledBack,
    WriteConflict,
)
from kvstore.mvcc.records import Lock, LockOp, Mutation
from kvstore.results import COMMITTED, LOCKED, ROLLED_BACK, ChangeRecord, TxnStatusResult
from kvstore.table_info import TableInfo
from snapview_proto.snapview.v1 import kvstore_pb2 as pb

_OP_TO_PB = {
    LockOp.PUT: pb.Mutation.PUT,
    LockOp.DELETE: pb.Mutation.DELETE,
    LockOp.LOCK: pb.Mutation.LOCK,
}
_OP_FROM_PB = {v: k for k, v in _OP_TO_PB.items()}
_STATUS_TO_PB = {
    LOCKED: pb.TXN_LOCKED,
    COMMITTED: pb.TXN_COMMITTED,
    ROLLED_BACK: pb.TXN_ROLLED_BACK,
}
_STATUS_FROM_PB = {v: k for k, v in _STATUS_TO_PB.items()}


def mutations_from_pb(ms: Iterable[pb.Mutation]) -> list[Mutation]:
    """The mutations of a request. An op the store does not know is passed on as its int (typed
    as the LockOp it is not): LocalStore.validate_mutations refuses it by name before anything
    else reads it."""
    out: list[Mutation] = []
    for m in ms:
        op = _OP_FROM_PB.get(m.op)
        out.append((op if op is not None else cast(LockOp, m.op), m.key, m.value))
    return out


_OP_BYTE = {
    LockOp.PUT: pb.Mutation.PUT,
    LockOp.DELETE: pb.Mutation.DELETE,
    LockOp.LOCK: pb.Mutation.LOCK,
}
_OP_OF_BYTE: list[LockOp | None] = [None] * 256
for _op, _b in _OP_BYTE.items():
    _OP_OF_BYTE[_b] = _op


def pack_mutations(mutations: Sequence[Mutation]) -> pb.MutationBatch:
    keys = [k for _, k, _ in mutations]
    values = [v for _, _, v in mutations]
    return pb.MutationBatch(
        ops=bytes([_OP_BYTE[op] for op, _, _ in mutations]),
        keys=b"".join(keys),
        key_sizes=list(map(len, keys)),
        values=b"".join(values),
        value_sizes=list(map(len, values)),
    )


def _split(blob: bytes, sizes: Sequence[int]) -> list[bytes]:
    ends = list(accumulate(sizes))
    if (ends[-1] if ends else 0) != len(blob):
        raise InvalidArgument("packed mutations: sizes do not add up to the bytes sent")
    if not ends:
        return []  # an empty batch: the caller refuses a request with nothing in it
    return [blob[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def unpack_mutations(batch: pb.MutationBatch) -> list[Mutation]:
    """The mutations of a MutationBatch; an unknown op byte is kept as an int, typed as a LockOp
    like in ``mutations_from_pb`` (validation then refuses it by name)."""
    n = len(batch.ops)
    if len(batch.key_sizes) != n or len(batch.value_sizes) != n:
        raise InvalidArgument(
            f"packed mutations: {n} ops but {len(batch.key_sizes)} key sizes "
            f"and {len(batch.value_sizes)} value sizes"
        )
    keys = _split(batch.keys, batch.key_sizes)
    values = _split(batch.values, batch.value_sizes)
    ops = [_OP_OF_BYTE[b] or b for b in batch.ops]
    return cast(list[Mutation], list(zip(ops, keys, values, strict=True)))


def key_error_to_pb(e: TxnError) -> pb.KeyError:
    if isinstance(e, KeyIsLocked):
        return pb.KeyError(
            locked=pb.LockInfo(
                key=e.key,
                primary=e.primary,
                start_ts=e.start_ts,
                ttl_ms=e.ttl_ms,
                txn_size=e.txn_size,
                keys=e.keys,
            )
        )
    if isinstance(e, WriteConflict):
        return pb.KeyError(
            conflict=pb.WriteConflict(
                key=e.key,
                primary=e.primary,
                start_ts=e.start_ts,
                conflict_start_ts=e.conflict_start_ts,
                conflict_commit_ts=e.conflict_commit_ts,
            )
        )
    if isinstance(e, TxnLockNotFound):
        return pb.KeyError(lock_not_found=pb.TxnLockNotFound(key=e.key, start_ts=e.start_ts))
    if isinstance(e, TxnRolledBack):
        return pb.KeyError(rolled_back=pb.TxnRolledBack(key=e.key, start_ts=e.start_ts))
    if isinstance(e, TxnAlreadyCommitted):
        return pb.KeyError(
            already_committed=pb.TxnAlreadyCommitted(
                key=e.key, start_ts=e.start_ts, commit_ts=e.commit_ts
            )
        )
    raise TypeError(f"no wire form for {type(e).__name__}")


def key_error_from_pb(ke: pb.KeyError) -> TxnError | None:
    kind = ke.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "locked":
        lk = ke.locked
        return KeyIsLocked(lk.key, lk.primary, lk.start_ts, lk.ttl_ms, 0, lk.txn_size, lk.keys)
    if kind == "conflict":
        wc = ke.conflict
        return WriteConflict(
            wc.key, wc.primary, wc.start_ts, wc.conflict_start_ts, wc.conflict_commit_ts
        )
    if kind == "lock_not_found":
        return TxnLockNotFound(ke.lock_not_found.key, ke.lock_not_found.start_ts)
    if kind == "rolled_back":
        return TxnRolledBack(ke.rolled_back.key, ke.rolled_back.start_ts)
    ac = ke.already_committed
    return TxnAlreadyCommitted(ac.key, ac.start_ts, ac.commit_ts)


def raise_key_error(ke: pb.KeyError) -> None:
    err = key_error_from_pb(ke)
    if err is not None:
        raise err


def lock_to_pb(key: bytes, lock: Lock) -> pb.LockInfo:
    return pb.LockInfo(
        key=key,
        primary=lock.primary,
        start_ts=lock.start_ts,
        ttl_ms=lock.ttl_ms,
        op=_OP_TO_PB[lock.op],
        txn_size=lock.txn_size,
    )


def status_to_pb(primary: bytes, r: TxnStatusResult) -> pb.CheckTxnStatusResponse:
    resp = pb.CheckTxnStatusResponse(status=_STATUS_TO_PB[r.status], commit_ts=r.commit_ts)
    if r.lock is not None:
        resp.lock.CopyFrom(lock_to_pb(primary, r.lock))
    return resp


def status_from_pb(resp: pb.CheckTxnStatusResponse) -> TxnStatusResult:
    lock = None
    if resp.HasField("lock"):
        x = resp.lock
        lock = Lock(_OP_FROM_PB[x.op], x.primary, x.start_ts, x.ttl_ms, x.txn_size)
    return TxnStatusResult(_STATUS_FROM_PB[resp.status], resp.commit_ts, lock)


def table_to_pb(t: TableInfo) -> pb.TableInfo:
    return pb.TableInfo(
        name=t.name,
        id=t.id,
        schema=t.schema,
        primary_key=list(t.primary_key),
        kind=t.kind,
        hidden_row_id=t.hidden_row_id,
        created_ts=t.created_ts,
        recreated=t.recreated,
    )


def table_from_pb(t: pb.TableInfo) -> TableInfo:
    return TableInfo(
        t.name,
        t.id,
        t.schema,
        tuple(t.primary_key),
        t.kind,
        t.hidden_row_id,
        t.created_ts,
        t.recreated,
    )


def change_to_pb(c: ChangeRecord) -> pb.Change:
    return pb.Change(
        key=c.key,
        has_old=c.old is not None,
        old_value=c.old or b"",
        has_new=c.new is not None,
        new_value=c.new or b"",
        commit_ts=c.commit_ts,
    )


def change_from_pb(c: pb.Change) -> ChangeRecord:
    return ChangeRecord(
        c.key, c.old_value if c.has_old else None, c.new_value if c.has_new else None, c.commit_ts
    )
