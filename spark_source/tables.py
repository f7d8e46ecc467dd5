"""``register_tables``: every store table and view readable by name in a session's Spark SQL.

    import spark_source
    spark_source.register_tables(spark, "localhost:50051", consistent=True)
    spark.sql("SELECT a.branch, SUM(a.balance), b.total FROM accounts a "
              "JOIN branch_balance b USING (branch) GROUP BY a.branch, b.total").show()

Each name becomes a temporary view of the session over ``format("snapview")``. Decisions:

- ``consistent=False`` (the default): each table is read as of the first query that reads it
  after the call, and later queries see that state too: a temporary view keeps its loaded
  DataFrame, whose read Spark 4.3 plans once (docs/design.md §6.1). Two tables may come from
  different moments; calling ``register_tables`` again reads newer ones.
- ``consistent=True``: every name reads at one barrier, the newest that all of them have (the
  coordinator's consistent snapshot, ``client.snapshot(names)``): a root table at the barrier, a
  view at its commit for it. The temp views are pinned there, so a whole notebook reads that one
  state, repeatably, until ``register_tables`` is called again. A view that has no version at any
  common barrier yet (it was just created) raises ``BarrierNotReached``; ``wait_s`` waits.
- Names that already exist as temporary views are replaced (calling it again refreshes them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from pyspark.sql import SparkSession

from coordinator.process_clients import client_for
from kvstore.table_info import STATE
from spark_source.spark_types import table_struct


@dataclass(frozen=True)
class RegisteredTables:
    """What ``register_tables`` registered: the names, and for ``consistent=True`` the barrier
    and each name's read ts there (``read_ts`` is empty, ``barrier`` 0, for latest reads)."""

    names: tuple[str, ...]
    barrier: int
    read_ts: Mapping[str, int]


def register_tables(
    spark: SparkSession,
    coordinator: str,
    consistent: bool = False,
    *,
    tables: Sequence[str] | None = None,
    auth_token: str | None = None,
    wait_s: float = 0.0,
) -> RegisteredTables:
    """Register every store table and view (or only ``tables``) as a temporary view of
    ``spark`` under its own name; see the module docstring for ``consistent``. Views' state
    tables (kind ``state``, internal to incremental maintenance) are left out unless named."""
    import spark_source

    spark_source.register(spark)
    client = client_for(coordinator, auth_token)
    names = (
        list(tables)
        if tables is not None
        else sorted(t.name for t in client.tables() if t.kind != STATE)
    )
    reads: dict[str, int] = {}
    barrier = 0
    if consistent and names:
        snap = client.snapshot(names, wait_s=wait_s)
        barrier, reads = snap.barrier, {n: snap.read_ts(n) for n in names}
    for name in names:
        # With the schema given, Spark does not ask the data source for it (a Python round trip).
        r = spark.read.format("snapview").schema(table_struct(client.describe_table(name)))
        r = r.option("coordinator", coordinator).option("table", name)
        if name in reads:
            r = r.option("at", str(reads[name]))
        if auth_token:
            r = r.option("authToken", auth_token)
        r.load().createOrReplaceTempView(name)
    return RegisteredTables(tuple(names), barrier, MappingProxyType(reads))
