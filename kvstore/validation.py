"""Request checks: what the store refuses before it acts, naming the table, key or field.

A request's timestamps (``check_ts``, and ``check_issued`` against what the TSO has issued), its
keys (``check_keys``; ``table_of_key``: a key names an existing user table), its ranges
(``check_key_ranges``, ``check_range_count``) and its mutations (``validate_mutations``: ops,
keys, value sizes, no key twice, and the rows themselves, ``validate_rows``: every row fits its
table's schema and agrees with its key).

The store (``kvstore.store``) checks every command with these; direct writers (kvstore.direct)
check rows with ``validate_rows`` before they touch the environment, so both refuse exactly the
same rows with the same message. The module loads no engine (the catalog is a parameter): a
remote client checks its ranges with it (``kvstore.remote``).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from kvstore.errors import InvalidArgument, RequestTooLarge, SchemaMismatch, ValueTooLarge
from kvstore.limits import MAX_SCAN_RANGES
from kvstore.mvcc.keys import (
    MAX_USER_KEY_BYTES,
    SYSTEM_TABLE_ID,
    TS_MASK,
    table_id_of,
    table_prefix,
)
from kvstore.mvcc.records import LockOp, Mutation
from kvstore.table_info import TableInfo

if TYPE_CHECKING:
    from kvstore.catalog import Catalog
    from kvstore.clock import TsoClock

# A range bound may extend a user key (key + b"\0" ends the range of that key alone), within
# what LMDB takes as a key (511 bytes).
MAX_RANGE_BOUND_BYTES = MAX_USER_KEY_BYTES + 16


def check_key(info: TableInfo, key: bytes) -> None:
    """Raise SchemaMismatch (naming table and key) if ``key`` is not a key of ``info``."""
    try:
        info.key_codec.decode(key)
    except Exception as e:  # noqa: BLE001 - any decode failure means a malformed key
        raise SchemaMismatch(f"table {info.name!r}: malformed key {key.hex()} ({e})") from None


def describe_key(info: TableInfo, key: bytes) -> str:
    """``table 'name' key (values...)``: how error messages name a row's key."""
    return f"table {info.name!r} key {info.key_codec.decode(key)}"


