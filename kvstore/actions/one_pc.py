"""one-phase commit: prewrite and commit in one store call, when one call holds every mutation."""

from __future__ import annotations

import struct

from kvstore.actions.fence import check_fences, check_not_dropped
from kvstore.actions.prewrite import check_prewrite, stage_value
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import encode_ts
from kvstore.mvcc.records import SEAL_XOR, VALUE_TAG, LockOp, Mutation, crc32, pack_crc

_U64 = struct.Struct(">Q")


def one_pc_commit(
    ctx: WriteContext,
    mutations: list[Mutation],
    primary: bytes,
    start_ts: int,
    commit_ts: int,
    revision: int = 0,
) -> None:
    """Write every mutation directly as committed at ``commit_ts``, all or none.

    Invariant: the same conflict rules as prewrite (no lock of another txn, no write with
    commit_ts >= start_ts), and no lock is ever left behind. The caller must make ``commit_ts``
    invisible to readers until this action's group is durable (LocalStore's in-flight set).
    A table fenced by a revision other than ``revision`` is refused (TableFenced), a dropped
    one for good (TableNotFound)."""
    reader, buf = ctx.reader, ctx.buf
    check_fences(reader, mutations, revision)
    check_not_dropped(reader, mutations)
    # Records are built from bytes here, not through Write objects: this loop runs once per row
    # of every small transaction. Write kinds share the lock ops' one-byte flags (P/D/L).
    ts_be = _U64.pack(start_ts)
    suffix = encode_ts(commit_ts)
    commit_be = _U64.pack(commit_ts)
    tag, seal_xor = VALUE_TAG, SEAL_XOR
    for op, key, value in mutations:
        if not check_prewrite(reader, key, primary, start_ts):
            continue
        short = stage_value(buf, op, key, value, start_ts)
        body = op.value + ts_be if short is None else op.value + ts_be + tag + short
        buf.put("write", key + suffix, body + pack_crc(crc32(body) ^ seal_xor))
        if op is not LockOp.LOCK:
            buf.put("changes", key[:4] + commit_be + key, b"")
