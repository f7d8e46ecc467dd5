"""MaterializedView against a real server and Spark: the bank invariant with three views under
concurrent transfers, crashes of the job and of the server, refused topologies, and a restart
without the Spark checkpoint."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest

import coordinator
from coordinator.errors import SecondWriter, TopologyCycle
from coordinator.jobs import EpochState
from snapview.demos.bank import (
    create_accounts,
    transfer,
)
from spark_sink import EpochWriter, MaterializedView
from tests.conftest import client_fixture, serve, server_fixture, wait_for

BRANCH_SQL = "SELECT branch, SUM(balance) AS total FROM {src} GROUP BY branch"


def branch_view(spark, address: str, src: str, target: str):
    """A builder for the BRANCH_SQL view of ``src`` into ``target`` (key branch, 100 ms trigger)."""
    return (
        MaterializedView.builder(spark)
        .coordinator(address)
        .query(BRANCH_SQL.format(src=src))
        .target(target)
        .primary_key("branch")
        .trigger_interval("100 milliseconds")
    )


def issued_barriers(c, job: str, first: int, last: int) -> list[int]:
    """Every barrier issued in [first, last] (all ready: the sources are idle by now)."""
    plans = c.jobs.plan_barriers(job, after=first - 1, upto=last, limit=1 << 20).barriers
    return [p.barrier for p in plans]


def assert_every_version_recomputes(c, view: str, src: str, first: int, last: int) -> int:
    """For every barrier in [first, last]: the view has a version there (none skipped), its
    epoch is committed once at exactly that version, and it equals the query over ``src`` at the
    barrier. Returns how many barriers were checked."""
    barriers = issued_barriers(c, view, first, last)
    assert barriers and barriers[0] == first and barriers[-1] == last
    for b in barriers:
        snap = c.snapshot([src, view], barrier=b)  # BarrierNotReached if the view skipped b
        epoch = c.jobs.get_epoch(view, b)
        assert epoch.state is EpochState.COMMITTED and epoch.commit_ts == snap.read_ts(view)
        expect = defaultdict(int)
        for r in snap.read(src).to_pylist():
            expect[r["branch"]] += r["balance"]
        got = {r["branch"]: r["total"] for r in snap.read(view).to_pylist()}
        assert got == dict(expect), f"view {view} at barrier {b}"
    return len(barriers)


views_server = server_fixture("views", "--barrier-interval", "200ms")
vc = client_fixture("views_server")


def _transfers(c, table: str, accounts: int, stop: threading.Event, rate: float = 50):
    rng = random.Random(11)
    while not stop.is_set():
        transfer(c, rng, accounts, table)
        time.sleep(1 / rate)


def _start_job(address, target, src, stop_file, env=None):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "snapview.chaos.view_job",
            address,
            target,
            BRANCH_SQL.format(src=src),
            "branch",
            stop_file,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )


def _exit_while_committing(proc, c, view: str, stall_s: float = 180.0) -> int:
    """Wait for ``proc`` to exit for as long as the job keeps making epochs of ``view`` (a new
    one opened or one committed): AssertionError once none has for ``stall_s``. A slow machine (JVM starts,
    epochs) only makes it wait longer; a stuck job still fails it."""
    last, since = None, time.monotonic()
    while True:
        try:
            return proc.wait(2)
        except subprocess.TimeoutExpired:
            pass
        try:
            e = c.jobs.get_epoch(view)  # the newest epoch, whatever its state
            newest = (e.epoch, e.state)
        except coordinator.SnapviewError:  # not registered yet
            newest = None
        if newest != last:
            last, since = newest, time.monotonic()
        elif time.monotonic() - since > stall_s:
            raise AssertionError(f"job of {view} alive but no epoch moved for {stall_s}s")


# On a loaded machine two Spark job processes start and run an epoch each, slowly: the waits
# are bounded by progress (a stuck job fails in 180 s), the test only by this.
@pytest.mark.timeout(900)
def test_view_job_killed_mid_epoch_resumes_at_the_next_barrier(views_server, vc, tmp_path):
    """kill -9 of the job (its JVM too) after it prewrote an epoch, before the commit; the
    restarted job redoes that barrier and goes on: no barrier skipped, none
    applied twice, every version equal to the query."""
    src, view = "acc_kill", "bal_kill"
    create_accounts(vc, 100, src)
    stop = threading.Event()
    writer = threading.Thread(target=_transfers, args=(vc, src, 100, stop), daemon=True)
    writer.start()
    stop_file = str(tmp_path / "stop")
    began = vc.tso()
    procs = []
    try:
        crashing = _start_job(
            views_server.address,
            view,
            src,
            stop_file,
            {
                "SNAPVIEW_FAILPOINTS": "view.before_commit=15%panic_group",
                "SNAPVIEW_FAILPOINTS_SEED": "5",
            },
        )
        procs.append(crashing)
        assert _exit_while_committing(crashing, vc, view) == -signal.SIGKILL
        left = vc.jobs.get_epoch(view)  # the newest epoch: prewritten, never committed
        assert left.state is EpochState.PREWRITE, left
        job = _start_job(views_server.address, view, src, stop_file)
        procs.append(job)
        assert job.stdout.readline().strip() == "STARTED"
        wait_for(
            lambda: _has_after(vc, view, left.epoch), timeout=120, what="barriers after the restart"
        )
        stop.set()
        writer.join(10)
        target = vc.tso()
        wait_for(lambda: _has_after(vc, view, target - 1), timeout=120, what="the last commits")
        open(stop_file, "w").close()
        assert job.wait(120) == 0
    finally:
        stop.set()
        open(stop_file, "w").close()
        for p in procs:  # a failed assertion must not leave a job (and its JVM) behind
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    last = vc.snapshot([view]).barrier
    first = next(b for b in issued_barriers(vc, view, began, last) if _has(vc, view, b))
    assert first <= left.epoch < last
    assert vc.jobs.get_epoch(view, left.epoch).attempt >= 2  # redone, committed once
    assert assert_every_version_recomputes(vc, view, src, first, last) >= 5


def _has_after(c, view, ts) -> bool:
    try:
        return c.snapshot([view]).barrier > ts
    except coordinator.BarrierNotReached:
        return False


def _has(c, view, b) -> bool:
    try:
        c.snapshot([view], barrier=b)
        return True
    except coordinator.BarrierNotReached:
        return False


def test_view_survives_kill_9_of_the_server(spark, tmp_path):
    """kill -9 of snapview serve while a view job runs in this process: the job rides out the
    restart and the view resumes at the next barrier, none skipped."""
    servers = serve(tmp_path / "d", "--barrier-interval", "200ms")
    srv = next(servers)
    c = coordinator.connect(srv.address)
    try:
        src, view = "acc_srv", "bal_srv"
        create_accounts(c, 50, src)
        job = branch_view(spark, srv.address, src, view).build().start()
        try:
            first = job.await_barrier(c.tso(), timeout=120)
            rng = random.Random(3)
            for _ in range(20):
                transfer(c, rng, 50, src)
            job.await_barrier(c.tso(), timeout=60)
            srv.kill()
            srv.start()
            for _ in range(20):
                transfer(c, rng, 50, src)
            last = job.await_barrier(c.tso(), timeout=120)
            assert job.is_active()
        finally:
            job.stop()
        assert assert_every_version_recomputes(c, view, src, first, last) >= 3
    finally:
        c.close()
        servers.close()  # runs serve's finally: the server stops


def test_second_writer_and_cycle_are_refused(spark, views_server, vc):
    src = "acc_topo"
    create_accounts(vc, 10, src)
    addr = views_server.address

    def builder(target, sql):
        return MaterializedView.builder(spark).coordinator(addr).query(sql).target(target)

    v1 = builder("topo_v1", BRANCH_SQL.format(src=src)).build()
    assert "strategy: incremental" in v1.explain() and src in v1.explain()
    with pytest.raises(SecondWriter, match="'topo_v1' is already written by job 'topo_v1'"):
        builder("topo_v1", BRANCH_SQL.format(src=src)).job("other").build()
    with pytest.raises(SecondWriter):
        EpochWriter(addr, table="topo_v1")(
            spark.createDataFrame([(1, 2)], "branch INT, total BIGINT"), 0
        )
    builder("topo_v2", "SELECT SUM(total) AS total FROM topo_v1").build()
    with pytest.raises(TopologyCycle) as e:
        builder("topo_v1", "SELECT branch, v1.total FROM topo_v2 CROSS JOIN topo_v1 v1").build()
    assert "topo_v1" in str(e.value)
    with pytest.raises(TopologyCycle) as e:
        builder("topo_v1", "SELECT 1 AS branch, total FROM topo_v2").build()
    assert "topo_v1 <- topo_v2 <- topo_v1" in str(e.value)
    jobs = {j.job: j for j in vc.topology().jobs}
    assert list(jobs["topo_v1"].sources) == [src]  # the refusals changed nothing


def test_a_restarted_job_resumes_after_its_last_committed_barrier(spark, views_server, vc):
    """Stop a job, change its source, start it again (a new ViewJob, as a restarted driver
    makes): it begins with the barrier right after the last committed one, from the
    coordinator's record alone."""
    src, view = "acc_cp", "bal_cp"
    create_accounts(vc, 30, src)
    addr = views_server.address
    rng = random.Random(5)

    def start():
        return branch_view(spark, addr, src, view).build().start()

    job = start()
    first = job.await_barrier(vc.tso(), timeout=120)
    for _ in range(10):
        transfer(vc, rng, 30, src)
    job.await_barrier(vc.tso(), timeout=60)
    job.stop()
    stopped_at = vc.jobs.get_epoch(view).epoch
    for _ in range(10):
        transfer(vc, rng, 30, src)
    job = start()
    try:
        last = job.await_barrier(vc.tso(), timeout=120)
        p = job.progress()
    finally:
        job.stop()
    # the new run began with the barrier right after the last committed one
    assert issued_barriers(vc, view, stopped_at + 1, p["first_barrier"]) == [p["first_barrier"]]
    assert p["skipped"] == 0
    assert assert_every_version_recomputes(vc, view, src, first, last) >= 3


