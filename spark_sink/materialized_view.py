"""MaterializedView: a Spark SQL query over store tables, kept as a view table whose every
version is the query's result over one barrier's consistent snapshot of its sources.

    job = (MaterializedView.builder(spark).coordinator("localhost:50051")
           .query("SELECT branch, SUM(balance) AS total FROM accounts GROUP BY branch")
           .target("branch_balance").primary_key("branch").trigger_interval("1 second")
           .build().start())
    job.await_barrier(ts, timeout=30)   # until the view holds a barrier >= ts
    job.stop()

How it runs: a thread of the driver per job (``ViewJob``) asks the coordinator for the barriers
the job is to do and maintains the view barrier by barrier, in order, none skipped. Epoch T of
the job *is* barrier T, so a replay after any crash finds it committed and skips it. Progress
lives in the coordinator only: a job started again, in this process or another, resumes after
its last committed epoch.

Options follow TiFlink's builder: ``drop_old_table`` drops an existing target first;
``force_new_table`` refuses to start on an existing target. Without either, an existing target
is kept if its columns and key match the query's (it may hold rows: the first epoch diffs against
them). Decisions, for the next person:

- ``primary_key`` defaults to the query's first column; a global aggregate (no GROUP BY) without
  one gets a one-row view with a hidden fixed key.
- The job name is the target's name (one writer per table); registering the job refuses a second
  writer and cycles before anything is created.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence
from types import MappingProxyType

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator.connection import ConnectionSettings, as_settings
from coordinator.errors import BarrierNotReached, SecondWriter
from coordinator.jobs import BarrierPlan, JobState
from coordinator.process_clients import client_for
from kvstore.errors import AlreadyExists, InvalidArgument, SchemaMismatch, SnapviewError
from kvstore.schema import parse_ddl
from spark_sink.full_recompute import FULL_RECOMPUTE, FullRecompute
from spark_sink.ivm.catalyst import ConversionFailed
from spark_sink.ivm.executor_delta import executor_reason, view_key_ids
from spark_sink.ivm.plan import Unsupported
from spark_sink.ivm.plan_check import IncrementalPlan
from spark_sink.ivm.plan_check import analyze as analyze_incremental
from spark_sink.ivm.state import ensure as ensure_state_tables
from spark_sink.ivm.strategy import INCREMENTAL, Incremental
from spark_sink.ivm.unique_keys import key_is_unique
from spark_sink.job_liveness import JobReporter
from spark_sink.job_session import prepare_session, register_sources
from spark_sink.partition_writer import direct_info
from spark_sink.query_analysis import mentioned_tables, view_shape
from spark_sink.view_epoch import ViewSpec
from spark_sink.view_progress import ViewProgress

AUTO = "auto"
CHOICES = (AUTO, INCREMENTAL, FULL_RECOMPUTE)

log = logging.getLogger("snapview.view")


def normalized_query(sql: str) -> str:
    """``sql`` with every run of whitespace outside quotes ('...', "...", `...`) made one
    space, and none at the ends: two spellings of the same query compare equal, two queries
    that differ in a string literal do not."""
    out: list[str] = []
    quote = ""
    space = escaped = False
    for ch in sql.strip():
        if quote:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch.isspace():
            space = True
            continue
        if space:
            out.append(" ")
            space = False
        out.append(ch)
        if ch in "'\"`":
            quote = ch
    return "".join(out)


_INTERVAL_UNITS = {
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
}


def interval_seconds(interval: str | float | int) -> float:
    """``interval`` in seconds: a number of seconds, or a number and a unit as Spark's
    triggers spell it ("200 milliseconds", "1 second", "2 minutes"; "interval " before it is
    allowed). Raises InvalidArgument naming the value for anything else or a negative one."""
    if isinstance(interval, int | float) and not isinstance(interval, bool):
        seconds = float(interval)
    else:
        text = str(interval).strip().lower().removeprefix("interval").strip()
        m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([a-z]+)", text)
        if m is None or m.group(2) not in _INTERVAL_UNITS:
            raise InvalidArgument(
                f"trigger_interval {interval!r}: give seconds or a number and a unit "
                f"(milliseconds, seconds, minutes, hours), e.g. '200 milliseconds'"
            )
        seconds = float(m.group(1)) * _INTERVAL_UNITS[m.group(2)]
    if not seconds >= 0:
        raise InvalidArgument(f"trigger_interval {interval!r}: must not be negative")
    return seconds


class MaterializedViewBuilder:
    """Chainable options; ``build()`` validates them and prepares the target table."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._o: dict = {
            "coordinator": None,
            "query": None,
            "target": None,
            "primary_key": None,
            "column_names": None,
            "parallelism": None,
            "trigger_interval": "1 second",
            "drop_old_table": False,
            "force_new_table": False,
            "token": None,
            "strategy": AUTO,
            "lock_ttl_ms": 20_000,
            "job": None,
        }

    def _set(self, key: str, value: object) -> MaterializedViewBuilder:
        self._o[key] = value
        return self

    def connection(self, settings: ConnectionSettings) -> MaterializedViewBuilder:
        """How to reach the server: address, token or token file, TLS CA (default:
        ``ConnectionSettings.from_env()``)."""
        return self._set("coordinator", settings)

    def _conn(self) -> ConnectionSettings:
        return as_settings(self._o["coordinator"])

    def coordinator(self, address: str) -> MaterializedViewBuilder:
        """The server's address: ``connection(settings)`` with only the address changed."""
        return self._set("coordinator", self._conn().with_(address=address))

    def query(self, sql: str) -> MaterializedViewBuilder:
        """Spark SQL over store tables, by name."""
        return self._set("query", sql)

    def target(self, table: str) -> MaterializedViewBuilder:
        return self._set("target", table)

    def primary_key(self, *columns: str | Sequence[str]) -> MaterializedViewBuilder:
        cols = columns[0] if len(columns) == 1 and isinstance(columns[0], list | tuple) else columns
        return self._set("primary_key", [str(c) for c in cols])

    def column_names(self, *names: str | Sequence[str]) -> MaterializedViewBuilder:
        """Rename the query's output columns, in order."""
        cols = names[0] if len(names) == 1 and isinstance(names[0], list | tuple) else names
        return self._set("column_names", [str(c) for c in cols])

    def parallelism(self, n: int) -> MaterializedViewBuilder:
        """Shuffle partitions of the view's query (default: Spark's default parallelism)."""
        return self._set("parallelism", int(n))

    def trigger_interval(self, interval: str | float) -> MaterializedViewBuilder:
        """How often the job asks the coordinator for new barriers when it has none to do
        (default 1 second): seconds, or Spark's spelling ("200 milliseconds"). A job with
        barriers waiting does them one after another without waiting."""
        interval_seconds(interval)  # a bad value is refused here, naming it
        return self._set("trigger_interval", interval)

    def drop_old_table(self, flag: bool = True) -> MaterializedViewBuilder:
        return self._set("drop_old_table", bool(flag))

    def force_new_table(self, flag: bool = True) -> MaterializedViewBuilder:
        return self._set("force_new_table", bool(flag))

    def job(self, name: str) -> MaterializedViewBuilder:
        """The job's name in the coordinator (default: the target's name). Progress is kept
        under it: a restart must use the same name to resume."""
        return self._set("job", name)

    def auth_token(self, token: str) -> MaterializedViewBuilder:
        """The server's shared token: ``connection(settings)`` with only the token changed."""
        return self._set("coordinator", self._conn().with_(token=token))

    def strategy(self, name: str) -> MaterializedViewBuilder:
        """``auto`` (the default): incremental when the query is in the class maintained by
        delta rules, full recompute otherwise (``explain()`` says why). ``incremental``: refuse
        at ``build()`` a query outside that class, naming the construct. ``full_recompute``:
        run the whole query at every barrier where a source changed."""
        return self._set("strategy", name)

    def build(self) -> MaterializedView:
        """Check the options, analyze the query, create (or check) the target table and
        register the job. Raises InvalidArgument for a missing or bad option, SecondWriter or
        TopologyCycle from the registry, SchemaMismatch for an incompatible existing target."""
        o = self._o
        o["coordinator"] = self._conn()  # default: ConnectionSettings.from_env()
        for key in ("query", "target"):
            if not o[key]:
                raise InvalidArgument(f"MaterializedView: option {key!r} is required")
        if o["strategy"] not in CHOICES:
            raise InvalidArgument(
                f"view {o['target']!r}: strategy {o['strategy']!r} is not one of {list(CHOICES)}"
            )
        if o["parallelism"] is not None and o["parallelism"] <= 0:
            raise InvalidArgument(f"view {o['target']!r}: parallelism must be positive")
        return MaterializedView(self._spark, dict(o))


