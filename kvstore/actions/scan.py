"""scan: a range read at a timestamp."""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Sequence
from itertools import islice
from operator import itemgetter

import numpy as np

from kvstore.actions.get import check_lock, decisive_record, lock_in_way
from kvstore.errors import KeyIsLocked
from kvstore.limits import RESOLVE_STEP
from kvstore.mvcc.keys import versioned_key
from kvstore.mvcc.records import (
    CRC_BYTES,
    WRITE_VALUE_OFFSET,
    WRITE_WITH_VALUE,
    crc32,
)
from kvstore.storage import Reader

_TS = struct.Struct(">Q")
_MASK = (1 << 64) - 1


def first_blocking_lock(
    reader: Reader, start: bytes, end: bytes | None, read_ts: int, most: int = 0
) -> KeyIsLocked | None:
    """The first Put/Delete lock in [start, end) with start_ts <= read_ts, as an error to raise
    (naming up to ``most`` (0: RESOLVE_STEP) keys its transaction holds from it on in the range:
    ``lock_in_way``)."""
    return lock_in_way(reader, reader.iter_range("lock", start, end), read_ts, most or RESOLVE_STEP)


def scan(
    reader: Reader,
    start: bytes,
    end: bytes | None,
    read_ts: int,
    limit: int = 0,
    *,
    first_run: int = 0,
) -> tuple[list[bytes], list[bytes]]:
    """The (user key, value) pairs in [start, end) as of ``read_ts``, in key order.

    Invariant: the same rules as ``get`` for every key (newest Put/Delete at or below read_ts
    decides; no lock is read through: raises KeyIsLocked for the first lock with start_ts <=
    read_ts in the part of the range the answer covers). ``limit`` > 0 stops after that many
    pairs. ``first_run`` > 0 reads the write records in runs starting at that many, doubling (a
    short range, such as one key's versions, then does not pull a whole run of the records past
    its end).

    The locks are checked after the records are read, and only up to the last pair returned when
    ``limit`` cut the answer short: a lock above it is in the way of the next chunk, not this
    one. (Checked over the whole range first, a chunk of a table whose last load still held
    millions of locks waited for all of them to be resolved.)"""
    keys, values = _visible(reader, start, end, read_ts, limit, first_run)
    bound = past_versions(keys[-1]) if limit and len(keys) >= limit else end
    # No more keys in the way than the chunk may return: a chunk of a freshly loaded range
    # (locks on keys with no version yet) resolves about its own rows, not the range's.
    blocking = first_blocking_lock(reader, start, bound, read_ts, limit)
    if blocking is not None:
        raise blocking
    return keys, values


def _visible(
    reader: Reader, start: bytes, end: bytes | None, read_ts: int, limit: int, first_run: int
) -> tuple[list[bytes], list[bytes]]:
    """``scan``'s answer from the write records alone (its locks unchecked)."""
    keys: list[bytes] = []
    values: list[bytes] = []
    it = reader.items_from("write", start)
    decided = b""  # the last user key whose visible version is settled
    run = min(first_run, _CHUNK) or _CHUNK
    while not limit or len(keys) < limit:
        chunk = list(islice(it, run))
        run = min(run * 2, _CHUNK)
        if not chunk:
            break
        # (zip(*chunk) would build one iterator per pair: far slower than two C-level maps.)
        ks, vs = list(map(_FIRST, chunk)), list(map(_SECOND, chunk))
        # The range is over user keys: records are cut on theirs (a versioned key is compared
        # wrongly with an end that extends its user key, such as key + b"\0" for one key alone).
        # User keys are prefix-free, so records below the end still come first.
        cut = len(ks) if end is None else bisect_left(ks, end, key=_user_key)
        if cut < len(ks):
            ks, vs = ks[:cut], vs[:cut]
        decided = _select(reader, ks, vs, read_ts, decided, keys, values)
        if cut < len(chunk):
            break
    if limit and len(keys) > limit:
        del keys[limit:], values[limit:]
    return keys, values


_CHUNK = 8192
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def _user_key(versioned: bytes) -> bytes:
    return versioned[:-8]


def past_versions(key: bytes) -> bytes:
    """A scan start past every version of user key ``key``: user keys are prefix-free, so the
    next user key differs from it inside its length and sorts above any 8-byte version suffix."""
    return key + b"\xff" * 9


_NUMPY_MIN_RUN = 64  # write records from which _select chooses with numpy
_RANGE_FIRST_RUN = 16  # write records first read per range of scan_ranges (a key's versions)