def test_a_view_started_right_after_a_load_holds_it_in_its_first_version(spark, tmp_path):
    """Barriers every 5 s; a row is committed after the newest barrier and the job started at
    once. The job does not begin at that older barrier: its first version is at a barrier
    after start(), which holds the row."""
    servers = serve(tmp_path / "d", "--barrier-interval", "5s")
    srv = next(servers)
    try:
        with coordinator.connect(srv.address) as c:
            src, view = "acc_first", "bal_first"
            create_accounts(c, 20, src)
            v = branch_view(spark, srv.address, src, view).build()
            before = c.snapshot([src], wait_s=30).barrier  # a barrier from before the load
            with c.transaction() as t:
                t.put(src, {"id": 1000, "branch": 0, "balance": 7})
            job = v.start()
            try:
                job.await_barrier(1, timeout=60)
                first = job.progress().first_barrier
            finally:
                job.stop()
            assert first > before
            snap = c.snapshot([src, view], barrier=first)
            assert {"id": 1000, "branch": 0, "balance": 7} in snap.read(src).to_pylist()
            totals = {r["branch"]: r["total"] for r in snap.read(view).to_pylist()}
            assert totals[0] == 2 * 1000 + 7
    finally:
        servers.close()


def test_view_starts_on_a_non_empty_target_and_global_aggregates(spark, views_server, vc):
    src = "acc_ne"
    create_accounts(vc, 20, src)
    vc.create_table("ne_view", "branch INT, total BIGINT", primary_key=["branch"])
    with vc.transaction() as t:
        t.put("ne_view", {"branch": 99, "total": 1})  # a stale row the first epoch must remove
        t.put("ne_view", {"branch": 1, "total": 5})
    addr = views_server.address
    v = (
        MaterializedView.builder(spark)
        .coordinator(addr)
        .query(BRANCH_SQL.format(src=src))
        .target("ne_view")
        .primary_key("branch")
        .build()
    )
    g = (
        MaterializedView.builder(spark)
        .coordinator(addr)
        .query(f"SELECT SUM(balance) AS s, COUNT(*) AS n FROM {src}")
        .target("ne_total")
        .column_names("total", "accounts")
        .build()
    )
    assert "one-row" in g.explain()
    jobs = [v.start(), g.start()]
    try:
        ts = vc.tso()
        for j in jobs:
            j.await_barrier(ts, timeout=120)
        snap = vc.snapshot([src, "ne_view", "ne_total"], wait_s=60)
        assert snap.read("ne_view").to_pylist() == [
            {"branch": b, "total": 2 * 1000} for b in range(10)
        ]
        assert snap.read("ne_total").to_pylist() == [{"total": 20_000, "accounts": 20}]
    finally:
        for j in jobs:
            j.stop()
    with pytest.raises(coordinator.AlreadyExists):
        MaterializedView.builder(spark).coordinator(addr).query(BRANCH_SQL.format(src=src)).target(
            "ne_view"
        ).force_new_table().build()
    with pytest.raises(coordinator.SchemaMismatch, match="ne_view"):
        MaterializedView.builder(spark).coordinator(addr).query(
            f"SELECT id, balance FROM {src}"
        ).target("ne_view").build()
    with pytest.raises(coordinator.InvalidArgument, match="query"):
        MaterializedView.builder(spark).coordinator(addr).target("x").build()


