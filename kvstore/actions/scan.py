"""scan: a range read at a timestamp."""

from __future__ import annotations

import struct

from kvstore.errors import KeyIsLocked
from kvstore.mvcc.records import WRITE_VALUE_OFFSET, Lock, LockOp
from kvstore.storage import Reader

_TS = struct.Struct(">Q")
_MASK = (1 << 64) - 1


def first_blocking_lock(reader: Reader, start: bytes, end: bytes | None,
                        read_ts: int) -> KeyIsLocked | None:
    """The first Put/Delete lock in [start, end) with start_ts <= read_ts, as an error to raise."""
    for key, raw in reader.iter_range("lock", start, end):
        lock = Lock.parse(raw)
        if lock.start_ts <= read_ts and lock.op is not LockOp.LOCK:
            return KeyIsLocked(key, lock.primary, lock.start_ts, lock.ttl_ms, 0, lock.txn_size)
    return None


def scan(reader: Reader, start: bytes, end: bytes | None, read_ts: int,
         limit: int = 0) -> tuple[list[bytes], list[bytes]]:
    """The (user key, value) pairs in [start, end) as of ``read_ts``, in key order.

    Invariant: the same rules as ``get`` for every key (newest Put/Delete at or below read_ts
    decides; no lock is read through: raises KeyIsLocked for the first lock with start_ts <=
    read_ts in the range). ``limit`` > 0 stops after that many pairs."""
    blocking = first_blocking_lock(reader, start, end, read_ts)
    if blocking is not None:
        raise blocking
    keys: list[bytes] = []
    values: list[bytes] = []
    done = b""  # the user key already decided
    unpack = _TS.unpack_from
    cur = reader.txn.cursor(db=reader.cf["write"])
    if not cur.set_range(start):
        return keys, values
    for k, v in cur.iternext():
        if end is not None and k >= end:
            break
        uk = k[:-8]
        if uk == done:
            continue
        if unpack(k, len(k) - 8)[0] ^ _MASK > read_ts:
            continue
        kind = v[0]
        if kind == 0x50:  # Put
            done = uk
            keys.append(uk)
            if len(v) > WRITE_VALUE_OFFSET - 1:
                values.append(v[WRITE_VALUE_OFFSET:])
            else:
                values.append(reader.get_data(uk, unpack(v, 1)[0]))
            if limit and len(keys) >= limit:
                break
        elif kind == 0x44:  # Delete
            done = uk
        # Rollback / Lock records change nothing: look at the next older version.
    return keys, values