def check_key_ranges(ranges: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The [start, end) user-key ranges of one keyed multi-range read, checked and with every
    empty end filled in as the end of the start's table (as Scan reads it). Every start names a
    table (at least 4 bytes), every end is above its start, and all ranges lie in one table (an
    end may be the next table's prefix). Raises InvalidArgument naming the range at fault."""
    out: list[tuple[bytes, bytes]] = []
    prefix = b""
    table_end = b""
    for i, (start, end) in enumerate(ranges):
        if len(start) < 4 or len(start) > MAX_RANGE_BOUND_BYTES or len(end) > MAX_RANGE_BOUND_BYTES:
            raise InvalidArgument(
                f"range {i} [{start[:32].hex()}, {end[:32].hex()}): a start must name a table "
                f"(4 bytes at least) and bounds may have at most {MAX_RANGE_BOUND_BYTES} bytes"
            )
        if not prefix:
            prefix = start[:4]
            tid = table_id_of(prefix)
            table_end = table_prefix(tid + 1) if tid < 0xFFFF_FFFF else b"\xff" * 5
        elif start[:4] != prefix:
            raise InvalidArgument(
                f"range {i} starts in table id {table_id_of(start)} but range 0 in table id "
                f"{table_id_of(prefix)}: all ranges of one request must lie in one table"
            )
        if not end:
            end = table_end
        elif end <= start:
            raise InvalidArgument(
                f"range {i} [{start.hex()}, {end.hex()}) is empty or reversed: need start < end"
            )
        elif end > table_end:
            raise InvalidArgument(
                f"range {i} [{start.hex()}, {end.hex()}) ends past table id "
                f"{table_id_of(prefix)}: all ranges of one request must lie in one table"
            )
        out.append((start, end))
    return out


def repeated_key(keys: list[bytes]) -> bytes | None:
    """The first key of ``keys`` that repeats an earlier one, or None (one C-level set build
    when there is none)."""
    if len(set(keys)) == len(keys):
        return None
    seen: set[bytes] = set()
    for k in keys:
        if k in seen:
            return k
        seen.add(k)
    raise AssertionError("unreachable: the set of keys is smaller than the list")


def row_key(info: TableInfo, value: bytes) -> bytes:
    """The key the primary-key columns of an encoded row spell."""
    vals = info.row_codec.decode_stored(value)
    idx = info.table_schema.index
    return info.key_codec.encode_values(tuple(vals[idx[k]] for k in info.table_schema.primary_key))


def validate_rows(info: TableInfo, keys: list[bytes], values: list[bytes]) -> None:
    """Refuse the batch if any row is malformed or disagrees with its key.

    Checked in bulk (numpy/Arrow); the first failing row is then checked alone to word the error
    with table, key and column."""
    codec = info.row_codec
    bad = codec.first_invalid(values)
    if bad is None:
        expected = codec.key_bytes(values, info.prefix)
        if expected is None:  # a variable-length key: compare row by row
            bad = next(
                (
                    i
                    for i, (k, v) in enumerate(zip(keys, values, strict=True))
                    if row_key(info, v) != k
                ),
                None,
            )
        else:
            width = expected.shape[1]
            lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
            if bool((lens != width).any()):
                bad = int(np.flatnonzero(lens != width)[0])
            else:
                actual = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(-1, width)
                diff = (actual != expected).any(axis=1)
                bad = int(np.flatnonzero(diff)[0]) if diff.any() else None
    if bad is None:
        return
    key, value = keys[bad], values[bad]
    check_key(info, key)
    codec.validate(value, f" key {key.hex()}")
    if row_key(info, value) != key:
        raise SchemaMismatch(
            f"table {info.name!r} key {key.hex()}: the row's primary key "
            "columns do not match its key"
        )
    raise AssertionError(f"row {bad} failed a bulk check but passes alone")  # a codec bug


def check_range_count(n: int) -> None:
    """Refuse a keyed multi-range read of more ranges than kvstore.limits allows."""
    if n > MAX_SCAN_RANGES:
        raise RequestTooLarge(
            f"ScanRanges: {n} ranges in one request; the limit is {MAX_SCAN_RANGES} "
            "(split the request)"
        )


def check_ts(**named: int) -> None:
    """Refuse a timestamp that is not a positive 64-bit integer, naming it."""
    for name, ts in named.items():
        if not isinstance(ts, int) or not 0 < ts < TS_MASK:
            raise InvalidArgument(f"{name} must be a positive 64-bit timestamp, got {ts!r}")


def check_issued(tso: TsoClock | None, /, **named: int) -> None:
    """Refuse a timestamp the TSO has not issued yet: a far-future commit_ts would hide a row
    and conflict every later writer of its key; a far-future safepoint would stop every
    writer for good. Without a TSO (``tso`` None) only ``check_ts`` applies."""
    check_ts(**named)
    if tso is None:
        return
    bound = tso.issued()
    for name, ts in named.items():
        if ts > bound:
            raise InvalidArgument(
                f"{name} {ts} is above every timestamp the TSO has issued ({bound}); "
                "timestamps must come from the TSO"
            )


def check_keys(what: str, keys: list[bytes]) -> None:
    """Keys that reach LMDB must be 1..MAX_USER_KEY_BYTES long (LMDB's own limit is 511)."""
    for k in keys:
        if not 0 < len(k) <= MAX_USER_KEY_BYTES:
            raise InvalidArgument(
                f"{what} {k[:32].hex()!r} has {len(k)} bytes; keys must "
                f"have 1 to {MAX_USER_KEY_BYTES}"
            )


def table_of_key(catalog: Catalog, key: bytes, internal: bool) -> TableInfo | None:
    """The table of user key ``key`` in ``catalog``; None for a key of the system table, which
    only ``internal`` (the server's own) calls may name. TableNotFound names a dropped table."""
    if len(key) < 5:
        raise InvalidArgument(f"key {key.hex()!r} is too short to name a table")
    if len(key) > MAX_USER_KEY_BYTES:
        raise InvalidArgument(
            f"key {key[:32].hex()}... of {len(key)} bytes exceeds the limit "
            f"of {MAX_USER_KEY_BYTES} bytes"
        )
    tid = table_id_of(key)
    if tid == SYSTEM_TABLE_ID:
        if internal:
            return None
        raise InvalidArgument(f"key {key.hex()} is in snapview's reserved system table")
    return catalog.get_id(tid)  # TableNotFound names a dropped table


def validate_mutations(
    catalog: Catalog, mutations: list[Mutation], max_value_bytes: int, internal: bool = False
) -> None:
    """Refuse the whole request if any mutation is malformed: unknown table, a key that does
    not decode, a row that does not fit the schema or whose key columns disagree with its key,
    a value over ``max_value_bytes``, a repeated key.

    Rows are checked per table in bulk (numpy/Arrow); a failing row is then checked alone to
    word the error."""
    if not internal and _validate_bulk_puts(catalog, mutations, max_value_bytes):
        return
    puts: dict[int, tuple[list[bytes], list[bytes]]] = {}
    keys = []
    for op, key, value in mutations:
        if not isinstance(op, LockOp):
            raise InvalidArgument(f"mutation on key {key.hex()}: unknown op {op!r}")
        info = table_of_key(catalog, key, internal)
        keys.append(key)
        if op is LockOp.PUT:
            if len(value) > max_value_bytes:
                where = f"table {info.name!r} " if info else ""
                raise ValueTooLarge(
                    f"{where}key {key.hex()}: value of {len(value)} bytes "
                    f"exceeds the limit of {max_value_bytes} bytes"
                )
            if info is not None:
                ks, vs = puts.setdefault(info.id, ([], []))
                ks.append(key)
                vs.append(value)
        else:
            if value:
                raise InvalidArgument(f"key {key.hex()}: a {op.name} mutation carries no value")
            if info is not None:
                check_key(info, key)
    dup = repeated_key(keys)
    if dup is not None:
        raise InvalidArgument(f"key {dup.hex()} appears twice in one request")
    for tid, (ks, vs) in puts.items():
        validate_rows(catalog.get_id(tid), ks, vs)


def _validate_bulk_puts(catalog: Catalog, mutations: list[Mutation], max_value_bytes: int) -> bool:
    """The common bulk shape, checked without a Python step per mutation: all PUTs into one
    user table, keys and values within limits, no key twice. Returns False (nothing
    decided) for any other shape; the general path then checks and words errors."""
    ops = set(map(itemgetter(0), mutations))
    if ops != {LockOp.PUT}:
        return False
    keys = list(map(itemgetter(1), mutations))
    klens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    if (klens < 5).any():  # too short to name a table: the general path words the error
        return False
    prefixes = {k[:4] for k in keys}
    if len(prefixes) != 1:
        return False
    tid = table_id_of(prefixes.pop() + b"\0")
    info = catalog.by_id.get(tid)
    if info is None:
        return False
    values = list(map(itemgetter(2), mutations))
    vlens = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    if (
        (klens > MAX_USER_KEY_BYTES).any()
        or (vlens > max_value_bytes).any()
        or len(set(keys)) != len(keys)
    ):
        return False
    validate_rows(info, keys, values)
    return True