def test_spark_source_reads_at_a_barrier(spark, views_server, vc):
    """.option("barrier", T) reads a table's version at T (a view: its commit for T), and
    .option("consistent", "true") the newest barrier; they exclude 'at'."""
    src = "acc_opt"
    create_accounts(vc, 10, src)
    addr = views_server.address
    job = branch_view(spark, addr, src, "bal_opt").build().start()
    try:
        b1 = job.await_barrier(vc.tso(), timeout=120)
        with vc.transaction() as t:
            t.put(src, {"id": 0, "branch": 0, "balance": 5000})
        b2 = job.await_barrier(t.commit_ts, timeout=60)
    finally:
        job.stop()

    def read(table, **opts):
        r = spark.read.format("snapview").option("coordinator", addr).option("table", table)
        for k, v in opts.items():
            r = r.option(k, str(v))
        return sorted(tuple(x) for x in r.load().collect())

    for b in (b1, b2):
        snap = vc.snapshot([src, "bal_opt"], barrier=b)
        for table in (src, "bal_opt"):
            want = sorted(tuple(r.values()) for r in snap.read(table).to_pylist())
            assert read(table, barrier=b) == want
    assert (0, 5000) in read("bal_opt", consistent="true")
    assert (0, 1000) in read("bal_opt", barrier=b1)
    with pytest.raises(Exception, match="exclude each other"):
        read("bal_opt", barrier=b1, at=5)


def test_drop_old_table_and_a_key_that_is_not_unique(spark, views_server, vc):
    src = "acc_dup"
    create_accounts(vc, 20, src)
    addr = views_server.address
    vc.create_table("dup_view", "x STRING", primary_key=["x"])

    def builder(sql):
        return MaterializedView.builder(spark).coordinator(addr).query(sql).target("dup_view")

    with pytest.raises(coordinator.SchemaMismatch, match="dup_view"):
        builder(f"SELECT id, balance FROM {src}").build()
    # branch is not unique in the result: build() refuses before it drops or creates anything
    with pytest.raises(coordinator.InvalidArgument, match=r"key \(branch\) is not unique"):
        builder(f"SELECT branch, balance FROM {src}").drop_old_table().build()
    assert [c.name for c in vc.describe_table("dup_view").table_schema.columns] == ["x"]
    # drop_old_table replaces the incompatible table; branch is unique at build, not after:
    # a delta that adds a second row of branch 0 (the first is already in the view) fails its
    # epoch, naming the key, and writes nothing
    sql = f"SELECT branch, balance FROM {src} WHERE id < 10 OR id >= 100"
    view = builder(sql).drop_old_table().build()
    job = view.start()
    try:
        first = job.await_barrier(vc.tso(), timeout=120)
        assert [
            c.name for c in vc.describe_table("dup_view", refresh=True).table_schema.columns
        ] == [
            "branch",
            "balance",
        ]
        with vc.transaction() as t:
            t.put(src, {"id": 100, "branch": 0, "balance": 1})
        with pytest.raises(coordinator.SchemaMismatch, match=r"not unique .*\(0,\) appears"):
            job.await_barrier(vc.tso(), timeout=120)
    finally:
        job.stop()
    held = vc.snapshot(["dup_view"])
    assert held.barrier >= first
    assert sorted(r["branch"] for r in held.read("dup_view").to_pylist()) == list(range(10))
    assert {"branch": 0, "balance": 1} not in held.read("dup_view").to_pylist()


def _spark_jobs_of_build(spark, builder, group: str):
    """(the view, the Spark job ids its build() ran): the build runs in this thread under job
    group ``group``."""
    sc = spark.sparkContext
    sc.setLocalProperty("spark.jobGroup.id", group)
    try:
        view = builder.build()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return view, list(sc.statusTracker().getJobIdsForGroup(group))