class MaterializedView:
    """A built view: ``start()`` runs it, ``explain()`` says how it is maintained and why."""

    @staticmethod
    def builder(spark: SparkSession) -> MaterializedViewBuilder:
        return MaterializedViewBuilder(spark)

    def __init__(self, spark: SparkSession, options: dict) -> None:
        import spark_sink

        self.options = options
        self.target = options["target"]
        self.job = options["job"] or self.target
        self.coordinator = as_settings(options["coordinator"], options["token"])
        self.token: str | None = None  # in self.coordinator
        spark_sink.register(spark)
        self.spark = spark
        # Its own session: temp views of the sources at each barrier's read ts must not clash
        # with other jobs' (data sources registered on ``spark`` are shared with it).
        self.session = spark.newSession()
        prepare_session(self.session)
        self.session.conf.set(
            "spark.sql.shuffle.partitions",
            str(options["parallelism"] or spark.sparkContext.defaultParallelism),
        )
        self.session.conf.set("spark.sql.session.timeZone", "UTC")
        client = client_for(self.coordinator, self.token)
        # The query runs once here, at one timestamp, to check the key: a reader lease keeps GC
        # off that snapshot however long the check takes (the job's own hold starts when it
        # registers, below).
        ts = client.tso()
        with client.lease(ts, ttl_s=60, holder=f"build of view {self.target}"):
            self.shape, df = self._analyze(client, ts)
            # The analysis reads no data; a key the plan proves unique needs no run of the query.
            self.plan, self.fallback = self._choose_strategy(client)
            self.key_why = (
                self._reattached(client) or self._proven_key(client) or self._check_key(df)
            )
        self.strategy_name = INCREMENTAL if self.plan is not None else FULL_RECOMPUTE
        self._prepare_target(client)
        client.jobs.register_job(
            self.job,
            self.target,
            list(self.shape.sources),
            kind="view",
            query=options["query"],
            strategy=self.strategy_name,
        )
        if self.plan is not None:
            ensure_state_tables(client, list(self.plan.state))

    def _choose_strategy(self, client) -> tuple[IncrementalPlan | None, str]:
        """(the incremental plan, "") or (None, why the view is recomputed in full). A strict
        ``incremental`` view outside the class is refused here, naming the construct."""
        o = self.options
        if o["strategy"] == FULL_RECOMPUTE:
            return None, "[ASKED] strategy full_recompute was chosen"
        infos = {t: client.describe_table(t) for t in self.shape.sources}
        try:
            plan, _ = analyze_incremental(
                self.session,
                o["query"],
                self.target,
                infos,
                o["column_names"],
                self.shape.primary_key,
                self.shape.one_row,
            )
            return plan, ""
        except SnapviewError:
            raise  # the server's answer (or no answer): not a property of the query
        except Exception as e:  # noqa: BLE001 - see below
            # Unsupported names the construct outside the class; any other error is ours (a
            # construct the analysis meant to handle and could not): under auto it is a reason
            # to recompute in full, never a failed build.
            # "[its code] message": the code is stable (plan.REASON_CODES), the message names the
            # construct
            why = (
                f"[{e.code}] {e}"
                if isinstance(e, Unsupported)
                else f"[INTERNAL] an internal error in the incremental analysis: "
                f"{type(e).__name__}: {e}"
            )
            if not isinstance(e, Unsupported) or isinstance(e, ConversionFailed):
                log.warning("view %r: %s", self.target, why, exc_info=e)
            if o["strategy"] == INCREMENTAL:
                raise InvalidArgument(
                    f"view {self.target!r}: strategy incremental: {why} (use strategy auto or "
                    "full_recompute)"
                ) from e
            return None, why

    def _analyze(self, client, ts: int):
        o = self.options
        names = [t.name for t in client.tables()]  # the target too: reading it is a cycle
        candidates = mentioned_tables(o["query"], names)
        register_sources(self.session, self.coordinator, dict.fromkeys(candidates, ts), self.token)
        df = self.session.sql(o["query"])
        if o["column_names"]:
            if len(o["column_names"]) != len(df.columns):
                raise InvalidArgument(
                    f"view {self.target!r}: column_names has {len(o['column_names'])} names "
                    f"for {len(df.columns)} output columns ({', '.join(df.columns)})"
                )
            df = df.toDF(*o["column_names"])
        return view_shape(self.target, df, candidates, o["primary_key"]), df

    def _key_given(self) -> str:
        if self.options["primary_key"]:
            return "given by primary_key"
        return "the default: the query's first column"

    def _proven_key(self, client) -> str:
        """Why the key check is skipped ("" when it is not): the incremental plan proves the
        key unique in the query's result (``spark_sink.ivm.unique_keys``: GROUP BY columns, a
        source's primary key carried through filters, projects and joins on a unique key), so
        the check's run of the whole query could not fail. A plan that proves nothing (a full
        recompute, a key on other columns) is checked by running the query."""
        s = self.shape
        if self.plan is None:
            return ""
        ids = view_key_ids(self.plan.root, list(s.columns), s.primary_key, s.one_row)
        if ids is None:  # a one-row view: no key to check
            return ""
        if not key_is_unique(
            self.plan.root, list(ids), lambda t: client.describe_table(t).user_key
        ):
            return ""
        return f"{self._key_given()}; unique by the query's plan, no check run"

    def _check_key(self, df: DataFrame) -> str:
        """Check that the view's key is unique in the query's result now, before anything is
        created or registered; returns why the key is what it is (for ``explain()``).

        A Spark aggregation finds one duplicate, if any (nothing is collected into the driver but
        that row). It costs one run of the query at build; a key that becomes non-unique later
        still fails that barrier's epoch (nothing written)."""
        shape = self.shape
        if shape.one_row:
            return "a global aggregate without primary_key"
        given = bool(self.options["primary_key"])
        why = self._key_given()
        key = list(shape.primary_key)
        n = "_snapview_key_count"
        dup = (
            df.groupBy(*key).agg(F.count(F.lit(1)).alias(n)).filter(F.col(n) > 1).limit(1).collect()
        )
        if dup:
            example = ", ".join(f"{k}={dup[0][k]!r}" for k in key)
            hint = "set primary_key to columns that identify a row"
            if not given:
                hint = f"the key defaults to the first column; {hint}"
            raise InvalidArgument(
                f"view {self.target!r}: key ({', '.join(key)}) is not unique in the query's "
                f"result: {example} appears {dup[0][n]} times ({hint})"
            )
        return f"{why}; unique in the query's result at build"

    def _reattached(self, client) -> str:
        """Why the key check is skipped ("" when it is not): the view already exists as this
        same job (registered with the same target and, whitespace aside, the same query) and
        its table has the query's columns and key. The check ran at the build that created it,
        and a key that became non-unique since fails that barrier's epoch; a restarted script
        re-attaches without running the whole query again (issue 24, item 12)."""
        o = self.options
        if self.shape.one_row or o["drop_old_table"] or o["force_new_table"]:
            return ""
        job = {j.job: j for j in client.jobs.list_jobs()}.get(self.job)
        if job is None or job.kind != "view" or job.sink != self.target:
            return ""
        if normalized_query(job.query) != normalized_query(o["query"]):
            return ""
        if self._target_mismatch(client) != "":
            return ""
        return (
            f"{'given by primary_key' if o['primary_key'] else 'the default: the first column'}"
            f"; job {self.job} is registered with the same query, key and table: the key check "
            "of its first build stands (not run again)"
        )

    def _target_mismatch(self, client) -> str | None:
        """None: no target table; "": it has the query's columns and key; else how it differs."""
        shape = self.shape
        if self.target not in {t.name for t in client.tables()}:
            return None
        want = client.describe_table(self.target, refresh=True)
        cols = [(c.name, c.type.ddl()) for c in want.table_schema.visible_columns]
        need = [(c.name, c.type.ddl()) for c in parse_ddl(shape.ddl, self.target)]
        pk = want.user_key
        if cols == need and pk == shape.primary_key:
            return ""
        return (
            f"the existing table has columns {cols} and key {list(pk)}, the query produces "
            f"{need} with key {list(shape.primary_key)}"
        )

    def _prepare_target(self, client) -> None:
        o, shape = self.options, self.shape
        existing = {t.name: t for t in client.tables()}.get(self.target)
        if existing is not None and o["drop_old_table"]:
            writer = {t.table: t.writer for t in client.topology().tables}.get(self.target)
            if writer and writer != self.job:
                raise SecondWriter(
                    f"table {self.target!r} is written by job {writer!r}; drop_old_table "
                    "will not drop another job's table"
                )
            # The drop unregisters the writer and deletes its epochs in the same write, so the
            # view built next starts clean (coordinator.server.drops).
            client.drop_table(self.target)
            existing = None
        if existing is not None and o["force_new_table"]:
            raise AlreadyExists(
                f"view {self.target!r}: the target table exists and force_new_table is set "
                "(set drop_old_table to replace it)"
            )
        if existing is None:
            client.create_table(self.target, shape.ddl, list(shape.primary_key), kind="view")
            return
        differs = self._target_mismatch(client)
        if differs:
            raise SchemaMismatch(
                f"view {self.target!r}: {differs} (set drop_old_table to replace it)"
            )

    def explain(self) -> str:
        """Which maintenance strategy the view uses and why; for an incremental view its delta
        plan (which input is read by which key, the state tables and their keys), for a full
        recompute the exact reason."""
        s = self.shape
        key = "a hidden fixed key (one-row view)" if s.one_row else ", ".join(s.primary_key)
        lines = [
            f"view {self.target} (job {self.job})",
            f"  query:    {self.options['query']}",
            f"  sources:  {', '.join(s.sources)}",
            f"  key:      {key} ({self.key_why})",
            f"  strategy: {self.strategy_name} (asked: {self.options['strategy']})",
        ]
        if self.plan is None:
            lines += [
                f"  why:      {self.fallback}",
                "  each barrier T: read the sources at their read ts for T, run the query, diff "
                "by key against the view's previous version, write the difference as epoch T",
            ]
            return "\n".join(lines)
        from spark_sink.ivm.cost import rule

        choice = (
            rule()
            if self.options["strategy"] == "auto"
            else "incremental: every barrier after the first is a delta, whatever its size"
        )
        lines += [
            "  why:      the query is in the class maintained by delta rules",
            f"  choice:   {choice}",
            "  first barrier: build the view and its state tables from the snapshot (Spark, "
            "written from the executors)",
            "  each later barrier T: the view's change from the sources' changes since the "
            "previous barrier and keyed reads only:",
        ]
        lines += [f"    - {line}" for line in self.plan.describe()]
        from spark_sink.ivm.delta import operator_tree

        lines += engine_lines(
            self.plan, view_key_ids(self.plan.root, list(s.columns), s.primary_key, s.one_row)
        )
        lines.append("  operators (spark_sink.ivm.ops), the root first:")
        lines += [f"    {line}" for line in operator_tree(self.plan.root)]
        return "\n".join(lines)

    def maintain_available(self, until: int = 0, timeout: float = 60.0) -> int:
        """Maintain the view through every barrier ready now, in this thread (what one trigger
        of ``start()``'s job does, like Spark's ``availableNow``); with ``until``, keep going
        until the view holds a barrier >= ``until`` (TimeoutError after ``timeout`` s). Returns
        the barriers processed. Do not run it beside a started job of the same view."""
        client = client_for(self.coordinator, self.token)
        if getattr(self, "_strategy", None) is None:
            self._strategy = self._make_strategy(client)
        deadline = time.monotonic() + timeout
        done = 0
        while True:
            plan = client.jobs.plan_barriers(self.job, limit=1)
            after = plan.last_committed
            # a job started from this view may have gone on meanwhile
            self._strategy.follow(after)
            if until and after >= until:
                return done
            plans = client.jobs.plan_barriers(self.job, limit=256, after=after).barriers
            for p in plans:
                self._strategy.maintain(p.barrier, barrier_reads(p))
                done += 1
            if not until:
                return done
            if not plans:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"view {self.target!r}: no barrier >= {until} within {timeout}s"
                    )
                time.sleep(0.02)

    def _make_strategy(self, client) -> FullRecompute | Incremental:
        o = self.options
        spec = ViewSpec(
            self.coordinator,
            self.token,
            self.job,
            self.target,
            o["query"],
            tuple(o["column_names"] or ()),
            self.shape.one_row,
            o["lock_ttl_ms"],
        )
        if self.plan is not None:
            return Incremental(
                spec, self.session, self.plan, direct_info(client), self.options["strategy"]
            )
        return FullRecompute(spec, self.session, direct_info(client))

    def start(self) -> ViewJob:
        """Start maintaining the view; returns the running job's handle."""
        return ViewJob(self, self._make_strategy(client_for(self.coordinator, self.token)))


