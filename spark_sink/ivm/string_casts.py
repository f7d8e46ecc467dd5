"""Spark's ANSI casts from STRING, as parsers: the text in, the exact value out, or None where
Spark raises CAST_INVALID_INPUT. The row evaluator's ``cast`` (``spark_sink.ivm.expressions``)
turns None into ``EvalError`` and fits the value to the target type (range, DECIMAL scale).

Each follows Spark 4 with ``spark.sql.ansi.enabled`` (its default), including its quirks, which
come from the Java parser under each:

- integers (TINYINT to BIGINT): the text stripped of ASCII whitespace and control characters
  at both ends (``UTF8String.trimAll``: not U+0085, U+00A0 or U+3000), then an optional sign
  and ASCII digits only: no decimal point, exponent, underscore or other script's digits.
- DECIMAL: Java's ``String.trim`` (characters up to U+0020 only: U+007F stays), then
  ``java.math.BigDecimal``'s grammar: optional sign, digits with an
  optional point (``1.``, ``.5``), an optional exponent; digits of any script (``１２`` is 12).
- DOUBLE: Java's ``Double.parseDouble`` after ``String.trim`` (characters up to U+0020 only):
  ASCII digits, an optional exponent, an optional ``f``/``d`` suffix, hexadecimal floats
  (``0x1.8p1``), ``NaN`` and ``Infinity``; then Spark's own ``inf``, ``-inf``, ``infinity`` and
  ``nan`` in any case. FLOAT is not here: Java rounds the text to a float once, a double
  rounded again could differ.
- DATE: the trimAll strip, then ``[+-]yyyy[-m[m][-d[d]]]`` (a 4 to 7 digit year, month and day of
  one or two digits, missing parts 1), a whole date optionally followed by ``T`` or a space and
  anything at all; an impossible day (``2024-02-30``) is invalid. Python's dates end at year
  9999: a later one raises ``OverflowError`` (Spark would give it; the view cannot hold it).
- BOOLEAN: the trimAll strip, then ``t``, ``true``, ``y``, ``yes``, ``1`` or ``f``, ``false``,
  ``n``, ``no``, ``0`` in any case.

``tests/spark/test_string_casts.py`` compares every parser with Spark's ``try_cast`` over seeded
strings built to hit these edges.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation


def _ascii_space_or_control(c: str) -> bool:
    # UTF8String.trimAll tests each byte with Java's Character.isWhitespace/isISOControl; a
    # byte of a multi-byte character is negative in Java and passes neither, so only ASCII
    # counts: U+0000 to U+0020 and U+007F (not U+0085, U+00A0, U+2003, U+3000).
    return c <= " " or c == "\x7f"


def _strip(text: str, strips: Callable[[str], bool]) -> str:
    i, j = 0, len(text)
    while i < j and strips(text[i]):
        i += 1
    while j > i and strips(text[j - 1]):
        j -= 1
    return text[i:j]


def trim_all(text: str) -> str:
    """``text`` without ASCII whitespace and control characters at either end (Spark's
    ``UTF8String.trimAll``)."""
    return _strip(text, _ascii_space_or_control)


def java_trim(text: str) -> str:
    """``text`` without characters up to U+0020 at either end (Java's ``String.trim``)."""
    return _strip(text, lambda c: c <= " ")


_INTEGRAL = re.compile(r"[+-]?[0-9]+")


def parse_integral(text: str) -> int | None:
    """The integer ``text`` spells (any size: the caller checks the target's range), or None."""
    t = trim_all(text)
    return int(t) if _INTEGRAL.fullmatch(t) else None


# BigDecimal's grammar; \d is any script's decimal digit, as Java's Character.isDigit.
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def parse_decimal(text: str) -> Decimal | None:
    """The exact number ``text`` spells (not yet rounded to a scale), or None."""
    t = java_trim(text)
    if not _DECIMAL.fullmatch(t):
        return None
    try:
        return Decimal(t)
    except InvalidOperation:
        return None


_DEC_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX_FLOAT = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+")
_SPECIAL = {
    "inf": float("inf"),
    "+inf": float("inf"),
    "infinity": float("inf"),
    "+infinity": float("inf"),
    "-inf": float("-inf"),
    "-infinity": float("-inf"),
    "nan": float("nan"),
}


def parse_double(text: str) -> float | None:
    """The double ``text`` spells, rounded as Java rounds it (correctly, as Python does), or
    None."""
    t = java_trim(text)
    if t.lstrip("+-") in ("NaN", "Infinity") and len(t) - len(t.lstrip("+-")) <= 1:
        return float(t)  # Java's own spellings: one sign at most, no suffix
    body = t[:-1] if t.endswith(("f", "F", "d", "D")) else t
    if _DEC_FLOAT.fullmatch(body):
        return float(body)
    if _HEX_FLOAT.fullmatch(body):
        return float.fromhex(body)
    return _SPECIAL.get(t.lower())


# A time or anything else may follow a whole date only (after "2024" or "2024-01", Spark
# refuses a "T" or a space).
_DATE = re.compile(r"([+-]?)([0-9]{4,7})(?:-([0-9]{1,2})(?:-([0-9]{1,2})(?:[T ].*)?)?)?", re.DOTALL)


def parse_date(text: str) -> dt.date | None:
    """The date ``text`` spells, or None; OverflowError past year 9999 (see the module)."""
    m = _DATE.fullmatch(trim_all(text))
    if not m:
        return None
    sign, year, month, day = m.groups()
    y = -int(year) if sign == "-" else int(year)
    mo, d = int(month or 1), int(day or 1)
    if not (1 <= mo <= 12 and 1 <= d <= 31):
        return None
    if y < dt.MINYEAR or y > dt.MAXYEAR:
        try:
            dt.date(2000, mo, d)  # a valid month and day: Spark has the date, Python has not
        except ValueError:
            return None
        raise OverflowError(f"the date {text.strip()!r} is outside years 1 to 9999")
    try:
        return dt.date(y, mo, d)
    except ValueError:
        return None


_TRUE = ("t", "true", "y", "yes", "1")
_FALSE = ("f", "false", "n", "no", "0")


def parse_boolean(text: str) -> bool | None:
    """The truth value ``text`` spells, or None."""
    t = trim_all(text).lower()
    return True if t in _TRUE else False if t in _FALSE else None