def test_a_key_the_plan_proves_unique_is_not_checked_by_running_the_query(spark, views_server, vc):
    """build() of an incremental view whose key the plan proves unique (the GROUP BY columns;
    a source's key through a filter) runs no Spark job: the key check's run of the whole query
    could not fail. A key the plan cannot prove is still checked, and a duplicate refused."""
    vc.create_table("pk_src", "id BIGINT, g INT, v INT", primary_key=["id"])
    with vc.transaction() as t:
        for i in range(20):
            t.put("pk_src", {"id": i, "g": i % 4, "v": i % 7})

    def builder(query: str, target: str, *key: str):
        return (
            MaterializedView.builder(spark)
            .coordinator(views_server.address)
            .query(query)
            .target(target)
            .primary_key(*key)
            .strategy("incremental")
        )

    for sql, target, key in [
        ("SELECT g, SUM(v) AS s, COUNT(*) AS n FROM pk_src GROUP BY g", "pk_groups", "g"),
        ("SELECT id, v FROM pk_src WHERE v > 2", "pk_filtered", "id"),
    ]:
        view, jobs = _spark_jobs_of_build(spark, builder(sql, target, key), f"pk-{target}")
        assert jobs == [], f"{target}: build() ran Spark jobs {jobs}"
        assert "unique by the query's plan, no check run" in view.explain()
        view.maintain_available(until=vc.tso(), timeout=60)
        got = vc.snapshot([target]).read(target).to_pylist()
        assert len(got) == (
            4 if target == "pk_groups" else len([i for i in range(20) if i % 7 > 2])
        )
    # v is not a key of anything: checked by running the query (unique here: ids 0..6)
    unproven = builder("SELECT v, id FROM pk_src WHERE id < 7", "pk_by_v", "v")
    view, jobs = _spark_jobs_of_build(spark, unproven, "pk-by-v")
    assert jobs and "unique in the query's result at build" in view.explain()
    with pytest.raises(coordinator.InvalidArgument, match=r"key \(v\) is not unique"):
        builder("SELECT v, id FROM pk_src", "pk_dup_v", "v").build()
    assert "pk_dup_v" not in {j.job for j in vc.jobs.list_jobs()}


def test_a_rebuilt_view_reattaches_without_the_key_check(spark, views_server, vc):
    """build() of a view that exists as the same job, query (spelled with other whitespace),
    key and table runs no Spark job (issue 24, item 12: the key check ran the whole query
    again); the view keeps working; a changed query checks its key again."""
    vc.create_table("ra_a", "id BIGINT, k BIGINT, v INT", primary_key=["id"])
    vc.create_table("ra_b", "k BIGINT, name STRING", primary_key=["k"])
    with vc.transaction() as t:
        for i in range(30):
            t.put("ra_a", {"id": i, "k": i % 5, "v": i})
        for k in range(5):
            t.put("ra_b", {"k": k, "name": f"n{k}"})
    sql = "SELECT a.id, a.v, b.name FROM ra_a a JOIN ra_b b ON a.k = b.k WHERE a.v > {}"

    def builder(query: str):
        return (
            MaterializedView.builder(spark)
            .coordinator(views_server.address)
            .query(query)
            .target("ra_view")
            .primary_key("id")
            .strategy("full_recompute")
        )

    first, jobs = _spark_jobs_of_build(spark, builder(sql.format(3)), "ra-first")
    assert jobs, "the first build checks the key with a Spark job"
    assert "unique in the query's result at build" in first.explain()
    first.maintain_available(until=vc.tso(), timeout=60)
    respelled = "  " + sql.format(3).replace(" JOIN ", "\n   JOIN  ") + "\n"
    again, jobs = _spark_jobs_of_build(spark, builder(respelled), "ra-again")
    assert jobs == [], f"the second build ran Spark jobs {jobs}"
    assert "the key check of its first build stands" in again.explain()
    with vc.transaction() as t:
        t.put("ra_a", {"id": 100, "k": 2, "v": 50})
    again.maintain_available(until=vc.tso(), timeout=60)
    rows = vc.snapshot(["ra_view"]).read("ra_view").to_pylist()
    assert sorted(r["id"] for r in rows) == [*range(4, 30), 100]
    changed, jobs = _spark_jobs_of_build(spark, builder(sql.format(10)), "ra-changed")
    assert jobs and "unique in the query's result at build" in changed.explain()


def test_transient_and_permanent_failures_are_told_apart():
    """The classification ViewJob retries by (issue 24, item 11)."""
    from py4j.protocol import Py4JError

    from kvstore.errors import SnapviewError, TableNotFound, Unauthenticated, Unavailable
    from spark_sink.materialized_view import is_transient

    deadline = SnapviewError("Deadline Exceeded")
    deadline.code = "DEADLINE_EXCEEDED"
    worker = Py4JError("org.apache.spark.SparkException: Python worker failed to connect back.")
    assert is_transient(Unavailable("server away")) and is_transient(deadline)
    cancelled = SnapviewError("CANCELLED")
    cancelled.code = "CANCELLED"  # a call cancelled under the job (the lifecycle walk saw one)
    assert is_transient(cancelled)
    assert is_transient(worker)
    wrapped = RuntimeError("batch failed")
    wrapped.__cause__ = worker
    assert is_transient(wrapped)
    assert not is_transient(TableNotFound("orders"))
    assert not is_transient(Unauthenticated("bad token"))
    assert not is_transient(Py4JError("AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] x"))
    assert not is_transient(AttributeError("a bug"))


