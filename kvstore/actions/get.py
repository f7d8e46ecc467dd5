"""get: a point read at a timestamp."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from zlib import crc32

from kvstore.errors import KeyIsLocked
from kvstore.limits import RESOLVE_STEP
from kvstore.mvcc.keys import TS_MASK
from kvstore.mvcc.records import CRC_BYTES, WRITE_VALUE_OFFSET, WRITE_WITH_VALUE, LockOp, WriteKind
from kvstore.storage import Reader

_PUT, _DELETE = WriteKind.PUT.value[0], WriteKind.DELETE.value[0]  # a raw record's kind byte
_LOCK_OP = LockOp.LOCK.value  # a raw lock's first byte for a Lock-kind lock (blocks no read)
_U64 = struct.Struct(">Q")  # a start_ts in a record, a version key's ~commit_ts suffix


def get(reader: Reader, key: bytes, read_ts: int) -> bytes | None:
    """The value of ``key`` as of ``read_ts``: the newest Put at or below read_ts, or None if the
    newest Put/Delete at or below it is a Delete or there is none.

    Invariant: never reads through a lock. A Put/Delete lock with start_ts <= read_ts may commit
    below read_ts, so it raises KeyIsLocked and the caller resolves it through its primary.
    Rollback and Lock records are skipped."""
    return get_versioned(reader, key, read_ts)[0]


def check_lock(reader: Reader, key: bytes, read_ts: int) -> None:
    """Raise KeyIsLocked if a Put/Delete lock with start_ts <= read_ts holds ``key``: its txn
    may commit at or below read_ts, so no point read of ``key`` there may read past it."""
    lock = reader.get_lock(key)
    if lock is not None and lock.start_ts <= read_ts and lock.op is not LockOp.LOCK:
        raise KeyIsLocked(key, lock.primary, lock.start_ts, lock.ttl_ms, 0, lock.txn_size)


def lock_in_way(
    reader: Reader, locks: Iterable[tuple[bytes, bytes]], read_ts: int, most: int = RESOLVE_STEP
) -> KeyIsLocked | None:
    """The first of ``locks`` ((key, raw lock) pairs, in the order the read meets them) that
    blocks a read at ``read_ts`` (a Put/Delete lock with start_ts <= read_ts), as the error to
    raise, or None. Its ``keys`` are every key of ``locks`` that the same transaction's blocking
    locks hold, up to ``most`` of them (at most RESOLVE_STEP; and no more than 4 * ``most``
    locks are looked at past the first): the reader resolves the keys in its way in one
    write, never one retry per key, and never the whole transaction (a view's first build holds
    millions of locks while its owner resolves them in the background)."""
    first: KeyIsLocked | None = None
    ts_be = b""
    keys: list[bytes] = []
    most = max(1, min(most, RESOLVE_STEP))
    # Past the first, at most this many locks are looked at (other transactions' among them),
    # so a retry never walks a whole table's locks.
    room = 4 * most
    for key, raw in locks:
        if first is None:
            lock = reader.parse_lock(key, raw)
            if lock.start_ts <= read_ts and lock.op is not LockOp.LOCK:
                first = KeyIsLocked(key, lock.primary, lock.start_ts, lock.ttl_ms, 0, lock.txn_size)
                ts_be = raw[1:9]  # a lock's start_ts, as resolve_locks reads it
                keys.append(key)
            else:
                continue
        elif raw[1:9] == ts_be and raw[:1] != _LOCK_OP:
            keys.append(key)
        room -= 1
        if len(keys) >= most or room < 0:
            break
    if first is not None:
        first.keys = tuple(keys)
    return first


def decisive_record(reader: Reader, key: bytes, read_ts: int) -> bytes | None:
    """The raw (checked) write record of the newest Put or Delete of ``key`` at or below
    read_ts, or None; Rollback and Lock records are skipped. The lock is the caller's
    (``check_lock``)."""
    for _, raw in reader.iter_write_records(key, read_ts):
        if raw[0] == _PUT or raw[0] == _DELETE:
            return raw
    return None


def get_versioned(reader: Reader, key: bytes, read_ts: int) -> tuple[bytes | None, int]:
    """``get``'s answer and the commit_ts of the Put/Delete that decided it (0: none)."""
    check_lock(reader, key, read_ts)
    for commit_ts, w in reader.iter_writes(key, read_ts):
        if w.kind is WriteKind.PUT:
            value = w.short_value if w.short_value is not None else reader.get_data(key, w.start_ts)
            return value, commit_ts
        if w.kind is WriteKind.DELETE:
            return None, commit_ts
    return None, 0


