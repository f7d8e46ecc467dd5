"""Casts from STRING (spark_sink.ivm.string_casts through the row evaluator's ``cast``) against
Spark itself: seeded strings built to hit each parser's edges (signs, points, exponents,
suffixes, other scripts' digits, Java's whitespace and control characters, partial and
impossible dates), each cast by Spark's ``try_cast`` (NULL where ANSI ``CAST`` raises) and by
ours (EvalError where Spark raises). A planted parser that truncates ``1.5`` to 1 is caught."""

from __future__ import annotations

import datetime as dt
import math
import random

import pytest

from spark_sink.ivm import expressions as E
from spark_sink.ivm import string_casts
from spark_sink.ivm.expressions import EvalError, _cast

TARGETS = [
    "TINYINT",
    "INT",
    "BIGINT",
    "DECIMAL(10,2)",
    "DECIMAL(38,10)",
    "DOUBLE",
    "DATE",
    "BOOLEAN",
]

_SPACE = [" ", "\t", "\n", "\x0b", "\x1f", "\x7f", "\x85", "\xa0", "\u2003", "\u3000", "\x00"]
_PIECES = [
    *"0123456789",
    "１",  # FULLWIDTH DIGIT ONE
    "٣",  # ARABIC-INDIC DIGIT THREE
    *"+-.eEpPxXfFdDT_:",
    "inf",
    "Infinity",
    "NaN",
    "nan",
    "true",
    "yes",
    "N",
    "0x1",
    "2024",
    "-02-29",
    "-2-3",
    "12",
    "99999999999999999999",
]
_TEMPLATES = [
    "{s}{i}",
    "{s}{i}.{f}",
    "{s}.{f}",
    "{s}{i}.",
    "{s}{i}e{s}{e}",
    "{s}{i}.{f}E{e}{x}",
    "0x{h}p{s}{e}",
    "{y}-{m}-{d}",
    "{y}-{m}",
    "{s}{y}-{m}-{d}T{t}",
    "{y}-{m}-{d} {t}",
    "{b}",
]


def _text(rng: random.Random) -> str:
    if rng.random() < 0.6:
        t = rng.choice(_TEMPLATES).format(
            s=rng.choice(["", "", "+", "-"]),
            i=str(
                rng.choice([0, 1, 7, 12, 127, 128, 255, 2**31, 2**63, 10**20, rng.randrange(10**6)])
            ),
            f=str(rng.randrange(10 ** rng.randint(1, 12))),
            e=str(rng.choice([0, 1, 2, 8, 30, 400])),
            x=rng.choice(["", "", "d", "f", "D"]),
            h=rng.choice(["1", "1.8", "A", ".8"]),
            y=rng.choice(["2024", "1999", "0001", "99999", "123", "+2024", "9999"]),
            m=rng.choice(["1", "01", "12", "13", "0", "002"]),
            d=rng.choice(["1", "29", "30", "31", "32", "07"]),
            t=rng.choice(["", "10:00", "junk", "T"]),
            b=rng.choice(["t", "True", "Y", "yes", "1", "f", "FALSE", "no", "0", "on", "tru"]),
        )
    else:
        t = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 5)))
    if rng.random() < 0.3:
        t = rng.choice(_SPACE) + t
    if rng.random() < 0.3:
        t = t + rng.choice(_SPACE)
    return t


def texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [_text(rng) for _ in range(n)]


def _ours(text: str, target: str):
    """Our cast of ``text``: the value as Spark's collect() gives it, None where we raise."""
    try:
        v = _cast(target.lower().replace(" ", ""), "string")(text)
    except EvalError as e:
        if "outside years" in str(e):
            return ("beyond Python's dates",)
        return None
    return v.isoformat() if isinstance(v, dt.date) else v


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


def differences(spark, strings: list[str]) -> list[str]:
    """Each (string, target) where our cast and Spark's disagree, described."""
    df = spark.createDataFrame([(i, s) for i, s in enumerate(strings)], "i INT, s STRING")
    cols = ", ".join(
        # a DATE past year 9999 as text: Python (collect) cannot hold it either
        f"CAST(try_cast(s AS DATE) AS STRING) AS c{k}"
        if t == "DATE"
        else f"try_cast(s AS {t}) AS c{k}"
        for k, t in enumerate(TARGETS)
    )
    rows = {r["i"]: r for r in df.selectExpr("i", *cols.split(", ")).collect()}
    out = []
    for i, s in enumerate(strings):
        for k, t in enumerate(TARGETS):
            want, got = rows[i][f"c{k}"], _ours(s, t)
            if got == ("beyond Python's dates",):
                year = want and (want[0] in "+-" or not 1 <= int(want.split("-")[0]) <= 9999)
                ok = bool(year)
            else:
                ok = _same(got, want)
            if not ok:
                out.append(f"CAST({s!r} AS {t}): Spark {want!r}, ours {got!r}")
    return out


@pytest.mark.parametrize("seed", range(2))
def test_casts_from_string_equal_sparks(spark, seed):
    strings = texts(seed, 400)
    assert differences(spark, strings) == []


def test_a_planted_truncating_parser_is_caught(spark, monkeypatch):
    """The non-ANSI rule (``1.5`` read as 1) where ANSI raises: the comparison must see it."""

    def truncating(text: str):
        t = string_casts.trim_all(text)
        head = t.split(".")[0]
        return int(head) if head.lstrip("+-").isdigit() else None

    monkeypatch.setitem(E._TEXT_PARSERS, "integral", truncating)
    found = differences(spark, ["1.5", "-7.25", "12"])
    assert any("CAST('1.5' AS INT)" in d for d in found), found
    assert not any("'12'" in d for d in found), found
