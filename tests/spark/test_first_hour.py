"""A user's first hour with Spark (issue 12): mistakes that must fail at once, in one line,
with nothing registered; the one call that makes store tables readable by name in Spark SQL."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

import coordinator
import spark_source
from kvstore.errors import InvalidArgument
from kvstore.mvcc.timestamp import physical_ms
from spark_sink import MaterializedView, ViewProgress
from tests.conftest import client_fixture, run_script, serve, server_fixture

fh_server = server_fixture("first_hour", "--barrier-interval", "200ms")
fc = client_fixture("fh_server")


def registered(c) -> tuple[set[str], set[str]]:
    """(table names, job names) the server knows."""
    topo = c.topology()
    return {t.name for t in c.tables()}, {j.job for j in topo.jobs}


def test_default_key_not_unique_fails_build_in_one_line_with_nothing_registered(
    spark, fh_server, fc
):
    fc.create_table("authors", "id BIGINT, country STRING", primary_key=["id"])
    fc.create_table("books", "id BIGINT, author_id BIGINT", primary_key=["id"])
    with fc.transaction() as t:
        t.put("authors", {"id": 1, "country": "NL"})
        t.put("authors", {"id": 2, "country": "FR"})
        for i in range(5):
            t.put("books", {"id": i, "author_id": 1 + i % 2})
    before = registered(fc)
    builder = (
        MaterializedView.builder(spark)
        .coordinator(fh_server.address)
        .query("SELECT a.country, b.id AS book FROM authors a JOIN books b ON a.id = b.author_id")
        .target("books_by_country")
    )
    t0 = time.monotonic()
    with pytest.raises(InvalidArgument) as e:
        builder.build()
    assert time.monotonic() - t0 < 120  # a loaded 2-core machine; it was a start() failure
    msg = str(e.value)
    assert "\n" not in msg
    assert (
        "'books_by_country'" in msg
        and "key (country)" in msg
        and re.search(r"country='(NL|FR)' appears [23] times", msg)
    )
    assert "first column" in msg and "primary_key" in msg
    assert registered(fc) == before  # no target table, no job

    # with a key that identifies a row it builds, and explain() says which key and why
    v = builder.primary_key("book").build()
    try:
        assert "key:      book (given by primary_key; unique" in v.explain()
    finally:
        fc.jobs.unregister_job(v.job)
        fc.drop_table(v.target)
    d = builder.primary_key([]).query("SELECT id, country FROM authors").target("a2").build()
    try:
        assert "key:      id (the default: the query's first column; unique" in d.explain()
    finally:
        fc.jobs.unregister_job(d.job)
        fc.drop_table(d.target)


USER_SCRIPT = os.path.join(os.path.dirname(__file__), "user_script_own_session.py")


def run_user_script(address: str, target: str, pyspark_python: str | None):
    """The user's script in a fresh process with the venv's Python; ``python3`` on the PATH is
    the system's (no pyspark, no grpc); PYSPARK_PYTHON as given (None: unset)."""
    t0 = time.monotonic()
    env = {"PATH": "/usr/bin:/bin", "PYSPARK_PYTHON": pyspark_python}
    out = run_script(USER_SCRIPT, address, target, env=env)
    return out, time.monotonic() - t0


@pytest.mark.skipif(
    subprocess.run(["/usr/bin/python3", "-c", "import pyspark"], capture_output=True).returncode
    == 0,
    reason="needs a system python3 without pyspark",
)
def test_worker_python_is_this_python_or_a_clear_error(fh_server, fc):
    fc.create_table("wp_src", "id BIGINT, balance BIGINT", primary_key=["id"])
    with fc.transaction() as t:
        for i in range(3):
            t.put("wp_src", {"id": i, "balance": 10 * i})
    # PYSPARK_PYTHON unset: the workers would run the system's python3; snapview uses its own
    out, _ = run_user_script(fh_server.address, "wp_view", None)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok rows=3"
    fc.jobs.unregister_job("wp_view")

    # PYSPARK_PYTHON set to a Python without snapview: one line naming it, at build()
    before = registered(fc)
    out, took = run_user_script(fh_server.address, "wp_view2", "/usr/bin/python3")
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("kvstore.errors.InvalidArgument: ") and "PYSPARK_PYTHON" in last
    assert "/usr/bin/python3" in last and sys.executable in last
    assert out.stderr.count("No module named") == 1  # in that line only: no worker failed
    assert took < 120  # the JVM's start-up on a loaded machine; not a query's failure
    assert registered(fc) == before


