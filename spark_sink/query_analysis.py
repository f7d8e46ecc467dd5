"""What a view's SQL query reads and produces, found by letting Spark analyze it.

The store's tables are registered as temporary views in the job's own Spark session, so Spark
resolves the query exactly as it will run it; the analyzed plan then names every temp view used
(subqueries included), and its output schema becomes the view table's schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from coordinator.client import Client
from coordinator.connection import ConnectionSettings, as_settings
from coordinator.process_clients import client_for
from kvstore.errors import InvalidArgument, SchemaMismatch
from kvstore.mvcc.keys import table_prefix
from spark_source.barrier_source import BarrierDataSource
from spark_source.datasource import SnapviewDataSource
from spark_source.spark_types import table_struct

_VIEW_REF = re.compile(r"View \(`([^`]+)`")
# Plan nodes that keep "one row in, at most one row out" above a global aggregate.
_PASS_THROUGH = {"Project", "Filter", "SubqueryAlias", "Sort", "Limit", "GlobalLimit", "LocalLimit"}


class JobSessionSource(SnapviewDataSource):
    """``format("snapview")`` under a name of its own, for a view job's private session.

    Spark 4.3 clones a session's data sources into ``newSession()`` in a state where the cloned
    names can neither be looked up nor registered again; a name registered after the clone
    works, so each job session registers this one."""

    @classmethod
    def name(cls) -> str:
        return "snapview_job_session"


class JobBarrierSource(BarrierDataSource):
    """``format("snapview_barriers")`` under a name of its own, for a view job's stream session
    (see JobSessionSource)."""

    @classmethod
    def name(cls) -> str:
        return "snapview_job_barriers"


def stream_session(spark: SparkSession) -> SparkSession:
    """A session of its own for a view job's barrier stream: adaptive query execution off
    (Structured Streaming turns it off anyway, warning each time a stream starts) and the
    barrier source registered under JobBarrierSource's name."""
    from spark_source import register_source

    session = spark.newSession()
    session.conf.set("spark.sql.adaptive.enabled", "false")
    register_source(session, JobBarrierSource)
    return session


_SESSION_SOURCES: dict[str, str] = {}  # session UUID -> the name its job source has there


def prepare_session(session: SparkSession) -> None:
    """Ready a job's own session: filter pushdown on, and the snapview source registered under a
    name no session has had before (``session_source``). A fixed name breaks once any session
    registered it: Spark 4.3 then hands it to every later ``newSession()`` in a state where it
    can neither be looked up nor registered again."""
    from spark_source import register_source

    session.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    uuid = str(session._jsparkSession.sessionUUID())
    if uuid in _SESSION_SOURCES:
        return
    name = f"{JobSessionSource.name()}_{len(_SESSION_SOURCES) + 1}"
    # qualname not found in this module: cloudpickle ships the class by value to the workers
    cls = type(
        f"JobSessionSource_{len(_SESSION_SOURCES) + 1}",
        (JobSessionSource,),
        {"name": classmethod(lambda c, n=name: n)},
    )
    register_source(session, cls)
    _SESSION_SOURCES[uuid] = name


def session_source(session: SparkSession) -> str:
    """The name ``format()`` takes for the snapview source in a session ``prepare_session``
    readied."""
    return _SESSION_SOURCES[str(session._jsparkSession.sessionUUID())]


def mentioned_tables(query: str, names: list[str]) -> list[str]:
    """Store tables whose name appears as a word in ``query`` (a superset of what it reads;
    Spark's analysis narrows it down)."""
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    return [n for n in names if n.lower() in words]


def read_small(client: Client, table: str, ts: int, limit: int) -> pa.Table | None:
    """``table`` as of ``ts`` if it has at most ``limit`` rows, else None (reads <= limit+1)."""
    info = client.describe_table(table)
    end = table_prefix(info.id + 1)
    chunks = client.with_lock_wait(
        lambda: list(client.store.scan(info.prefix, end, ts, limit=limit + 1))
    )
    if sum(len(k) for k, _ in chunks) > limit:
        return None
    batches = [info.row_codec.decode_arrow(v) for _, v in chunks if v]
    return pa.Table.from_batches(batches, schema=info.table_schema.arrow_schema())


def register_sources(
    session: SparkSession,
    coordinator: str | ConnectionSettings,
    reads: dict[str, int],
    token: str | None = None,
    local: dict[str, pa.Table] | None = None,
) -> None:
    """Make each table readable by name in ``session``'s SQL, as of its read ts.

    Tables in ``local`` (already read on the driver, at the same read ts) become local
    relations: the query then runs without a Python scan task, which for small inputs costs more
    than the query. The others are scanned by executors through the data source."""
    client = client_for(coordinator, token)
    local = local or {}
    for table, ts in reads.items():
        if table in local:
            info = client.describe_table(table)
            session.createDataFrame(
                local[table], schema=table_struct(info)
            ).createOrReplaceTempView(table)
            continue
        # With the schema given, Spark skips asking the data source for it (a Python round trip).
        schema = table_struct(client.describe_table(table))
        r = session.read.format(session_source(session)).schema(schema)
        r = r.options(**as_settings(coordinator, token).spark_options())
        r = r.option("table", table).option("at", str(ts))
        r.load().createOrReplaceTempView(table)


