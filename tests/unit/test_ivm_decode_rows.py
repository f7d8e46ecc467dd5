"""decode_rows (spark_sink.ivm.inputs): rows decoded in bulk hold exactly what RowCodec.decode
gives row by row, type for type (the delta rules compare, hash and re-encode these values)."""

from __future__ import annotations

import datetime as dt
import math
import random
from decimal import Decimal

from kvstore.rowcodec import RowCodec
from kvstore.schema import TableSchema, parse_ddl
from spark_sink.ivm.inputs import decode_rows

DDL = (
    "id BIGINT, i INT, f DOUBLE, b BOOLEAN, s STRING, bin BINARY, d DATE, t TIMESTAMP, "
    "m DECIMAL(12,3), big DECIMAL(38,0)"
)


def _value(rng: random.Random, kind: str):
    if rng.random() < 0.2:
        return None
    return {
        "INT": lambda: rng.randint(-(2**31), 2**31 - 1),
        "DOUBLE": lambda: rng.choice(
            [0.0, -0.0, float("nan"), float("inf"), rng.uniform(-1e9, 1e9)]
        ),
        "BOOLEAN": lambda: rng.random() < 0.5,
        "STRING": lambda: "".join(rng.choice("aé😀 z") for _ in range(rng.randint(0, 6))),
        "BINARY": lambda: bytes(rng.randrange(256) for _ in range(rng.randint(0, 5))),
        "DATE": lambda: dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-20000, 40000)),
        "TIMESTAMP": lambda: (
            dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
            + dt.timedelta(microseconds=rng.randint(-(10**15), 10**16))
        ),
        "DECIMAL": lambda: Decimal(rng.randint(-(10**9), 10**9)).scaleb(-3),
    }[kind]()


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b and str(a) == str(b)


def test_bulk_decode_equals_row_by_row_decode():
    schema = TableSchema("t", parse_ddl(DDL), ["id"])
    codec = RowCodec(schema)
    rng = random.Random(7)
    rows = []
    for i in range(300):
        row = {"id": i}
        for c in schema.columns[1:]:
            kind = c.type.kind
            row[c.name] = _value(rng, kind)
            if c.name == "big" and row[c.name] is not None:
                row[c.name] = Decimal(rng.randint(-(10**37), 10**37))
        rows.append(codec.encode(row))
    names = [c.name for c in schema.visible_columns]
    want = [tuple(codec.decode(r)[n] for n in names) for r in rows]
    got = decode_rows(schema.visible_columns, codec, rows)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        bad = [(n, x, y) for n, x, y in zip(names, g, w, strict=True) if not _same(x, y)]
        assert not bad, bad
    ts = [g[names.index("t")] for g in got if g[names.index("t")] is not None]
    assert ts and all(t.tzinfo is dt.UTC for t in ts)  # decode's tzinfo, not zoneinfo's
    assert decode_rows(schema.visible_columns, codec, []) == []


def test_a_hidden_row_id_is_not_decoded():
    schema = TableSchema("h", parse_ddl("a BIGINT, s STRING"), [], hidden_row_id=True)
    codec = RowCodec(schema)
    rows = [codec.encode({"a": 1, "s": "x", "_row_id": b"\x01"})]
    assert decode_rows(schema.visible_columns, codec, rows) == [(1, "x")]