def test_a_view_job_rides_out_a_transient_failure_and_stops_on_a_permanent_one(
    spark, views_server, vc, monkeypatch, caplog
):
    """A transient error planted in one epoch: the job logs it, starts its stream again and
    the view stays equal to its query; a permanent error stops the job, reported FAILED with
    the error (issue 24, item 11: a script's job died on the first transient Spark error)."""
    import logging

    from coordinator.jobs import JobState
    from kvstore.errors import InvalidArgument, Unavailable
    from spark_sink import materialized_view as mv
    from spark_sink.full_recompute import FullRecompute

    monkeypatch.setattr(mv, "FIRST_RETRY_S", 0.2)
    vc.create_table("tr_src", "id BIGINT, v INT", primary_key=["id"])
    with vc.transaction() as t:
        for i in range(5):
            t.put("tr_src", {"id": i, "v": i})
    job = (
        MaterializedView.builder(spark)
        .coordinator(views_server.address)
        .query("SELECT id, v * 2 AS v2 FROM tr_src")
        .target("tr_view")
        .strategy("full_recompute")
        .trigger_interval("100 milliseconds")
        .build()
        .start()
    )
    try:
        job.await_barrier(vc.tso(), timeout=60)
        real = FullRecompute.maintain
        planted: list[Exception] = [Unavailable("planted: the server is away")]

        def flaky(self, barrier, reads):
            if planted:
                raise planted.pop()
            return real(self, barrier, reads)

        monkeypatch.setattr(FullRecompute, "maintain", flaky)
        caplog.set_level(logging.WARNING, logger="snapview.view")
        with vc.transaction() as t:
            t.put("tr_src", {"id": 10, "v": 7})
        job.await_barrier(vc.tso(), timeout=60)
        assert job.restarts == 1 and not planted
        assert any("transient failure" in r.getMessage() for r in caplog.records)
        rows = vc.snapshot(["tr_view"]).read("tr_view").to_pylist()
        assert {r["id"]: r["v2"] for r in rows} == {0: 0, 1: 2, 2: 4, 3: 6, 4: 8, 10: 14}

        planted.append(InvalidArgument("planted: a value the query cannot take"))
        wait_for(lambda: not job.is_active(), 30, "the job to stop")
        assert job.restarts == 1 and "planted: a value" in job.failure_text()

        def reported():
            info = {j.job: j for j in vc.jobs.list_jobs()}["tr_view"]
            return info.state is JobState.FAILED and "planted: a value" in info.last_error

        wait_for(reported, 30, "the job reported FAILED")
    finally:
        job.stop()


def test_stepping_a_view_after_its_started_job_ran_reads_from_what_the_job_committed(
    spark, views_server, vc
):
    """``maintain_available`` after a job started from the same view ran and stopped: the
    strategy it cached before must not compute the next delta from its own older epoch (the
    lifecycle walk found it: the changes the job had applied were read again, here a SUM counted
    twice, and with GC on the read failed with SnapshotTooOld). The coordinator refuses such a
    commit too (``after_epoch``)."""
    vc.create_table("sv_src", "id BIGINT, g BIGINT, v BIGINT", primary_key=["id"])
    with vc.transaction() as t:
        t.put("sv_src", {"id": 1, "g": 0, "v": 1})
    mv = (
        MaterializedView.builder(spark)
        .coordinator(views_server.address)
        .query("SELECT g, SUM(v) AS s, COUNT(*) AS n FROM sv_src GROUP BY g")
        .target("sv_view")
        .primary_key("g")
        .strategy("incremental")
        .trigger_interval("100 milliseconds")
        .build()
    )
    mv.maintain_available(until=vc.tso(), timeout=60)  # caches its last epoch
    job = mv.start()
    with vc.transaction() as t:
        t.put("sv_src", {"id": 2, "g": 0, "v": 10})
    job.await_barrier(vc.tso(), timeout=60)
    job.stop()
    with vc.transaction() as t:
        t.put("sv_src", {"id": 3, "g": 0, "v": 100})
    mv.maintain_available(until=vc.tso(), timeout=60)
    assert vc.snapshot(["sv_view"]).read("sv_view").to_pylist() == [{"g": 0, "s": 111, "n": 3}]


def test_a_dry_run_from_a_thread_without_an_active_session_keeps_the_callers_spark(
    spark, views_server, vc
):
    """``snapview revise --dry-run`` in-process, from a thread that never used Spark (no active
    session there): it must reuse the process's SparkContext and leave it running. It used to
    take the thread's missing active session for "no Spark here", get the caller's context from
    getOrCreate and stop it, which failed every Spark test after the lifecycle walk."""
    from snapview.cli import main as cli_main

    vc.create_table("dr_src", "id BIGINT, v BIGINT", primary_key=["id"])
    with vc.transaction() as t:
        t.put("dr_src", {"id": 1, "v": 1})
    before = vc.snapshot(["dr_src"], wait_s=10).barrier
    with vc.transaction() as t:
        t.put("dr_src", {"id": 1, "v": 2})
    codes: list[int] = []
    args = ["revise", "dr_src", "--to-barrier", str(before), "--dry-run"]
    th = threading.Thread(
        target=lambda: codes.append(cli_main([*args, "--address", views_server.address]))
    )
    th.start()
    th.join(120)
    assert codes == [0]
    assert spark.range(3).count() == 3  # the caller's Spark still runs


