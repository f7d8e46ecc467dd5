"""``encode_keys`` (the epoch's bulk key encoder) gives ``encode_key``'s bytes and errors for
every key: integer keys packed by struct, boundary values, values of the wrong type or out of
range (which fall back and raise as encode_key does), and tables with other key types."""

from __future__ import annotations

import random

import pytest

from kvstore.errors import SchemaMismatch
from kvstore.table_info import TableInfo
from spark_sink.ivm.inputs import encode_key, encode_keys

B64, B32 = 2**63, 2**31
EDGES = {"BIGINT": [-B64, -B64 + 1, -1, 0, 1, B64 - 1], "INT": [-B32, -1, 0, 1, B32 - 1]}


def _info(ddl: str, pk: tuple[str, ...]) -> TableInfo:
    return TableInfo("t", 42, ddl, pk)


@pytest.mark.parametrize(
    "ddl,pk",
    [
        ("a BIGINT NOT NULL, x STRING", ("a",)),
        ("a INT NOT NULL, x STRING", ("a",)),
        ("a INT NOT NULL, b BIGINT NOT NULL, x DOUBLE", ("a", "b")),
        ("b BIGINT NOT NULL, a INT NOT NULL", ("a", "b")),
    ],
)
def test_integer_keys_match_encode_key(ddl, pk):
    info = _info(ddl, pk)
    kinds = [c.type.kind for c in info.table_schema.key_columns]
    rng = random.Random(5)
    keys = [
        tuple(
            rng.choice(EDGES[k]) if rng.random() < 0.3 else rng.randrange(-1000, 1000)
            for k in kinds
        )
        for _ in range(500)
    ]
    assert encode_keys(info, keys) == [encode_key(info, k) for k in keys]
    assert encode_keys(info, [list(k) for k in keys[:5]]) == [encode_key(info, k) for k in keys[:5]]
    # order-preserving, as the reads that sort them rely on
    ints = sorted({k for k in keys})
    assert sorted(encode_keys(info, ints)) == encode_keys(info, ints)


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, True, 1.0, "1", None])
def test_a_bad_value_raises_as_encode_key_does(bad):
    info = _info("a BIGINT NOT NULL, x STRING", ("a",))
    with pytest.raises(SchemaMismatch) as want:
        encode_key(info, (bad,))
    with pytest.raises(SchemaMismatch) as got:
        encode_keys(info, [(1,), (bad,)])
    assert str(got.value) == str(want.value)


def test_string_and_binary_keys_match_encode_key():
    """A (group, BINARY order) key, as a values state table's, and STRING keys: joined by the
    columns' fast encoders, NULs and empty values included, in order."""
    info = _info("g BIGINT NOT NULL, o BINARY NOT NULL, n BIGINT", ("g", "o"))
    rng = random.Random(9)
    keys = [
        (rng.randrange(-3, 3), bytes(rng.choice(b"\x00\x01\xff") for _ in range(rng.randrange(4))))
        for _ in range(300)
    ]
    assert encode_keys(info, keys) == [encode_key(info, k) for k in keys]
    info = _info("s STRING NOT NULL, a BIGINT NOT NULL, d DECIMAL(10,2)", ("s", "a"))
    keys = [("x", 1), ("", -5), ("a\x00b", 7), ("é", 0)]
    assert encode_keys(info, keys) == [encode_key(info, k) for k in keys]


@pytest.mark.parametrize("bad", [("x", 1), (1, "a"), (2**63, b"a"), (1, b"\x00" * 300)], ids=str)
def test_a_bad_string_or_binary_key_raises_as_encode_key_does(bad):
    """A wrong type, a value out of range, a key over the length limit: the fast
    path hands it to encode_key, which names it."""
    info = _info("g BIGINT NOT NULL, o BINARY NOT NULL, n BIGINT", ("g", "o"))
    with pytest.raises(SchemaMismatch) as want:
        encode_key(info, bad)
    with pytest.raises(SchemaMismatch) as got:
        encode_keys(info, [(1, b"ok"), bad])
    assert str(got.value) == str(want.value)


def test_other_key_types_go_through_encode_key():
    info = _info("d DATE NOT NULL, a BIGINT NOT NULL", ("d", "a"))
    import datetime as dt

    keys = [(dt.date(2020, 1, 2), 1), (dt.date(1969, 12, 31), -5)]
    assert encode_keys(info, keys) == [encode_key(info, k) for k in keys]
