"""A view job's own Spark session: the snapview source registered under a name of its own
(Spark 4.3 cannot look up a source name cloned into ``newSession()``), and the store's tables
registered by name in a session's SQL as of their read ts."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import SparkSession

from coordinator.connection import ConnectionSettings, as_settings
from coordinator.process_clients import client_for
from spark_source.datasource import SnapviewDataSource
from spark_source.spark_types import table_struct


class JobSessionSource(SnapviewDataSource):
    """``format("snapview")`` under a name of its own, for a view job's private session.

    Spark 4.3 clones a session's data sources into ``newSession()`` in a state where the cloned
    names can neither be looked up nor registered again; a name registered after the clone
    works, so each job session registers this one."""

    @classmethod
    def name(cls) -> str:
        return "snapview_job_session"


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