def scan_ranges(
    reader: Reader,
    ranges: Sequence[tuple[bytes, bytes]],
    read_ts: int,
    max_rows: int,
    max_bytes: int,
    first: int = 0,
    resume: bytes | None = None,
    range_limit: int = 0,
) -> tuple[list[bytes], list[bytes], int, bytes | None]:
    """The (user key, value) pairs of ``ranges[first:]`` as of ``read_ts``: each [start, end)
    range in the order given, each in key order, until ``max_rows`` pairs or ``max_bytes`` of
    values (checked after each range). ``resume`` replaces the start of ``ranges[first]`` (a
    range a previous call stopped inside). Returns the pairs and where to go on: the index of
    the first range not finished (``len(ranges)`` when all are) and the resume start inside it
    (None to read it whole). ``range_limit`` > 0 reads at most that many pairs of each range
    (its first ones) and never splits a range between calls: a range that may not fit in the
    room left is left for the next call (the caller gives ``max_rows`` >= ``range_limit``).

    Invariant: every range is read exactly as ``scan`` reads it (same visibility rules; raises
    KeyIsLocked for the first lock with start_ts <= read_ts in a range it reads)."""
    keys: list[bytes] = []
    values: list[bytes] = []
    size = 0
    i = first
    while i < len(ranges) and len(keys) < max_rows and size < max_bytes:
        start, end = ranges[i]
        if i == first and resume is not None:
            start = resume
        room = max_rows - len(keys)
        if range_limit:
            if room < range_limit and keys:
                return keys, values, i, None
            room = min(room, range_limit)
        if room and not range_limit and not (i == first and resume is not None):
            # A run of short ranges (a key prefix holding a few rows each, such as an index's
            # entries for one value) is read as one batch; a long range leaves it to scan.
            j = _short_run_end(ranges, i, _SHORT_BATCH)
            if j - i > 1:
                ks, vs, n = _shorts(reader, ranges[i:j], read_ts, room, max_bytes - size)
                if n:
                    keys += ks
                    values += vs
                    size += sum(map(len, vs))
                    i += n
                    continue
        if room and _is_point(start, end):  # one key alone: a point read, same rules
            if not range_limit:
                # A run of point ranges is read as one batch: at most ``room`` of them (each
                # gives at most one pair) and up to the bytes left.
                j = _point_run_end(ranges, i, min(room, _POINT_BATCH))
                if j - i > 1:
                    pts = [p for p, _ in ranges[i:j]]
                    ks, vs, n = _points(reader, pts, read_ts, max_bytes - size)
                    keys += ks
                    values += vs
                    size += sum(map(len, vs))
                    i += n
                    continue
            ks, vs = _point(reader, start, read_ts)
        else:
            ks, vs = scan(reader, start, end, read_ts, room, first_run=_RANGE_FIRST_RUN)
        keys += ks
        values += vs
        if len(ks) == room and not range_limit:  # the range may hold more: go on inside it
            return keys, values, i, past_versions(ks[-1])
        size += sum(map(len, vs))
        i += 1
    return keys, values, i, None


def _select(
    reader: Reader,
    ks: list[bytes],
    vs: list[bytes],
    read_ts: int,
    decided: bytes,
    keys: list[bytes],
    values: list[bytes],
) -> bytes:
    """Append the visible (key, value) of every user key in one sorted run of write records.

    With fixed-length keys (every all-numeric primary key) the choice is made with numpy over
    a run of at least _NUMPY_MIN_RUN records; otherwise one Python step per record. Returns the last decided user key."""
    n = len(ks)
    if n == 0:
        return decided
    # Every record of the run is checked, not just the chosen ones (a damaged kind byte could
    # otherwise hide a version and serve an older one): one CRC over the run joined.
    joined = b"".join(vs)
    if crc32(joined):
        i = next((i for i, v in enumerate(vs) if crc32(v)), 0)
        raise reader.damaged("write", ks[i], "write record fails its checksum")
    klen = len(ks[0])
    # (numpy's fixed cost outweighs a few Python steps: a short run, such as one key's versions
    # in scan_ranges, takes the loop.)
    if n >= _NUMPY_MIN_RUN and klen > 8:
        klens = np.fromiter(map(len, ks), dtype=np.int64, count=n)
        if bool((klens == klen).all()):
            return _select_fixed(reader, ks, vs, joined, read_ts, decided, keys, values)
    unpack = _TS.unpack_from
    for k, v in zip(ks, vs, strict=True):
        uk = k[:-8]
        if uk == decided or unpack(k, len(k) - 8)[0] ^ _MASK > read_ts:
            continue
        if v[0] == 0x50:  # Put
            decided = uk
            _emit(reader, uk, v, keys, values)
        elif v[0] == 0x44:  # Delete
            decided = uk
        # Rollback / Lock records change nothing: look at the next older version.
    return decided