def _analyzed(df: DataFrame):
    return df._jdf.queryExecution().analyzed()


def source_tables(df: DataFrame, candidates: list[str]) -> list[str]:
    """The candidate tables the analyzed query reads (in the order first seen)."""
    used = _VIEW_REF.findall(_analyzed(df).toString())
    lower = {c.lower(): c for c in candidates}
    out = []
    for name in used:
        c = lower.get(name.lower())
        if c is not None and c not in out:
            out.append(c)
    return out


_MULTIPLYING = {"Join", "Generate", "Expand"}


def rows_bounded_by_inputs(df: DataFrame) -> bool:
    """True if the query's optimized plan has no node that can make more rows than it reads (a
    join, an explode, grouping sets): its result is then no larger than its sources."""
    stack = [df._jdf.queryExecution().optimizedPlan()]
    while stack:
        node = stack.pop()
        if node.getClass().getSimpleName() in _MULTIPLYING:
            return False
        children = node.children()
        stack += [children.apply(i) for i in range(children.size())]
    return True


def is_global_aggregate(df: DataFrame) -> bool:
    """True if the query is an aggregate without GROUP BY (exactly one row, no natural key)."""
    node = _analyzed(df)
    while True:
        kind = node.getClass().getSimpleName()
        if kind == "Aggregate":
            return node.groupingExpressions().isEmpty()
        if kind not in _PASS_THROUGH or node.children().size() != 1:
            return False
        node = node.children().head()


def _ddl_type(view: str, name: str, t: T.DataType) -> str:
    if isinstance(t, T.LongType):
        return "BIGINT"
    if isinstance(t, T.IntegerType | T.ShortType | T.ByteType):
        return "INT"
    if isinstance(t, T.DoubleType | T.FloatType):
        return "DOUBLE"
    if isinstance(t, T.DecimalType):
        return f"DECIMAL({t.precision},{t.scale})"
    if isinstance(t, T.TimestampType | T.TimestampNTZType):
        return "TIMESTAMP"
    for cls, ddl in (
        (T.BooleanType, "BOOLEAN"),
        (T.StringType, "STRING"),
        (T.DateType, "DATE"),
        (T.BinaryType, "BINARY"),
    ):
        if isinstance(t, cls):
            return ddl
    raise SchemaMismatch(
        f"view {view!r} column {name!r}: Spark type {t.simpleString()} has no snapview "
        "equivalent (cast it to BIGINT, INT, DOUBLE, DECIMAL, BOOLEAN, STRING, DATE, "
        "TIMESTAMP or BINARY in the query)"
    )


@dataclass(frozen=True)
class ViewShape:
    """The view table a query produces."""

    ddl: str
    columns: tuple[str, ...]
    primary_key: tuple[str, ...]  # () for a one-row view (a global aggregate)
    sources: tuple[str, ...]
    one_row: bool


def view_shape(
    view: str,
    df: DataFrame,
    candidates: list[str],
    primary_key: list[str] | None,
) -> ViewShape:
    """Schema, key and sources of the view ``view`` defined by ``df``.

    The key is ``primary_key`` if given, else the first column; a global aggregate without an
    explicit key becomes a one-row view (hidden fixed key)."""
    fields = df.schema.fields
    names = [f.name for f in fields]
    if len(set(n.lower() for n in names)) != len(names):
        raise SchemaMismatch(
            f"view {view!r}: the query's output columns {names} are not unique; name them "
            "(AS ...) or set column_names"
        )
    for n in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n):
            raise SchemaMismatch(
                f"view {view!r}: output column {n!r} is not a plain identifier; alias it "
                "(AS name) or set column_names"
            )
    ddl = ", ".join(f"{f.name} {_ddl_type(view, f.name, f.dataType)}" for f in fields)
    one_row = False
    if primary_key:
        for k in primary_key:
            if k not in names:
                raise InvalidArgument(
                    f"view {view!r}: primary key column {k!r} is not an output column of the "
                    f"query ({', '.join(names)})"
                )
        pk = tuple(primary_key)
    elif is_global_aggregate(df):
        pk, one_row = (), True
    else:
        pk = (names[0],)
    sources = source_tables(df, candidates)
    if not sources:
        raise InvalidArgument(f"view {view!r}: the query reads no snapview table")
    return ViewShape(ddl, tuple(names), pk, tuple(sources), one_row)
