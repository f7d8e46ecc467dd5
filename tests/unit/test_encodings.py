"""Golden bytes pin the on-disk encodings; property tests pin their ordering and round trips."""

from __future__ import annotations

import datetime as dt
import decimal
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.errors import SchemaMismatch
from kvstore.mvcc import (
    KeyCodec,
    Lock,
    LockOp,
    Write,
    WriteKind,
    changes_key,
    parse_versioned_key,
    txn_lock_key,
    versioned_key,
)
from kvstore.mvcc.records import STORE_FORMAT, ChecksumMismatch
from kvstore.rowcodec import RowCodec
from kvstore.schema import TableSchema, parse_ddl

ALL_TYPES = (
    "id BIGINT, i INT, d DOUBLE, b BOOLEAN, s STRING, m DECIMAL(10,2), dt DATE, ts TIMESTAMP"
)


def schema(ddl: str, pk: list[str]) -> TableSchema:
    return TableSchema("t", parse_ddl(ddl, "t"), pk)


# ---------------------------------------------------------------- golden bytes


def test_golden_versioned_key():
    """user_key + 8-byte big-endian complement of the ts."""
    assert versioned_key(b"\x00\x00\x00\x10k", 1).hex() == "00000010" + "6b" + "fffffffffffffffe"
    assert parse_versioned_key(bytes.fromhex("000000106bfffffffffffffffe")) == (
        b"\x00\x00\x00\x10k",
        1,
    )


def test_golden_changes_and_txn_lock_keys():
    """changes: table id + commit_ts + user_key; txn_locks: start_ts + user_key."""
    uk = bytes.fromhex("00000010aa")
    assert changes_key(uk, 5).hex() == "00000010" + "0000000000000005" + "00000010aa"
    assert txn_lock_key(7, uk).hex() == "0000000000000007" + "00000010aa"


def _crc_le(hex_body: str) -> str:
    """The checksum trailer: zlib's CRC-32 of the body XOR 0x6DD90A9D, 4 bytes little-endian,
    which brings the CRC-32 of the whole record to 0."""
    return (zlib.crc32(bytes.fromhex(hex_body)) ^ 0x6DD90A9D).to_bytes(4, "little").hex()


def test_golden_lock_record():
    """op flag, start_ts, ttl, txn_size, primary length + primary, tagged short value, CRC-32."""
    lock = Lock(LockOp.PUT, b"pk", 0x0102, 3000, 2, b"val")
    body = (
        "50"
        + "0000000000000102"
        + "0000000000000bb8"
        + "0000000000000002"
        + "0002"
        + "706b"
        + "76"
        + "76616c"
    )
    assert lock.to_bytes().hex() == body + _crc_le(body)
    assert lock.to_bytes().hex().endswith("b803018a")  # the trailer itself, pinned
    assert zlib.crc32(lock.to_bytes()) == 0
    assert Lock.parse(lock.to_bytes()) == lock
    bare = Lock(LockOp.DELETE, b"pk", 1, 10)
    assert bare.to_bytes()[:1] == b"D" and Lock.parse(bare.to_bytes()) == bare
    # The commit record built from the lock's bytes is the Write record, sealed anew.
    assert Lock.write_bytes(lock.to_bytes()) == Write(WriteKind.PUT, 0x0102, b"val").to_bytes()


def test_golden_write_record():
    """kind flag, start_ts, tagged short value, CRC-32."""
    w = Write(WriteKind.PUT, 0x0102, b"v")
    body = "50" + "0000000000000102" + "76" + "76"
    assert w.to_bytes().hex() == body + _crc_le(body)
    assert Write.parse(w.to_bytes()) == w
    body = "52" + "0000000000000009"
    assert Write(WriteKind.ROLLBACK, 9).to_bytes().hex() == body + _crc_le(body)
    assert STORE_FORMAT == 2


@pytest.mark.parametrize(
    "record",
    [
        Lock(LockOp.PUT, b"pk", 5, 3000, 1, b"row").to_bytes(),
        Write(WriteKind.PUT, 5, b"row").to_bytes(),
    ],
)
def test_every_flipped_byte_fails_the_checksum(record):
    """A record with any one byte changed is refused (ChecksumMismatch), never decoded."""
    parse = Lock.parse if len(record) > 20 else Write.parse
    for i in range(len(record)):
        for bit in (0x01, 0x80):
            bad = bytearray(record)
            bad[i] ^= bit
            with pytest.raises(ChecksumMismatch):
                parse(bytes(bad))
    with pytest.raises(ChecksumMismatch):
        parse(record[:-1])