def test_progress_is_typed_and_its_steps_add_up(spark, fh_server, fc):
    fc.create_table("pg_src", "id BIGINT, v BIGINT", primary_key=["id"])
    with fc.transaction() as t:
        t.put("pg_src", {"id": 1, "v": 1})
    job = (
        MaterializedView.builder(spark)
        .coordinator(fh_server.address)
        .query("SELECT id, v FROM pg_src")
        .target("pg_view")
        .trigger_interval("100 milliseconds")
        .build()
        .start()
    )
    try:
        first = job.await_barrier(fc.tso(), timeout=120)
        wait = job.progress()
        while job.progress().unchanged == 0:  # an epoch after the recomputed first one
            time.sleep(0.05)
        p = job.progress()
    finally:
        job.stop()
    assert isinstance(p, ViewProgress) and p["barriers"] == p.barriers >= 2
    assert p.recomputed >= 1 and p.unchanged >= 1 and p.committed_barrier >= first
    assert p.barrier_wall_ms == physical_ms(p.committed_barrier)
    assert abs(p.last_epoch_s - sum(p.last_steps.values())) < 1e-9
    # the view is incremental: its last epoch read no change, ran the delta rules over nothing
    assert p.last_strategy == "delta" and p.last_changes == 0 and p.last_mutations == 0
    assert list(p.last_steps) == ["open", "delta", "diff", "write", "commit"]
    assert wait.last_barrier <= p.last_barrier
    assert str(p).startswith("view pg_view (job pg_view, incremental, active)")


# A server of its own: register_tables takes every table it has.
rt_server = server_fixture("register_tables", "--barrier-interval", "200ms")


def rows(df) -> list[dict]:
    return sorted((r.asDict() for r in df.collect()), key=lambda r: sorted(r.items()))


def test_register_tables_by_name_latest_and_at_one_barrier(spark, rt_server):
    c = coordinator.connect(rt_server.address)
    c.create_table("acc", "id BIGINT, branch INT, balance BIGINT", primary_key=["id"])
    with c.transaction() as t:
        for i in range(6):
            t.put("acc", {"id": i, "branch": i % 2, "balance": 10})
    job = (
        MaterializedView.builder(spark)
        .coordinator(rt_server.address)
        .query("SELECT branch, SUM(balance) AS total FROM acc GROUP BY branch")
        .target("acc_by_branch")
        .primary_key("branch")
        .trigger_interval("100 milliseconds")
        .build()
        .start()
    )
    try:
        job.await_barrier(c.tso(), timeout=120)
    finally:
        job.stop()  # the view stays at its last barrier: the newest common one
    join = (
        "SELECT a.branch, SUM(a.balance) AS s, MIN(v.total) AS total FROM acc a "
        "JOIN acc_by_branch v ON a.branch = v.branch GROUP BY a.branch ORDER BY a.branch"
    )
    reg = spark_source.register_tables(spark, rt_server.address, consistent=True)
    snap = c.snapshot(["acc", "acc_by_branch"])
    assert reg.names == ("acc", "acc_by_branch") and reg.barrier == snap.barrier > 0
    assert dict(reg.read_ts) == {n: snap.read_ts(n) for n in reg.names}
    with c.transaction() as t:  # after registering: a consistent session does not see it
        t.put("acc", {"id": 0, "branch": 0, "balance": 1000})
    for name in reg.names:
        assert rows(spark.sql(f"SELECT * FROM {name}")) == sorted(
            snap.read(name).to_pylist(), key=lambda r: sorted(r.items())
        )
    got = [r.asDict() for r in spark.sql(join).collect()]
    assert got == [{"branch": 0, "s": 30, "total": 30}, {"branch": 1, "s": 30, "total": 30}]

    latest = spark_source.register_tables(spark, rt_server.address)
    assert latest.names == reg.names and latest.barrier == 0 and not latest.read_ts
    got = [r.asDict() for r in spark.sql(join).collect()]
    assert got == [{"branch": 0, "s": 1020, "total": 30}, {"branch": 1, "s": 30, "total": 30}]
    c.close()


QUIET_SCRIPT = os.path.join(os.path.dirname(__file__), "user_script_quiet.py")
QUIET_MARK = "--- from here at WARN ---"  # user_script_quiet.MARK
# What may remain on stderr of a run that goes well: the JVM prints this itself, before any
# configuration is read (Spark starts it with --add-modules jdk.incubator.vector).
ALLOWED_STDERR = {"WARNING: Using incubator modules: jdk.incubator.vector"}
# snapview's own noise: never, whatever the log level
NEVER = ("DataSourceManager", "adaptive.enabled", "fork_posix", "skipping fork()", "Traceback")


def test_a_clean_run_prints_only_what_it_asked_for(tmp_path):
    """One user's script (one JVM): two views at the session's level, then two at WARN."""
    srv = next(gen := serve(tmp_path / "quiet", "--barrier-interval", "200ms"))
    try:
        out = run_script(QUIET_SCRIPT, srv.address)
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout == "ok 2\nok 2\n"
        lines = out.stderr.splitlines()
        assert QUIET_MARK in lines, out.stderr
        assert not [ln for ln in lines if any(n in ln for n in NEVER)], out.stderr
        # local_session: Spark at ERROR from the JVM's start, no banner
        before = lines[: lines.index(QUIET_MARK)]
        assert set(before) <= ALLOWED_STDERR, out.stderr
        # at WARN (a user's choice) Spark's own warnings show ("Failed to cancel job group" on
        # stop, "falling behind" on a loaded machine); snapview's do not (NEVER, above)
    finally:
        gen.close()
