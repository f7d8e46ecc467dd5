"""one-phase commit: prewrite and commit in one store call, when one call holds every mutation."""

from __future__ import annotations

from kvstore.actions.prewrite import check_prewrite, stage_value
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import changes_key, versioned_key
from kvstore.mvcc.records import LockOp, Mutation, Write, WriteKind

_KIND = {LockOp.PUT: WriteKind.PUT, LockOp.DELETE: WriteKind.DELETE, LockOp.LOCK: WriteKind.LOCK}


def one_pc_commit(
    ctx: WriteContext, mutations: list[Mutation], primary: bytes, start_ts: int, commit_ts: int
) -> None:
    """Write every mutation directly as committed at ``commit_ts``, all or none.

    Invariant: the same conflict rules as prewrite (no lock of another txn, no write with
    commit_ts >= start_ts), and no lock is ever left behind. The caller must make ``commit_ts``
    invisible to readers until this action's group is durable (LocalStore's in-flight set)."""
    reader, buf = ctx.reader, ctx.buf
    for op, key, value in mutations:
        if not check_prewrite(reader, key, primary, start_ts):
            continue
        short = stage_value(buf, op, key, value, start_ts)
        buf.put(
            "write", versioned_key(key, commit_ts), Write(_KIND[op], start_ts, short).to_bytes()
        )
        if op is not LockOp.LOCK:
            buf.put("changes", changes_key(key, commit_ts), b"")