def test_a_delta_scans_only_the_sources_that_changed(spark, views_server, vc, monkeypatch):
    """Issue 26, item 5: the epoch's changed-key count already proves a source unchanged, so
    the delta does not scan it; the view stays exact either way round."""
    from spark_sink.ivm.inputs import StoreInputs

    made: list[StoreInputs] = []
    init = StoreInputs.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(StoreInputs, "__init__", recording_init)
    vc.create_table("sj_a", "id BIGINT, b BIGINT, v BIGINT", primary_key=["id"])
    vc.create_table("sj_b", "id BIGINT, r INT", primary_key=["id"])
    with vc.transaction() as t:
        for i in range(4):
            t.put("sj_a", {"id": i, "b": i % 2, "v": i})
        t.put("sj_b", {"id": 0, "r": 10})
        t.put("sj_b", {"id": 1, "r": 11})
    mv = (
        MaterializedView.builder(spark)
        .coordinator(views_server.address)
        .query("SELECT a.id, a.v, b.r FROM sj_a a JOIN sj_b b ON a.b = b.id")
        .target("sj_view")
        .primary_key("id")
        .strategy("incremental")
        .build()
    )
    mv.maintain_available(until=vc.tso(), timeout=60)

    def step(put: tuple[str, dict]) -> list[str]:
        with vc.transaction() as t:
            t.put(*put)
        made.clear()
        mv.maintain_available(until=vc.tso(), timeout=60)
        changed = [m for m in made if m.changes_read]  # the epoch that held the change
        assert len(changed) == 1, [m.scanned for m in made]
        return changed[0].scanned

    assert step(("sj_a", {"id": 0, "b": 1, "v": 100})) == ["sj_a"]
    assert step(("sj_b", {"id": 1, "r": 21})) == ["sj_b"]
    got = sorted(vc.snapshot(["sj_view"]).read("sj_view").to_pylist(), key=lambda r: r["id"])
    assert got == [
        {"id": 0, "v": 100, "r": 21},
        {"id": 1, "v": 1, "r": 21},
        {"id": 2, "v": 2, "r": 10},
        {"id": 3, "v": 3, "r": 21},
    ]


def test_an_epochs_reads_go_direct_and_its_aggregate_columnar(spark, views_server, vc, monkeypatch):
    """On the server's host an incremental epoch counts and reads its changes and reads its
    keyed rows (group states) straight from LMDB, with no ChangeBoundary, ScanChanges or
    ScanRanges request, and a grouped
    COUNT/SUM/AVG takes the columnar path; with SNAPVIEW_DIRECT=off the same epoch reads
    through the server. The view is exact either way."""
    from collections import Counter

    from kvstore.direct_reads import DirectReader
    from kvstore.remote import RemoteStore
    from spark_sink.ivm.aggregate import AggregateState

    calls: Counter[str] = Counter()
    for cls, where in ((DirectReader, "direct"), (RemoteStore, "rpc")):
        for name in ("scan_ranges", "scan_changes", "change_boundary"):
            real = getattr(cls, name)

            def counted(self, *a, _real=real, _key=f"{where}.{name}", **k):
                calls[_key] += 1
                return _real(self, *a, **k)

            monkeypatch.setattr(cls, name, counted)
    for name in ("_columnar_delta", "_row_delta"):
        real = getattr(AggregateState, name)

        def path(self, *a, _real=real, _key=name, **k):
            calls[_key] += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(AggregateState, name, path)
    vc.create_table("rd_o", "id BIGINT, g INT, v BIGINT", primary_key=["id"])
    with vc.transaction() as t:
        for i in range(60):
            t.put("rd_o", {"id": i, "g": i % 6, "v": i})
    mv = (
        MaterializedView.builder(spark)
        .coordinator(views_server.address)
        .query("SELECT g, COUNT(*) AS n, SUM(v) AS s, AVG(v) AS a FROM rd_o GROUP BY g")
        .target("rd_view")
        .primary_key("g")
        .strategy("incremental")
        .build()
    )
    mv.maintain_available(until=vc.tso(), timeout=60)

    def change_and_check(k: int) -> None:
        calls.clear()
        with vc.transaction() as t:
            t.delete("rd_o", {"id": k})
            t.put("rd_o", {"id": k + 1, "g": (k + 2) % 6, "v": -k})
            t.put("rd_o", {"id": 100 + k, "g": 9, "v": k})
        mv.maintain_available(until=vc.tso(), timeout=60)
        assert mv._strategy.progress.last_strategy == "delta"
        snap = vc.snapshot(["rd_o", "rd_view"])
        by: dict[int, list[int]] = {}
        for r in snap.read("rd_o").to_pylist():
            by.setdefault(r["g"], []).append(r["v"])
        want = sorted((g, len(v), sum(v), sum(v) / len(v)) for g, v in by.items())
        got = sorted((r["g"], r["n"], r["s"], r["a"]) for r in snap.read("rd_view").to_pylist())
        assert got == want

    change_and_check(10)
    # (a barrier may fall between the last maintain and the change: then two epochs run, the
    # first without a change, and both take the columnar path)
    assert calls["_columnar_delta"] >= 1 and calls["_row_delta"] == 0, calls
    assert calls["direct.scan_changes"] >= 1 and calls["direct.scan_ranges"] >= 1, calls
    assert calls["direct.change_boundary"] >= 1, calls
    assert calls["rpc.scan_changes"] == calls["rpc.scan_ranges"] == 0, calls
    assert calls["rpc.change_boundary"] == 0, calls
    monkeypatch.setenv("SNAPVIEW_DIRECT", "off")
    change_and_check(20)
    assert calls["direct.scan_changes"] == 0 and calls["direct.scan_ranges"] == 0, calls
    assert calls["rpc.scan_changes"] >= 1 and calls["rpc.scan_ranges"] >= 1, calls
    assert calls["direct.change_boundary"] == 0 and calls["rpc.change_boundary"] >= 1, calls