_STEPS_BEFORE_SEEK = 8  # versions walked past before the old image is sought directly


def get_change(
    reader: Reader, key: bytes, from_ts: int, to_ts: int
) -> tuple[bytes | None, bytes | None, int]:
    """(``get(key, from_ts)``, ``get(key, to_ts)``, the commit_ts of the Put/Delete that decided
    the second; 0: none): ``get_changes`` of the one key. Same answers and the same KeyIsLocked
    as the two gets: ``from_ts`` < ``to_ts``, so a lock that blocks the first blocks the second,
    which is checked."""
    _, old, new, commit_ts = next(get_changes(reader, [key], from_ts, to_ts))
    return old, new, commit_ts


def get_changes(
    reader: Reader, keys: list[bytes], from_ts: int, to_ts: int
) -> Iterator[tuple[bytes, bytes | None, bytes | None, int]]:
    """(key, old, new, commit_ts) of each of ``keys`` in order: ``get(key, from_ts)``,
    ``get(key, to_ts)`` and the commit_ts of the Put/Delete that decided the second (0: none).

    Every key's lock is checked first, in one C-level lookup (a lock is rare): the first key in
    the order given held by a lock with start_ts <= to_ts raises KeyIsLocked, as ``get`` would
    (naming the keys of ``keys`` its transaction holds: ``lock_in_way``).
    Then one loop over one cursor: the versions are stored newest first, so the write deciding
    ``from_ts`` is found by walking on from the one deciding ``to_ts`` (a key rewritten many
    times in between is sought directly instead). Records are read raw (kind byte, inline
    value; each checked intact, DataLoss if not), not parsed."""
    blocking = lock_in_way(reader, reader.locked_of(keys), to_ts)
    if blocking is not None:
        raise blocking
    cur = reader.write_cursor()
    seek, at_key, at_value, step_on = cur.set_range, cur.key, cur.value, cur.next
    to_suffix = _U64.pack(to_ts ^ TS_MASK)
    for key in keys:
        width = len(key) + 8
        new_w: bytes | None = None
        old_w: bytes | None = None
        new_ts = steps = 0
        found = seek(key + to_suffix)
        while found:
            k = at_key()
            if len(k) != width or k[:-8] != key:
                break
            raw = at_value()
            if crc32(raw):
                raise reader.damaged("write", k, "write record fails its checksum")
            kind = raw[0]
            if kind == _PUT or kind == _DELETE:  # a Rollback or Lock record changes nothing
                commit_ts = _U64.unpack_from(k, width - 8)[0] ^ TS_MASK
                if new_w is None:
                    new_w, new_ts = raw, commit_ts
                if commit_ts <= from_ts:
                    old_w = raw
                    break
                if raw is not new_w:
                    steps += 1
                    if steps >= _STEPS_BEFORE_SEEK:
                        old_w = decisive_record(reader, key, from_ts)
                        break
            found = step_on()
        if new_w is None:
            yield key, None, None, 0
            continue
        new = _value(reader, key, new_w)
        yield key, (new if old_w is new_w else _value(reader, key, old_w)), new, new_ts


def _value(reader: Reader, key: bytes, raw: bytes | None) -> bytes | None:
    """A Put record's value (inline, or from the data CF as ``get`` reads it); None else."""
    if raw is None or raw[0] != _PUT:
        return None
    if len(raw) >= WRITE_WITH_VALUE:
        return raw[WRITE_VALUE_OFFSET:-CRC_BYTES]
    return reader.get_data(key, _U64.unpack_from(raw, 1)[0])