def test_golden_bigint_key():
    """BIGINT keys are sign-flipped big-endian after the 4-byte table id."""
    kc = KeyCodec(16, schema("id BIGINT", ["id"]))
    assert kc.encode({"id": 1}).hex() == "00000010" + "8000000000000001"
    assert kc.encode({"id": -1}).hex() == "00000010" + "7fffffffffffffff"


def test_golden_string_key():
    """STRING keys escape 0x00 as 00 ff and end with 00 01."""
    kc = KeyCodec(16, schema("s STRING", ["s"]))
    assert kc.encode({"s": "a\x00b"}).hex() == "00000010" + "6100ff62" + "0001"


def test_golden_row():
    """version, null bitmap, little-endian fixed slots, variable area."""
    rc = RowCodec(schema("id BIGINT, s STRING, n INT", ["id"]))
    raw = rc.encode({"id": 1, "s": "hi", "n": None})
    assert raw.hex() == ("01" + "04" + "0100000000000000" + "02000000" + "00000000" + "6869")


# ---------------------------------------------------------------- properties

KEY_TYPES = {
    "BIGINT": st.integers(-(1 << 63), (1 << 63) - 1),
    "INT": st.integers(-(1 << 31), (1 << 31) - 1),
    "DOUBLE": st.floats(allow_nan=False),
    "STRING": st.text(max_size=20),
    "BOOLEAN": st.booleans(),
    "DATE": st.dates(),
    "DECIMAL(10,2)": st.decimals(min_value=-(10**7), max_value=10**7, places=2),
}


@pytest.mark.parametrize("typ", sorted(KEY_TYPES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_key_order_matches_value_order(typ, data):
    """Memcomparable: byte order of encoded keys equals the order of the values."""
    kc = KeyCodec(16, schema(f"a {typ}, b STRING", ["a", "b"]))
    vals = data.draw(
        st.lists(
            st.tuples(KEY_TYPES[typ], st.text(max_size=5)), min_size=2, max_size=8, unique=True
        )
    )
    vals = [v for v in vals if not (isinstance(v[0], float) and v[0] == 0.0)]  # -0.0 == 0.0
    encoded = {v: kc.encode({"a": v[0], "b": v[1]}) for v in vals}
    assert sorted(vals) == sorted(vals, key=lambda v: encoded[v])
    for v, k in encoded.items():
        assert kc.decode(k)[1] == v[1]


rows = st.fixed_dictionaries(
    {
        "id": st.integers(-(1 << 63), (1 << 63) - 1),
        "i": st.none() | st.integers(-(1 << 31), (1 << 31) - 1),
        "d": st.none() | st.floats(allow_nan=False),
        "b": st.none() | st.booleans(),
        "s": st.none() | st.text(max_size=30),
        "m": st.none() | st.decimals(min_value=-(10**7), max_value=10**7, places=2),
        "dt": st.none() | st.dates(min_value=dt.date(1, 1, 1)),
        "ts": st.none() | st.datetimes(timezones=st.just(dt.UTC)),
    }
)


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(rows, min_size=1, max_size=20))
def test_row_codec_round_trip_single_and_bulk(batch):
    """Every type and null survives encode -> decode and encode -> bulk Arrow decode."""
    rc = RowCodec(schema(ALL_TYPES, ["id"]))
    raw = [rc.encode(r) for r in batch]
    for r, b in zip(batch, raw, strict=True):
        rc.validate(b)
        assert rc.decode(b) == r
    arrow_rows = rc.decode_arrow(raw).to_pylist()
    for r, a in zip(batch, arrow_rows, strict=True):
        assert {
            k: (v.replace(tzinfo=dt.UTC) if isinstance(v, dt.datetime) else v) for k, v in a.items()
        } == r


@pytest.mark.parametrize(
    "row, column",
    [
        ({"id": "1"}, "id"),  # wrong type
        ({"id": 1, "i": 1 << 40}, "i"),  # out of range
        ({"id": 1, "m": decimal.Decimal("1.234")}, "m"),  # too many fractional digits
        ({"id": 1, "nope": 3}, "nope"),  # extra column
        ({"i": 3}, "id"),  # missing key column
        ({"id": None}, "id"),  # null key
    ],
)
def test_row_codec_rejects_with_column_name(row, column):
    """A row that does not fit raises SchemaMismatch naming the table and the column."""
    rc = RowCodec(schema(ALL_TYPES, ["id"]))
    with pytest.raises(SchemaMismatch) as e:
        rc.encode(row)
    assert "'t'" in str(e.value) and repr(column) in str(e.value)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b[:-1],  # truncated
        lambda b: b"\x02" + b[1:],  # unknown version
        lambda b: b + b"x",  # trailing bytes
        lambda b: b[:10] + b"\x63\x00\x00\x00" + b[14:],  # string length that lies
        lambda b: b[:1] + b"\x01" + b[2:],  # null bit on the key column
        lambda b: b[:14] + b"\xff\xfe\xfd",  # invalid UTF-8
    ],
)
def test_row_validate_rejects_malformed(mangle):
    """validate() refuses bytes that are not a row of the schema."""
    rc = RowCodec(schema("id BIGINT, s STRING", ["id"]))
    good = rc.encode({"id": 1, "s": "abc"})
    rc.validate(good)
    with pytest.raises(SchemaMismatch):
        rc.validate(mangle(good))