def test_an_epochs_writes_go_direct_in_key_order(spark, views_server, vc, monkeypatch):
    """An incremental epoch's PUTs and DELETEs (view rows and index state) are prewritten
    straight into LMDB, in key order (no Prewrite request to the server); the view stays
    exact."""
    import spark_sink.partition_writer as pw

    chunks: list[list[bytes]] = []
    remote: list[int] = []
    real_chunk, real_remote = pw.prewrite_chunk, pw.prewrite_remote

    def chunk(client, direct, target, muts):
        chunks.append([k for _, k, _ in muts])
        assert direct is not None
        return real_chunk(client, direct, target, muts)

    def via_server(client, target, muts):
        remote.append(len(muts))
        return real_remote(client, target, muts)

    vc.create_table("kw_o", "id BIGINT, c BIGINT, v BIGINT", primary_key=["id"])
    vc.create_table("kw_c", "id BIGINT, r INT", primary_key=["id"])
    with vc.transaction() as t:
        for i in range(50):
            t.put("kw_o", {"id": i, "c": i % 5, "v": i})
        for i in range(5):
            t.put("kw_c", {"id": i, "r": i})
    mv = (
        MaterializedView.builder(spark)
        .coordinator(views_server.address)
        .query("SELECT o.id, o.v, c.r FROM kw_o o JOIN kw_c c ON o.c = c.id WHERE c.r < 4")
        .target("kw_view")
        .primary_key("id")
        .strategy("incremental")
        .build()
    )
    mv.maintain_available(until=vc.tso(), timeout=60)
    monkeypatch.setattr(pw, "prewrite_chunk", chunk)
    monkeypatch.setattr(pw, "prewrite_remote", via_server)
    with vc.transaction() as t:  # deletes and puts of view rows and of the index on kw_o.c
        for i in range(0, 50, 3):
            t.delete("kw_o", {"id": i})
        for i in range(1, 50, 3):
            t.put("kw_o", {"id": i, "c": (i + 1) % 5, "v": -i})
    mv.maintain_available(until=vc.tso(), timeout=60)
    assert mv._strategy.progress.last_strategy == "delta"
    assert len(chunks) >= 2 and remote == []
    for keys in chunks:
        assert keys == sorted(keys)
    snap = vc.snapshot(["kw_o", "kw_c", "kw_view"])
    r = {x["id"]: x["r"] for x in snap.read("kw_c").to_pylist()}
    want = sorted(
        (x["id"], x["v"], r[x["c"]]) for x in snap.read("kw_o").to_pylist() if r[x["c"]] < 4
    )
    got = sorted((x["id"], x["v"], x["r"]) for x in snap.read("kw_view").to_pylist())
    assert got == want


def test_an_epoch_opens_while_its_delta_is_computed(spark, views_server, vc, monkeypatch):
    """A delta epoch's OpenTransaction runs beside its delta (the open waits at the server's
    writer while the delta reads), and the attempt is kept alive by heartbeats while the delta
    runs. A delta that fails aborts the attempt opened beside it; the next epoch then opens
    before it reads (an attempt left behind would hold locks its reads could meet), and the view
    stays exact."""
    import dataclasses

    from coordinator.epoch_attempt import EpochAttempt
    from coordinator.jobs import JobClient
    from spark_sink.ivm.strategy import Incremental

    vc.create_table("oa_src", "id BIGINT, g INT, v BIGINT", primary_key=["id"])
    with vc.transaction() as t:
        for i in range(30):
            t.put("oa_src", {"id": i, "g": i % 3, "v": i})
    mv = (
        MaterializedView.builder(spark)
        .coordinator(views_server.address)
        .query("SELECT g, COUNT(*) AS n, SUM(v) AS s FROM oa_src GROUP BY g")
        .target("oa_view")
        .primary_key("g")
        .strategy("incremental")
        .build()
    )
    mv.maintain_available(until=vc.tso(), timeout=60)
    st = mv._strategy
    st.spec = dataclasses.replace(st.spec, lock_ttl_ms=600)  # a heartbeat every 200 ms

    events: list[str] = []
    delta_began = threading.Event()
    beats = threading.Semaphore(0)
    real_open, real_delta = EpochAttempt.open.__func__, Incremental._delta
    real_beat = JobClient.heartbeat_transaction
    fail = {"next": False}
    wait_s = {"for_delta": 10.0}
    opened: list[int] = []  # the epochs opened, in order

    def open_(cls, client, job, epoch, **k):
        opened.append(epoch)
        # the open waits for the delta to begin: it can only see it if they run side by side
        seen = delta_began.wait(wait_s["for_delta"])
        events.append("open:" + ("beside" if seen else "alone"))
        got = real_open(cls, client, job, epoch, **k)
        events.append("opened")
        return got

    def delta(self, *a, **k):
        events.append("delta")
        delta_began.set()
        if fail["next"]:
            fail["next"] = False
            raise RuntimeError("planted failure in the delta")
        # two heartbeats of the open attempt while the delta runs (bounded: 10 s)
        assert beats.acquire(timeout=10) and beats.acquire(timeout=10), "no heartbeat"
        return real_delta(self, *a, **k)

    def beat(self, *a, **k):
        beats.release()
        return real_beat(self, *a, **k)

    monkeypatch.setattr(EpochAttempt, "open", classmethod(open_))
    monkeypatch.setattr(Incremental, "_delta", delta)
    monkeypatch.setattr(JobClient, "heartbeat_transaction", beat)

    def change(k: int) -> None:
        delta_began.clear()
        events.clear()
        with vc.transaction() as t:
            t.put("oa_src", {"id": 100 + k, "g": k % 3, "v": k})

    def exact() -> None:
        by: dict[int, list[int]] = {}
        snap = vc.snapshot(["oa_src", "oa_view"])
        for r in snap.read("oa_src").to_pylist():
            by.setdefault(r["g"], []).append(r["v"])
        got = sorted((r["g"], r["n"], r["s"]) for r in snap.read("oa_view").to_pylist())
        assert got == sorted((g, len(v), sum(v)) for g, v in by.items())

    change(1)
    mv.maintain_available(until=vc.tso(), timeout=60)
    assert "open:beside" in events and "open:alone" not in events, events
    exact()

    change(2)
    fail["next"] = True
    with pytest.raises(RuntimeError, match="planted failure"):
        mv.maintain_available(until=vc.tso(), timeout=60)
    left = vc.jobs.get_epoch(mv.job, opened[-1])
    assert left.state is EpochState.ABORTED, left  # the attempt opened beside it, aborted

    wait_s["for_delta"] = 0.0  # after a failure the open comes first: it must not wait
    delta_began.clear()
    events.clear()
    mv.maintain_available(until=vc.tso(), timeout=60)
    assert events[:3] == ["open:alone", "opened", "delta"], events
    assert mv._strategy.progress.last_strategy == "delta"
    exact()


