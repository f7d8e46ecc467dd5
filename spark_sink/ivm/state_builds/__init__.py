"""How a build fills each state table on Spark, one module per operator that declares the table
(``spark_sink.ivm.ops.state_table``): ``aggregate`` (groups, values), ``outer_join`` (matches),
``scan`` (index), ``topk`` (the ordered state of ORDER BY ... LIMIT). Each registers a builder
for its roles; ``state_df`` finds it by the table's role. A builder returns the table's whole
contents at the build's barrier as a DataFrame, made by Spark from the query's own optimized plan
(so a state is what Spark computes), which the build writes from the executors
(``spark_sink.executor_diff.write_diff``); nothing reaches the driver.

This is the Spark half of a stateful operator, kept apart from its algebra (``ops/``), which
imports no pyspark.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from kvstore.table_info import TableInfo
from spark_sink.ivm.ops.state_table import StateTable


@dataclass(frozen=True)
class BuildContext:
    """What a builder reads: the session, the view's query as a DataFrame (its optimized plan
    holds the aggregates and joins the state comes from), the view's IncrementalPlan, and a
    client (for the sources' descriptions)."""

    session: SparkSession
    df: DataFrame
    plan: Any  # spark_sink.ivm.plan_check.IncrementalPlan (not imported: it imports this)
    client: Any

    def df_of(self, logical_plan: Any) -> DataFrame:
        """A DataFrame over a Catalyst logical plan (a part of the query's optimized plan)."""
        ss = self.session
        jvm = ss._jvm
        assert jvm is not None  # a classic (non-Connect) session
        return DataFrame(
            jvm.org.apache.spark.sql.classic.Dataset.ofRows(ss._jsparkSession, logical_plan), ss
        )


Builder = Callable[[BuildContext, StateTable, TableInfo], DataFrame]
_BUILDERS: dict[str, Builder] = {}
_loading = threading.Lock()
_loaded = False


def builds(*roles: str) -> Callable[[Builder], Builder]:
    """Decorator: the function builds the state tables of these roles."""

    def register(fn: Builder) -> Builder:
        for role in roles:
            if role in _BUILDERS:
                raise TypeError(f"two builders for state role {role!r}")
            _BUILDERS[role] = fn
        return fn

    return register


def state_df(ctx: BuildContext, st: StateTable, info: TableInfo) -> DataFrame:
    """The contents of state table ``st`` (its store description ``info``) at the build's
    barrier, by the builder of its role."""
    global _loaded
    if not _loaded:
        with _loading:  # several view jobs of one driver may build at once
            if not _loaded:
                for m in pkgutil.iter_modules(__path__):
                    importlib.import_module(f"{__name__}.{m.name}")
                _loaded = True
    fn = _BUILDERS.get(st.role)
    if fn is None:
        raise TypeError(f"no build for state table {st.name} of role {st.role!r}")
    return fn(ctx, st, info)