# A job asks the coordinator for at most this many barriers at a time, and waits at least
# IDLE_POLL_S between two asks that found none.
BARRIERS_PER_CALL = 64
IDLE_POLL_S = 0.01


def barrier_reads(plan: BarrierPlan) -> dict[str, tuple[int, bool]]:
    """What a strategy's ``maintain`` takes of a barrier's plan: {source: (read ts, whether it
    changed since the barrier before)}."""
    return {r.table: (r.read_ts, bool(r.changed)) for r in plan.reads}


# A job retries a transient failure (``is_transient``) this many times in a row, waiting
# FIRST_RETRY_S, then twice as long each time up to MAX_RETRY_S; a committed barrier resets the
# count. ``snapview views run`` restarts a job that still fails, without a bound.
TRANSIENT_RETRIES = 5
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 30.0

# Words of a Spark or Py4J error that say the failure is the machine's, not the query's: a
# Python worker that did not start or connect in time, a lost executor or connection, a task
# that failed for one of those. Compared in lower case.
_TRANSIENT_TEXT = (
    "python worker failed to connect back",
    "python worker exited unexpectedly",
    "failed to connect to",
    "connection reset",
    "connection refused",
    "broken pipe",
    "executor lost",
    "executorlostfailure",
    "socket timeout",
    "sockettimeoutexception",
    "timed out waiting",
    "deadline exceeded",
    "statuscode.unavailable",
    "statuscode.deadline_exceeded",
)
# ... and words that make it permanent whatever else it says: the query or a table is wrong,
# or the job may not do what it does. Checked first.
_PERMANENT_TEXT = (
    "analysisexception",
    "tablenotfound",
    "table_or_view_not_found",
    "schemamismatch",
    "invalidargument",
    "permissiondenied",
    "permission_denied",
    "unauthenticated",
    "evalerror",
)
_TRANSIENT_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "CANCELLED")