def _select_fixed(
    reader: Reader,
    ks: list[bytes],
    vs: list[bytes],
    joined: bytes,
    read_ts: int,
    decided: bytes,
    keys: list[bytes],
    values: list[bytes],
) -> bytes:
    n, klen = len(ks), len(ks[0])
    arr = np.frombuffer(b"".join(ks), dtype=np.uint8).reshape(n, klen)
    ts = arr[:, -8:].copy().view(">u8").reshape(n) ^ np.uint64(_MASK)
    new_key = np.ones(n, dtype=bool)
    new_key[1:] = (arr[1:, :-8] != arr[:-1, :-8]).any(axis=1)
    vlens = np.fromiter(map(len, vs), dtype=np.int64, count=n)
    voff = np.zeros(n, dtype=np.int64)
    np.cumsum(vlens[:-1], out=voff[1:])
    kinds = np.frombuffer(joined, dtype=np.uint8)[voff]  # joined = b"".join(vs)
    candidate = (ts <= np.uint64(read_ts)) & ((kinds == 0x50) | (kinds == 0x44))
    cand_idx = np.flatnonzero(candidate)
    if cand_idx.size == 0:
        return decided
    group = np.cumsum(new_key)[cand_idx]
    first = np.ones(cand_idx.size, dtype=bool)
    first[1:] = group[1:] != group[:-1]  # groups ascend, so a change marks a group's first
    chosen = cand_idx[first]
    if ks[int(chosen[0])][:-8] == decided:
        chosen = chosen[1:]  # its visible version was taken from the previous run
        if chosen.size == 0:
            return decided
    last = ks[int(chosen[-1])][:-8]
    puts = chosen[kinds[chosen] == 0x50].tolist()
    if not puts:
        return last
    pick = itemgetter(*puts)
    sel_k, sel_v = (pick(ks), pick(vs)) if len(puts) > 1 else ((ks[puts[0]],), (vs[puts[0]],))
    keys.extend([k[:-8] for k in sel_k])
    if bool((vlens[puts] >= WRITE_WITH_VALUE).all()):
        values.extend([v[WRITE_VALUE_OFFSET:-CRC_BYTES] for v in sel_v])
    else:
        for k, v in zip(sel_k, sel_v, strict=True):
            values.append(
                v[WRITE_VALUE_OFFSET:-CRC_BYTES]
                if len(v) >= WRITE_WITH_VALUE
                else _data(reader, k[:-8], _TS.unpack_from(v, 1)[0])
            )
    return last


def _point(reader: Reader, key: bytes, read_ts: int) -> tuple[list[bytes], list[bytes]]:
    """``scan`` of the range holding ``key`` alone: its lock checked, then its versions walked
    raw (each checked intact) to the newest Put/Delete at or below read_ts; no cursor over the
    lock CF and no run of records past the key, which a scan of a short range reads."""
    check_lock(reader, key, read_ts)
    keys: list[bytes] = []
    values: list[bytes] = []
    raw = decisive_record(reader, key, read_ts)
    if raw is not None and raw[0] == 0x50:  # Put (a Delete: nothing)
        _emit(reader, key, raw, keys, values)
    return keys, values


_POINT_BATCH = 4096  # point ranges read in one batch by scan_ranges


def _is_point(start: bytes, end: bytes) -> bool:
    """Whether [start, end) holds the user key ``start`` alone: end is start + b"\\0" or
    ``past_versions(start)`` (user keys are prefix-free, so no other key lies in either)."""
    extra = len(end) - len(start)
    if extra == 1:
        return end[-1] == 0 and end.startswith(start)
    return extra == 9 and end.endswith(_PAST) and end.startswith(start)


_PAST = b"\xff" * 9


def _point_run_end(ranges: Sequence[tuple[bytes, bytes]], i: int, most: int) -> int:
    """The end of the run of point ranges (``_is_point``) starting at ``i``, at most ``most``
    long."""
    j, stop = i, min(len(ranges), i + most)
    while j < stop and _is_point(*ranges[j]):
        j += 1
    return j