def test_a_barrier_committed_while_its_delta_was_computed_ahead_is_skipped(
    spark, views_server, vc, monkeypatch
):
    """Two maintainers of one view job (a restarted driver beside one still running, say): one
    commits a barrier while the other computes its delta ahead, beside an open that lands after
    that commit. The open finds the epoch committed: nothing is written, the barrier counts as
    skipped, the cached last epoch is forgotten, and the next barrier is exact."""
    from coordinator.epoch_attempt import EpochAttempt

    vc.create_table("sk_src", "id BIGINT, g INT, v BIGINT", primary_key=["id"])
    with vc.transaction() as t:
        for i in range(12):
            t.put("sk_src", {"id": i, "g": i % 3, "v": i})

    def maintainer() -> MaterializedView:
        return (
            MaterializedView.builder(spark)
            .coordinator(views_server.address)
            .query("SELECT g, COUNT(*) AS n, SUM(v) AS s FROM sk_src GROUP BY g")
            .target("sk_view")
            .primary_key("g")
            .strategy("incremental")
            .build()
        )

    a, b = maintainer(), maintainer()
    assert a.job == b.job
    b.maintain_available(until=vc.tso(), timeout=60)  # b's last epoch ends in its own commit
    with vc.transaction() as t:
        t.put("sk_src", {"id": 100, "g": 1, "v": 100})
    upto = vc.tso()

    # b's next open is held until a has committed that barrier; b computes its delta meanwhile
    real_open = EpochAttempt.open.__func__
    armed, b_opening, released = [True], threading.Event(), threading.Event()

    def open_(cls, client, job, epoch, **k):
        if armed[0]:
            armed[0] = False
            b_opening.set()
            assert released.wait(30), "a never committed"
        return real_open(cls, client, job, epoch, **k)

    sb = b._strategy
    real_ahead = sb._delta_ahead
    errors: list[BaseException] = []

    def ahead(*args, **kw):
        got = real_ahead(*args, **kw)  # the delta, computed beside the held open
        assert b_opening.wait(30), "b's open never came"

        def run_a() -> None:
            try:
                a.maintain_available(until=upto, timeout=60)
            except BaseException as e:  # reported below, in the test's thread
                errors.append(e)
            finally:
                released.set()

        th = threading.Thread(target=run_a)
        th.start()
        th.join(90)
        return got

    monkeypatch.setattr(EpochAttempt, "open", classmethod(open_))
    monkeypatch.setattr(sb, "_delta_ahead", ahead)
    before = sb.progress.mutations
    b.maintain_available(until=upto, timeout=60)
    assert not errors, errors
    assert not armed[0], "b's open was never held"
    pb = sb.progress
    assert pb.skipped >= 1 and pb.mutations == before, pb  # found committed: nothing written
    assert a._strategy.progress.barriers >= 1

    monkeypatch.undo()
    with vc.transaction() as t:
        t.put("sk_src", {"id": 101, "g": 2, "v": 5})
        t.delete("sk_src", {"id": 0})
    b.maintain_available(until=vc.tso(), timeout=60)
    assert pb.last_strategy == "delta", pb
    snap = vc.snapshot(["sk_src", "sk_view"])
    by: dict[int, list[int]] = {}
    for r in snap.read("sk_src").to_pylist():
        by.setdefault(r["g"], []).append(r["v"])
    got = sorted((r["g"], r["n"], r["s"]) for r in snap.read("sk_view").to_pylist())
    assert got == sorted((g, len(v), sum(v)) for g, v in by.items())


def test_the_collector_is_paused_over_a_delta_epoch_and_not_over_a_build(
    spark, views_server, vc, monkeypatch
):
    """A delta epoch runs with the cyclic collector paused (its full collections walk all of
    PySpark), a build (Spark) with it on, and the collector is on again after each."""
    import gc

    from spark_sink.ivm.strategy import Incremental

    seen: dict[str, list[bool]] = {"delta": [], "build": []}
    real_delta, real_build = Incremental._delta, Incremental._build

    def delta(self, *a, **k):
        seen["delta"].append(gc.isenabled())
        return real_delta(self, *a, **k)

    def build(self, *a, **k):
        seen["build"].append(gc.isenabled())
        return real_build(self, *a, **k)

    monkeypatch.setattr(Incremental, "_delta", delta)
    monkeypatch.setattr(Incremental, "_build", build)
    vc.create_table("gcp_src", "id BIGINT, g INT", primary_key=["id"])
    with vc.transaction() as t:
        t.put("gcp_src", {"id": 1, "g": 1})
    mv = (
        MaterializedView.builder(spark)
        .coordinator(views_server.address)
        .query("SELECT g, COUNT(*) AS n FROM gcp_src GROUP BY g")
        .target("gcp_view")
        .primary_key("g")
        .strategy("incremental")
        .build()
    )
    assert gc.isenabled()
    mv.maintain_available(until=vc.tso(), timeout=60)
    assert gc.isenabled() and seen["build"] and all(seen["build"]), seen
    with vc.transaction() as t:
        t.put("gcp_src", {"id": 2, "g": 1})
    mv.maintain_available(until=vc.tso(), timeout=60)
    assert gc.isenabled() and seen["delta"] and not any(seen["delta"]), seen
    rows = vc.snapshot(["gcp_view"]).read("gcp_view").to_pylist()
    assert rows == [{"g": 1, "n": 2}]
