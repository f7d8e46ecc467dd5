"""Row validation for writes: every row fits its table's schema and agrees with its key.

Used by the server for every prewrite, and by direct writers (kvstore.direct) before they touch
the environment, so both refuse exactly the same rows with the same message.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvstore.errors import InvalidArgument, SchemaMismatch
from kvstore.mvcc.keys import MAX_USER_KEY_BYTES, table_id_of, table_prefix
from kvstore.table_info import TableInfo

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
