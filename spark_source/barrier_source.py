"""``format("snapview_barriers")``: a stream of the barriers one view job is to process.

    spark.readStream.format("snapview_barriers").option("coordinator", addr)
         .option("job", "branch_balance").load()

Each row is one barrier (``barrier`` BIGINT) with every source's read ts there and whether it
changed since the barrier before (``reads``, JSON ``{table: [read_ts, changed]}``). Offsets are
barriers: ``{"barrier": T}``. The first offset comes from the coordinator (the job's last
committed epoch), so a job restarted without its Spark checkpoint resumes where the coordinator
says; a replayed batch carries barriers the job already committed, which it skips.

The stream is read on the driver (a SimpleDataSourceStreamReader): a batch is a handful of rows,
and planning it is one coordinator call. ``streamReader`` hands Spark pyspark's own wrapper of it
with a ``stop()`` that ends the source process quietly when Spark hangs up on it
(``spark_source.hangup``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper
from pyspark.sql.types import LongType, StringType, StructField, StructType

from coordinator.client import Client
from coordinator.connection import ConnectionSettings
from coordinator.jobs import BarrierPlan
from coordinator.process_clients import client_for
from kvstore.errors import InvalidArgument
from spark_source.hangup import end_if_spark_hung_up

SCHEMA = StructType(
    [
        StructField("barrier", LongType(), False),
        StructField("reads", StringType(), False),
        StructField("wall_ms", LongType(), False),
    ]
)
MAX_BARRIERS_PER_BATCH = 64


def plan_rows(plans: Iterable[BarrierPlan]) -> list[tuple[int, str, int]]:
    return [
        (
            p.barrier,
            json.dumps({r.table: [r.read_ts, r.changed] for r in p.reads}),
            p.wall_ms,
        )
        for p in plans
    ]


class BarrierStreamReader(SimpleDataSourceStreamReader):
    def __init__(
        self, coordinator: str | ConnectionSettings, job: str, token: str | None, limit: int
    ) -> None:
        self.coordinator, self.job, self.token, self.limit = coordinator, job, token, limit

    def _client(self) -> Client:
        return client_for(self.coordinator, self.token)

    def initialOffset(self) -> dict:
        return {"barrier": self._client().jobs.plan_barriers(self.job, limit=1).last_committed}

    def read(self, start: dict) -> tuple[Iterator[tuple[int, str, int]], dict]:
        """The ready barriers after ``start`` (for a job that never committed: the newest one
        every source has), and the offset after them."""
        after = int(start["barrier"])
        plans = self._client().jobs.plan_barriers(self.job, limit=self.limit, after=after).barriers
        if not plans:
            return iter([]), start
        return iter(plan_rows(plans)), {"barrier": plans[-1].barrier}

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple[int, str, int]]:
        """The same barriers again (a replayed batch): those in (start, end]."""
        after, upto = int(start["barrier"]), int(end["barrier"])
        if upto <= after:
            return iter([])
        plans = self._client().jobs.plan_barriers(self.job, limit=1 << 16, after=after, upto=upto)
        return iter(plan_rows(plans.barriers))

    def commit(self, end: dict) -> None:
        pass  # progress lives in the coordinator (the job's committed epochs)


class QuietBarrierStream(_SimpleStreamReaderWrapper):
    """pyspark's wrapper of a simple stream reader (the private class its stream source runner
    tests for with isinstance, so the prefetch-and-cache protocol stays Spark's own), with a
    ``stop()``, which the wrapper lacks: see ``spark_source.hangup``."""

    def stop(self) -> None:
        end_if_spark_hung_up()


class BarrierDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "snapview_barriers"

    def schema(self) -> StructType:
        return SCHEMA

    def simpleStreamReader(self, schema: StructType) -> BarrierStreamReader:
        o = {str(k).lower(): v for k, v in dict(self.options).items()}
        job = o.get("job")
        if not job:
            raise InvalidArgument("format('snapview_barriers') needs option job")
        conn = ConnectionSettings.from_env(  # the same connection options as format("snapview")
            address=o.get("address") or o.get("coordinator") or None,
            token=o.get("token") or o.get("authtoken") or None,
            token_file=o.get("tokenfile") or None,
            tls_ca=o.get("tlsca") or None,
        )
        limit = int(self.options.get("maxBarriersPerTrigger", MAX_BARRIERS_PER_BATCH))
        if limit <= 0:
            raise InvalidArgument(f"job {job!r}: maxBarriersPerTrigger must be positive")
        return BarrierStreamReader(conn, job, None, limit)

    def streamReader(self, schema: StructType) -> QuietBarrierStream:
        return QuietBarrierStream(self.simpleStreamReader(schema))