def is_transient(error: BaseException | None) -> bool:
    """Whether a view job that stopped with ``error`` may succeed if it simply runs again.

    Transient: the server unreachable or slow (UNAVAILABLE, DEADLINE_EXCEEDED after the
    client's own retries), a call cancelled under it (CANCELLED: the 30-minute lifecycle walk
    saw a view job's ChangeBoundary cancelled; the epoch wrote nothing it keeps and is redone),
    a Percolator conflict (ABORTED: the epoch is redone), a Py4J or Spark
    failure of the machine (a Python worker that failed to connect back, a lost executor or
    connection). Permanent: every other snapview error (a dropped table, an invalid query or
    value, a refused token), Spark's analysis errors, and any other Python error (a bug: running
    it again fails again)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, SnapviewError):
            return str(getattr(error, "code", "")) in _TRANSIENT_CODES
        if isinstance(error, TimeoutError | ConnectionError):
            return True
        module = type(error).__module__
        if module.startswith(("py4j", "pyspark")) or type(error).__name__.endswith("RpcError"):
            text = f"{type(error).__name__}: {error}".lower()
            if any(w in text for w in _PERMANENT_TEXT):
                return False
            return any(w in text for w in _TRANSIENT_TEXT)
        error = error.__cause__ or error.__context__
    return False


class ViewJob:
    """A running MaterializedView: ``stop()``, ``await_barrier(ts, timeout)``, ``progress()``.

    The job is a thread of this driver (``view-job-<job>``) that asks the coordinator for the
    barriers it is to do (``jobs.plan_barriers``, after its last committed epoch), hands each, in
    order, to the strategy, and waits ``trigger_interval`` when there is none (a job that never
    committed begins at the first barrier after ``start()``, so the view's first version holds
    every commit made before it); the strategy runs
    its Spark jobs (builds, recomputes, deltas on the executors) from that thread, in a job
    group of its own. Decision, for the next person: it was a Structured Streaming query over
    ``format("snapview_barriers")`` with a ``foreachBatch``, which carried nothing the
    coordinator does not hold (progress lives there; the checkpoint was only a cache) and cost
    an idle view a third of a core (a micro-batch per barrier: offset and commit logs written,
    a Spark job to collect one row) and a Python source process of its own (3-4 s to start);
    design.md §6.3.

    A transient failure (``is_transient``) does not end it: the job logs it (logger
    ``snapview.view``) and goes on after a back-off with a fresh strategy, up to
    TRANSIENT_RETRIES times in a row; it resumes at the coordinator's record, so no barrier is
    skipped or done twice. A permanent failure, or one more transient failure than that, stops
    the job; its liveness then shows FAILED with the error."""

    def __init__(self, view: MaterializedView, strategy: FullRecompute | Incremental) -> None:
        self.view = view
        self.strategy = strategy
        self.interval_s = interval_seconds(view.options["trigger_interval"])
        self.error: BaseException | None = None
        self._stopping = False
        self._stop_event = threading.Event()
        self._restart_lock = threading.Lock()  # stop() and a restart never interleave
        self.retries = 0  # transient failures retried since the last committed barrier
        self.restarts = 0  # times the job went on after a transient failure, in all
        self._group = f"snapview-view-{view.job}-{id(self)}"  # its Spark jobs, to cancel
        # A job that never committed begins at a barrier after this: its first version holds
        # every commit made before start() (_follow)
        self._started_ts = client_for(view.coordinator, view.token).tso()
        self._thread = threading.Thread(target=self._run, name=f"view-job-{view.job}", daemon=True)
        self._reporter = JobReporter(
            client_for(view.coordinator, view.token),
            view.job,
            is_active=self.is_active,
            error=self.failure_text,
            on_unregistered=self._on_dropped,
        )
        self._thread.start()

    def is_active(self) -> bool:
        """Whether the job runs: it maintains the view or waits for barriers, or it is waiting
        to go on after a transient failure."""
        return self._thread.is_alive() and not self._stopping

    def _run(self) -> None:
        """Follow the barriers; after a transient failure go on with a fresh strategy."""
        self.view.spark.sparkContext.setJobGroup(
            self._group, f"snapview view {self.view.job}", interruptOnCancel=True
        )
        done_before = self.strategy.progress.barriers
        while not self._stopping:
            try:
                self._follow()
                return  # stopped
            except Exception as e:  # noqa: BLE001 - classified below
                if self._stopping:
                    return
                self.error = e
            if self.strategy.progress.barriers > done_before:
                self.retries = 0  # it made progress since the last failure
            err = self.error
            text = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            if not is_transient(err):
                log.error("view %r: job stopped by a permanent failure: %s", self.view.job, text)
                return
            if self.retries >= TRANSIENT_RETRIES:
                log.error(
                    "view %r: job stopped: %d transient failures in a row, the last: %s",
                    self.view.job,
                    self.retries + 1,
                    text,
                )
                return
            wait = min(FIRST_RETRY_S * 2**self.retries, MAX_RETRY_S)
            self.retries += 1
            log.warning(
                "view %r: transient failure (%s); going on in %.1f s (retry %d of %d)",
                self.view.job,
                text,
                wait,
                self.retries,
                TRANSIENT_RETRIES,
            )
            if self._stop_event.wait(wait):
                return
            done_before = self.strategy.progress.barriers
            with self._restart_lock:
                if self._stopping:
                    return
                try:
                    # A fresh strategy, as a new start makes: nothing an interrupted epoch left
                    # in memory carries over (its counters do).
                    client = client_for(self.view.coordinator, self.view.token)
                    fresh = self.view._make_strategy(client)
                    fresh.progress = self.strategy.progress
                    self.strategy = fresh
                    self.error = None
                except Exception as e:  # noqa: BLE001 - one more failure, classified above
                    log.warning("view %r: cannot start again: %s", self.view.job, e)
                    self.error = e
                    continue
                self.restarts += 1

    def _follow(self) -> None:
        """Maintain every barrier after the job's last committed epoch, in order, until
        stopped; raises what a barrier or the coordinator raised."""
        client = client_for(self.view.coordinator, self.view.token)
        after = client.jobs.plan_barriers(self.view.job, limit=1).last_committed
        while not self._stopping:
            plans = client.jobs.plan_barriers(
                self.view.job, limit=BARRIERS_PER_CALL, after=after
            ).barriers
            if not after:  # nothing committed yet: no barrier from before start() (no skip:
                # the job's history begins at its first barrier)
                plans = [p for p in plans if p.barrier >= self._started_ts]
            for plan in plans:
                if self._stopping:
                    return  # the rest is redone from the coordinator's record
                try:
                    self.strategy.maintain(plan.barrier, barrier_reads(plan))
                except Exception:
                    log.exception("view %r: barrier %d failed", self.view.target, plan.barrier)
                    raise
                after = plan.barrier
            if not plans:
                # at least IDLE_POLL_S: a "0 seconds" interval polls, it does not spin
                self._stop_event.wait(max(self.interval_s, IDLE_POLL_S))

    def failure_text(self) -> str:
        """Why the job stopped with an error, in one line ("" while it runs or after a clean
        stop)."""
        if self.error is not None:
            return f"{type(self.error).__name__}: {self.error}"
        return ""

    def _on_dropped(self) -> None:
        """The coordinator unregistered the job (its table was dropped): stop maintaining it,
        after the barrier in progress."""
        self._stopping = True
        self._stop_event.set()

    def _halt(self) -> None:
        """For crash tests: stop as a killed driver does, with no final report; a Spark job in
        progress is cancelled and the epoch it was part of is left as it is."""
        self._reporter._done.set()
        self._stopping = True
        self._stop_event.set()
        self.view.spark.sparkContext.cancelJobGroup(self._group)
        self._thread.join(30)

    def progress(self) -> ViewProgress:
        """What the job did since it started, and where the coordinator says it is (a frozen
        ViewProgress: fields, ``p["name"]`` and a readable ``str(p)``)."""
        client = client_for(self.view.coordinator, self.view.token)
        try:
            last = client.jobs.get_epoch(self.view.job).epoch
        except SnapviewError:
            last = 0
        p = self.strategy.progress
        return ViewProgress(
            job=self.view.job,
            target=self.view.target,
            strategy=self.strategy.name,
            active=self.is_active(),
            committed_barrier=last,
            first_barrier=p.first_barrier,
            last_barrier=p.last_barrier,
            barriers=p.barriers,
            recomputed=p.recomputed,
            unchanged=p.unchanged,
            skipped=p.skipped,
            mutations=p.mutations,
            last_epoch_s=p.last_epoch_s,
            last_steps=MappingProxyType(dict(p.last_steps)),
            last_strategy=p.last_strategy,
            last_changes=p.last_changes,
            last_lookups=p.last_lookups,
            last_mutations=p.last_mutations,
            last_why=p.last_why,
        )

    def await_barrier(self, ts: int, timeout: float = 30.0) -> int:
        """Block until the view holds a barrier >= ``ts``; returns that barrier. Raises
        TimeoutError, or the job's own error if it stopped."""
        client = client_for(self.view.coordinator, self.view.token)
        deadline = time.monotonic() + timeout
        while True:
            try:
                b = client.snapshot([self.view.target]).barrier
                if b >= ts:
                    return b
            except BarrierNotReached:
                pass
            if not self.is_active():
                if self.error is not None:
                    raise self.error
                raise RuntimeError(f"view job {self.view.job!r} stopped")
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"view {self.view.target!r} did not reach barrier {ts} in {timeout}s "
                    f"(progress: {self.strategy.progress.as_dict()})"
                )
            time.sleep(0.02)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop after the barrier in progress; returns once the job's thread has ended and its
        last state (STOPPED, or FAILED with its error) is reported. A barrier still running
        after ``timeout`` seconds has its Spark jobs cancelled: the epoch is left unfinished and
        is redone by the next start (the coordinator never commits half of it)."""
        with self._restart_lock:  # no restart begins after this
            self._stopping = True  # no barrier starts from now on
        self._stop_event.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning(
                "view %r: the barrier in progress did not end in %.0f s; cancelling its Spark jobs",
                self.view.job,
                timeout,
            )
            self.view.spark.sparkContext.cancelJobGroup(self._group)
            self._thread.join(30)
        err = self.failure_text()
        self._reporter.close(JobState.FAILED if err else JobState.STOPPED, err)

    def __enter__(self) -> ViewJob:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def engine_lines(plan: IncrementalPlan, key_ids: tuple[int, ...] | None) -> list[str]:
    """``explain()``'s account of how a delta epoch computes: the view's tree over Arrow
    (the columnar path) or by the row rules and why, and the same for each aggregate's fold;
    and whether a large change's delta may run on the executors (``key_ids``: the root's
    columns that are the view's key, None for a one-row view). What an epoch hands back to the
    row rules at run time, and where it ran, is ``progress()``'s and the epoch record's
    ``path``."""
    from spark_sink.ivm.aggregate_columnar import columnar_reason as aggregate_reason
    from spark_sink.ivm.delta import columnar_reason

    why = columnar_reason(plan.root)
    if why is None:
        lines = ["  engine:   columnar: the view's change is computed over Arrow"]
    else:
        lines = [f"  engine:   the view's tree by the row rules ({why})"]
    for i, agg in enumerate(plan.aggs):
        how = aggregate_reason(agg)
        fold = "folded over Arrow" if how is None else f"folded by the row rules ({how})"
        lines.append(f"    aggregate {i}: {fold}")
    on = executor_reason(plan, key_ids)
    if on is None:
        lines.append(
            "  executors: a large change's delta runs as a Spark job on the executors when "
            "estimated faster (SNAPVIEW_DELTA_ON)"
        )
    else:
        lines.append(f"  executors: deltas stay on the driver ({on})")
    return lines