FIXED_KEY_TYPES = {k: v for k, v in KEY_TYPES.items() if k != "STRING"}


@pytest.mark.parametrize("typ", sorted(FIXED_KEY_TYPES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_bulk_key_derivation_matches_key_codec(typ, data):
    """key_bytes (vectorized, from row slots) equals KeyCodec.encode row by row."""
    s = schema(f"a {typ}, b INT, v STRING", ["a", "b"])
    rc, kc = RowCodec(s), KeyCodec(16, s)
    vals = data.draw(
        st.lists(st.tuples(FIXED_KEY_TYPES[typ], st.integers(-5, 5)), min_size=1, max_size=10)
    )
    rows = [{"a": a, "b": b, "v": "x"} for a, b in vals]
    derived = rc.key_bytes([rc.encode(r) for r in rows], kc.prefix)
    assert [bytes(r) for r in derived] == [kc.encode(r) for r in rows]


BULK_KEY_TYPES = {**KEY_TYPES, "BINARY": st.binary(max_size=12)}


@pytest.mark.parametrize("second", ["STRING", "BINARY", "BIGINT"])
@pytest.mark.parametrize("typ", sorted(BULK_KEY_TYPES))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_bulk_keys_match_key_codec(typ, second, data):
    """RowCodec.keys (fixed slots by numpy, STRING and BINARY sliced and escaped) equals
    KeyCodec.encode row by row, for every key type before and after a variable-length one,
    NULs and empty values included (a values state table's key is (group, BINARY order))."""
    s = schema(f"v STRING, a {typ}, b {second}, c INT", ["a", "b", "c"])
    rc, kc = RowCodec(s), KeyCodec(16, s)
    vals = data.draw(
        st.lists(
            st.tuples(BULK_KEY_TYPES[typ], BULK_KEY_TYPES[second], st.integers(-5, 5)),
            min_size=1,
            max_size=10,
        )
    )
    rows = [{"v": "x\x00y" * (i % 3), "a": a, "b": b, "c": c} for i, (a, b, c) in enumerate(vals)]
    assert rc.keys([rc.encode(r) for r in rows], kc.prefix) == [kc.encode(r) for r in rows]


def test_bulk_keys_of_no_rows_and_the_length_limit():
    """No rows, no keys; a key over the limit is refused by the Arrow encoder as KeyCodec
    refuses it (named), where the bulk keys are made without the check."""
    import pyarrow as pa

    from kvstore.table_info import TableInfo
    from spark_sink.arrow_encoding import ArrowEncoder

    info = TableInfo("t", 16, "g BIGINT NOT NULL, o BINARY NOT NULL, n BIGINT", ("g", "o"))
    assert info.row_codec.keys([], info.prefix) == []
    enc = ArrowEncoder(info)
    ok = pa.record_batch({"g": [1, 2], "o": [b"\x00", b""], "n": [1, 1]})
    assert enc.encode_keys(enc.encode_rows(ok)) == [
        info.key_codec.encode({"g": 1, "o": b"\x00"}),
        info.key_codec.encode({"g": 2, "o": b""}),
    ]
    long = pa.record_batch({"g": [1, 2], "o": [b"a", b"\x00" * 300], "n": [1, 1]})
    with pytest.raises(SchemaMismatch, match="'t': primary key of .* bytes exceeds"):
        enc.mutations(long, "upsert")


@settings(max_examples=60, deadline=None)
@given(
    batch=st.lists(rows, min_size=1, max_size=8),
    pos=st.integers(0, 7),
    cut=st.integers(0, 40),
    junk=st.binary(min_size=0, max_size=6),
)
def test_bulk_validation_agrees_with_row_validation(batch, pos, cut, junk):
    """first_invalid finds exactly the first row that validate() refuses."""
    rc = RowCodec(schema(ALL_TYPES, ["id"]))
    raw = [rc.encode(r) for r in batch]
    i = pos % len(raw)
    raw[i] = raw[i][:cut] + junk + raw[i][cut + len(junk) :]
    expected = None
    for j, b in enumerate(raw):
        try:
            rc.validate(b)
        except SchemaMismatch:
            expected = j
            break
    assert rc.first_invalid(raw) == expected


@pytest.mark.parametrize(
    "lock",
    [
        Lock(LockOp.PUT, b"primary", 77, 3000, 5, b"row-bytes"),
        Lock(LockOp.PUT, b"p", 78, 10),
        Lock(LockOp.DELETE, b"", 79, 10),
        Lock(LockOp.LOCK, b"pk", 80, 10, 1),
    ],
)
def test_lock_to_write_bytes_matches_records(lock):
    """The byte-level lock -> write conversion equals building the Write record."""
    kind = {
        LockOp.PUT: WriteKind.PUT,
        LockOp.DELETE: WriteKind.DELETE,
        LockOp.LOCK: WriteKind.LOCK,
    }[lock.op]
    raw = lock.to_bytes()
    assert Lock.write_bytes(raw) == Write(kind, lock.start_ts, lock.short_value).to_bytes()
    assert Lock.start_ts_of(raw) == lock.start_ts


@settings(max_examples=60, deadline=None)
@given(batch=st.lists(rows, min_size=1, max_size=20, unique_by=lambda r: r["id"]))
def test_arrow_encoder_output_is_the_codecs_and_validates(batch):
    """What spark_sink.ArrowEncoder builds is byte for byte what RowCodec/KeyCodec build, and
    passes the server's validate_rows: the direct prewrite path relies on this to skip the
    re-check (kvstore.direct.DirectPrewriter.prewrite, ``encoded_here``)."""
    import pyarrow as pa

    from kvstore.table_info import TableInfo
    from kvstore.validation import validate_rows
    from spark_sink.arrow_encoding import ArrowEncoder

    for pk in (["id"], ["s", "id"]):
        if "s" in pk:
            batch = [r for r in batch if r["s"] is not None]
            if not batch:
                continue
        info = TableInfo("t", 42, ALL_TYPES, tuple(pk))
        arrow_rows = pa.RecordBatch.from_pylist(
            batch, schema=pa.schema([(c.name, c.type.arrow()) for c in info.table_schema.columns])
        )
        muts = ArrowEncoder(info).mutations(arrow_rows, "upsert")
        assert [v for _, _, v in muts] == [info.row_codec.encode(r) for r in batch]
        assert [k for _, k, _ in muts] == [info.key_codec.encode(r) for r in batch]
        validate_rows(info, [k for _, k, _ in muts], [v for _, _, v in muts])


@pytest.mark.parametrize(
    "ddl, value",
    [
        ("DECIMAL(38,0)", decimal.Decimal("18389530126288475861718156401234567891")),
        ("DECIMAL(38,10)", decimal.Decimal("-1234567890123456789012345678.9012345678")),
        ("DECIMAL(38,38)", decimal.Decimal("0.12345678901234567890123456789012345678")),
    ],
)
def test_decimals_of_more_than_28_digits_are_exact(ddl, value):
    """Python's default decimal context rounds to 28 digits; a DECIMAL(38, s) must not: it was
    rounded silently on write (to_storage) and again on read (from_storage)."""
    rc = RowCodec(schema(f"id BIGINT, m {ddl}", ["id"]))
    raw = rc.encode({"id": 1, "m": value})
    got = rc.decode(raw)["m"]
    assert (got, str(got)) == (value, str(value))
    assert rc.decode_arrow([raw]).column("m")[0].as_py() == value


def test_a_decimal_with_a_far_fractional_digit_is_refused_not_rounded():
    rc = RowCodec(schema("id BIGINT, m DECIMAL(38,2)", ["id"]))
    with pytest.raises(SchemaMismatch, match="'m'"):
        rc.encode({"id": 1, "m": decimal.Decimal("1" * 30 + ".001")})
