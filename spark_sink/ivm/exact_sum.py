"""Exact DOUBLE sums for the build of a compensated running sum (spark_sink.ivm.aggregate):
the sum of a group's values computed in exact rational arithmetic and rounded to the pair
(hi, lo) the deltas continue from, so a view's DOUBLE SUM/AVG is the exact sum of its group's
current inputs rounded once, whether the group was last built or maintained (a batch sum, such
as Spark's own, carries a rounding error per addition, which would otherwise survive the
deletion of the values it came from).

A group holding NaN or an infinity gets Spark's value (NaN or the infinity) and lo 0: the
deltas then rebuild it (``NeedsBuild``).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import pandas as pd
from pyspark.sql import Column
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import DoubleType


def exact_pair(values: list[float]) -> tuple[float, float]:
    """(hi, lo): hi is the exact sum of ``values`` rounded to the nearest double, lo the exact
    remainder rounded (hi + lo carries about 106 bits)."""
    if not all(math.isfinite(v) for v in values):
        return float(sum(values)), 0.0
    exact = sum((Fraction(v) for v in values), Fraction(0))
    hi = float(exact)
    return hi, float(exact - Fraction(hi))


def _values(v: pd.Series, null: pd.Series, distinct: bool) -> list[float]:
    got = v[~null.astype(bool)].astype(float).tolist()
    if distinct:  # Spark's distinct: -0.0 is 0.0, every NaN the same value
        seen: dict = {}
        for x in got:
            seen.setdefault("nan" if x != x else x + 0.0, x)
        got = list(seen.values())
    return got


@functools.cache
def _udfs(distinct: bool):
    """(hi, lo) grouped-aggregate pandas UDFs (made on first use: a UDF needs a session)."""

    @pandas_udf(DoubleType())  # type: ignore[call-overload]
    def hi(v: pd.Series, null: pd.Series) -> float:
        return exact_pair(_values(v, null, distinct))[0]

    @pandas_udf(DoubleType())  # type: ignore[call-overload]
    def lo(v: pd.Series, null: pd.Series) -> float:
        return exact_pair(_values(v, null, distinct))[1]

    return hi, lo


def exact_sum_columns(x: Column, distinct: bool) -> tuple[Column, Column]:
    """Grouped-aggregate Columns (hi, lo) of the exact sum of ``x``'s non-NULL values (its
    distinct ones if ``distinct``). They cannot share an ``agg`` with built-in aggregates."""
    hi, lo = _udfs(distinct)
    v, null = x.cast("double"), x.isNull()
    return hi(v, null), lo(v, null)