def _points(
    reader: Reader, pts: list[bytes], read_ts: int, budget: int
) -> tuple[list[bytes], list[bytes], int]:
    """``_point`` of each key of ``pts`` in order, as one batch, until the values read reach
    ``budget`` bytes: (keys, values, how many of ``pts`` were read). The same answers, the same
    KeyIsLocked (the first blocking lock in the order given) and the same DataLoss as one
    ``_point`` per key, with the locks fetched in one C-level call (``getmulti``), one cursor
    seek per key into the write CF and one CRC pass over the records found. A key whose newest
    version at or below read_ts is a Rollback or Lock record is walked on as ``_point`` does."""
    blocking = lock_in_way(reader, reader.locked_of(pts), read_ts)  # parsed only where found
    if blocking is not None:
        raise blocking
    found = reader.newest_records(pts, read_ts)
    # Every record is checked before its kind byte is believed (as _select does).
    reader.check_intact("write", found)
    keys: list[bytes] = []
    values: list[bytes] = []
    size = 0
    at = 0  # index into pts
    for vk, raw in found:
        key = vk[:-8]
        while pts[at] != key:  # keys with no version at or below read_ts read nothing
            at += 1
        at += 1
        if raw[0] != 0x50 and raw[0] != 0x44:  # a Rollback or Lock record: older ones decide
            raw = decisive_record(reader, key, read_ts) or b"D"
        if raw[0] != 0x50:  # a Delete (or nothing): no pair
            continue
        _emit(reader, key, raw, keys, values)
        size += len(values[-1])
        if size >= budget:
            return keys, values, at
    return keys, values, len(pts)


_SHORT_BATCH = 1024  # short ranges read in one batch by scan_ranges
_SHORT_MOST = 64  # write records a range may hold to be read in such a batch


def _short_run_end(ranges: Sequence[tuple[bytes, bytes]], i: int, most: int) -> int:
    """The end of the run of ranges that are not point ranges starting at ``i``, at most
    ``most`` long."""
    j, stop = i, min(len(ranges), i + most)
    while j < stop and not _is_point(*ranges[j]):
        j += 1
    return j


def _shorts(
    reader: Reader, rs: Sequence[tuple[bytes, bytes]], read_ts: int, room: int, budget: int
) -> tuple[list[bytes], list[bytes], int]:
    """``scan`` of each range of ``rs`` in order, as one batch: (keys, values, how many of
    ``rs`` were read). It stops before a range that holds more than _SHORT_MOST write records
    or whose pairs would reach ``room`` pairs (``scan`` reads that one, resumably), and after
    the range whose values reach ``budget`` bytes (checked after each range, as scan_ranges
    does). The same answers, the same KeyIsLocked (the first blocking lock of the first range
    read that has one) and the same DataLoss as one ``scan`` per range; one seek per range into
    the lock CF and one into the write CF, no iterator or chunk per range."""
    found = reader.locks_in(rs)
    error = lock_in_way(reader, [(key, raw) for _, key, raw in found], read_ts)
    blocked = len(rs)
    if error is not None:
        blocked = next(at for at, key, _ in found if key == error.key)
    keys: list[bytes] = []
    values: list[bytes] = []
    size = 0
    runs = reader.short_runs(rs[:blocked], _SHORT_MOST)
    for n, run in enumerate(runs):
        if run is None:
            return keys, values, n
        ks: list[bytes] = []
        vs: list[bytes] = []
        _select(reader, run[0], run[1], read_ts, b"", ks, vs)
        if len(keys) + len(ks) >= room:
            return keys, values, n
        keys += ks
        values += vs
        size += sum(map(len, vs))
        if size >= budget:
            return keys, values, n + 1
    if error is not None:
        raise error
    return keys, values, len(runs)


def _emit(reader: Reader, uk: bytes, v: bytes, keys: list[bytes], values: list[bytes]) -> None:
    keys.append(uk)
    if len(v) >= WRITE_WITH_VALUE:
        values.append(v[WRITE_VALUE_OFFSET:-CRC_BYTES])
    else:
        values.append(_data(reader, uk, _TS.unpack_from(v, 1)[0]))


def _data(reader: Reader, key: bytes, start_ts: int) -> bytes:
    """The value a Put record keeps in the data CF (one too large to sit in the record)."""
    value = reader.get_data(key, start_ts)
    if value is None:
        raise reader.damaged(
            "data", versioned_key(key, start_ts), "a committed Put's value is gone"
        )
    return value
