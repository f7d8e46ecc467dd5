"""Which job adds the delay (issue 15; FLIP-276's fourth question), against a real ``snapview
serve`` (barrier interval 100 ms), driven without Spark through the job protocol: a cascade
r1 -> A -> B <- r2, where the test plays both view jobs and makes one of them slow."""

from __future__ import annotations

import json
import re
import time

import pytest

from coordinator.jobs import JobState
from snapview import cli as snapview_cli
from snapview.commands import topology
from tests.conftest import client_fixture, server_fixture, wait_for

SLOW_S = 0.6  # how long the slow job takes over its epoch


fast = server_fixture("delay", "--barrier-interval", "100ms")
c = client_fixture("fast")


@pytest.fixture
def cascade(c, table_name):
    """r1 -> A (job jA) -> B (job jB) <- r2; returns the table names."""
    r1, r2, a, b = (f"{table_name}_{s}" for s in ("r1", "r2", "a", "b"))
    for t in (r1, r2):
        c.create_table(t, "id BIGINT, v BIGINT", primary_key=["id"])
    for t in (a, b):
        c.create_table(t, "id BIGINT, v BIGINT", primary_key=["id"], kind="view")
    c.jobs.register_job(f"{a}_job", a, [r1], kind="view", query="SELECT * FROM r1")
    c.jobs.register_job(f"{b}_job", b, [a, r2], kind="view", query="SELECT * FROM a JOIN r2")
    return r1, r2, a, b


def _commit(c, job, barrier):
    e = c.jobs.open_transaction(job, barrier)
    c.jobs.commit_transaction(job, barrier, e.start_ts)


def _first_barrier(c, job):
    return wait_for(lambda: c.jobs.plan_barriers(job).barriers, 10, f"a plan for {job}")[0].barrier


def _run_cascade(c, cascade, slow):
    """Both jobs take one barrier T; the job writing table ``slow`` takes SLOW_S over its epoch.
    Returns T and the delay rows by table."""
    r1, r2, a, b = cascade
    t = _first_barrier(c, f"{a}_job")
    time.sleep(0.1)  # the barrier thread polls roots every 25 ms: let it see r1, r2 reach T
    if slow == a:
        time.sleep(SLOW_S)
    _commit(c, f"{a}_job", t)
    assert _first_barrier(c, f"{b}_job") == t  # B starts at the newest barrier all inputs have
    if slow == b:
        time.sleep(SLOW_S)
    _commit(c, f"{b}_job", t)
    return t, {d.table: d for d in c.delay().tables}


def _check_sums(row):
    """The path's own times add up to the E2E delay; each wait is the sum of the owns above."""
    own = [p.own_ms for p in row.path]
    assert sum(own) == row.e2e_delay_ms, row
    for i, p in enumerate(row.path):
        assert p.wait_ms == sum(own[i + 1 :]), row
        assert p.own_ms >= 0 and p.wait_ms >= 0
    assert sum(p.bottleneck for p in row.path) == 1


def test_a_slow_downstream_job_is_the_bottleneck(c, cascade):
    r1, r2, a, b = cascade
    t, rows = _run_cascade(c, cascade, slow=b)
    rb, ra = rows[b], rows[a]
    assert rb.barrier == t and ra.barrier == t
    # B's last input was A (committed before B's slow epoch began), A's was r1.
    assert [p.table for p in rb.path] == [b, a, r1]
    assert [p.job for p in rb.path] == [f"{b}_job", f"{a}_job", ""]
    assert all(p.barrier == t for p in rb.path)
    assert rb.path[0].bottleneck and rb.path[0].own_ms >= SLOW_S * 1000
    assert not rb.path[1].bottleneck and rb.path[1].own_ms < SLOW_S * 1000
    assert rb.e2e_delay_ms >= SLOW_S * 1000
    _check_sums(rb)
    # A's own row: a single-path chain, own + wait = E2E, and A is its own bottleneck.
    assert [p.table for p in ra.path] == [a, r1]
    assert ra.path[0].own_ms + ra.path[0].wait_ms == ra.e2e_delay_ms
    assert ra.path[0].bottleneck and ra.e2e_delay_ms < rb.e2e_delay_ms
    _check_sums(ra)
    # A root's row is itself alone.
    assert [p.table for p in rows[r2].path] == [r2] and rows[r2].path[0].wait_ms == 0


def test_a_slow_upstream_job_is_the_bottleneck(c, cascade):
    r1, r2, a, b = cascade
    t, rows = _run_cascade(c, cascade, slow=a)
    rb, ra = rows[b], rows[a]
    assert [p.table for p in rb.path] == [b, a, r1]
    assert not rb.path[0].bottleneck and rb.path[0].own_ms < SLOW_S * 1000
    assert rb.path[1].bottleneck and rb.path[1].own_ms >= SLOW_S * 1000
    assert rb.path[0].wait_ms >= SLOW_S * 1000  # B waited for A
    _check_sums(rb)
    assert ra.path[0].bottleneck and ra.path[0].own_ms >= SLOW_S * 1000
    assert ra.path[0].own_ms + ra.path[0].wait_ms == ra.e2e_delay_ms
    _check_sums(ra)


def test_cli_delay_shows_the_path_and_marks_the_bottleneck(fast, c, cascade, capsys):
    r1, r2, a, b = cascade
    _run_cascade(c, cascade, slow=b)
    addr = ["--coordinator", fast.address]
    assert snapview_cli.main(["delay", *addr, "--format", "json"]) == 0
    rows = {r["table"]: r for r in json.loads(capsys.readouterr().out)["tables"]}
    assert rows[b]["bottleneck"] == b and rows[a]["bottleneck"] == a
    path = rows[b]["path"]
    assert [p["table"] for p in path] == [b, a, r1] and path[0]["bottleneck"]
    assert path[0]["own_ms"] >= SLOW_S * 1000 and path[0]["job"] == f"{b}_job"
    assert sum(p["own_ms"] for p in path) == rows[b]["e2e_delay_ms"]

    assert snapview_cli.main(["delay", *addr]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(b + " "))
    # The row, then its path indented: B (marked), A, r1.
    assert re.fullmatch(rf"\s+{b}\s+job {b}_job\s+own_ms\s+\d+\s+wait_ms\s+\d+ \*", lines[i + 1])
    assert re.match(rf"\s+<- {a}\s+job {a}_job\s+own_ms\s+\d+\s+wait_ms\s+\d+$", lines[i + 2])
    assert re.match(rf"\s+<- {r1}\s+job -\s+own_ms", lines[i + 3])
    assert int(re.search(r"own_ms\s+(\d+)", lines[i + 1]).group(1)) >= SLOW_S * 1000
    j = next(j for j, line in enumerate(lines) if line.startswith(r2 + " "))
    assert not lines[j + 1 :] or not lines[j + 1].startswith(" ")  # a root's path: not printed


def _dot_nodes(dot):
    """table -> (fillcolor, barriers behind, job state) from the DOT's node lines."""
    out = {}
    for m in re.finditer(
        r'^  "([^"]+)" \[shape=\w+, style=filled, fillcolor=(\w+), '
        r'label="[^"]*\\n(\d+) behind, e2e -?\d+ ms(?:, (\w+))?"\];$',
        dot,
        re.M,
    ):
        out[m.group(1)] = (m.group(2), int(m.group(3)), m.group(4) or "")
    return out


def test_topology_dot_colors_tables_by_lag(fast, c, cascade, capsys):
    r1, r2, a, b = cascade
    red, green = topology.LAG_COLORS["red"], topology.LAG_COLORS["green"]
    t = _first_barrier(c, f"{a}_job")
    _commit(c, f"{a}_job", t)
    c.jobs.report_job(f"{a}_job", JobState.FAILED, "ValueError: boom")  # failed: red whatever lag
    # B never computes: once more than LAG_YELLOW_MAX barriers are issued, it is red by lag.
    wait_for(
        lambda: {d.table: d for d in c.delay().tables}[b].barriers_behind > topology.LAG_YELLOW_MAX,
        10,
        "B to fall more than LAG_YELLOW_MAX barriers behind",
    )
    assert snapview_cli.main(["topology", "--coordinator", fast.address, "--format", "dot"]) == 0
    dot = capsys.readouterr().out
    assert "// lag: " in dot and f"{red} more or writer job failed/lost" in dot
    nodes = _dot_nodes(dot)
    assert nodes[a][0] == red and nodes[a][2] == "failed"
    assert nodes[b][0] == red and nodes[b][1] > topology.LAG_YELLOW_MAX
    assert nodes[r1][0] == green and nodes[r2][0] == green
    for color, behind, state in nodes.values():  # every node is colored by the same rule
        assert color == topology.LAG_COLORS[topology.lag_level(behind, state)]
    assert f'"{r1}" -> "{a}" [label="{a}_job"];' in dot  # edges as before


def test_lag_levels():
    lv = topology.lag_level
    g, y = topology.LAG_GREEN_MAX, topology.LAG_YELLOW_MAX
    assert [lv(0, ""), lv(g, "running"), lv(g + 1, ""), lv(y, ""), lv(y + 1, "")] == [
        "green",
        "green",
        "yellow",
        "yellow",
        "red",
    ]
    assert lv(0, "failed") == "red" and lv(0, "lost") == "red" and lv(0, "not_started") == "green"


def test_an_upstream_version_missing_at_the_barrier_falls_back_to_its_next(c, cascade):
    """B commits barrier T while A has no version at T (the protocol only checks that T was
    issued), and A commits a later barrier T2 after B: A's entry uses its version at T2, capped
    so that the path still adds up."""
    r1, r2, a, b = cascade
    t = _first_barrier(c, f"{a}_job")
    _commit(c, f"{b}_job", t)
    t2 = wait_for(
        lambda: [x.barrier for x in c.jobs.plan_barriers(f"{a}_job").barriers if x.barrier > t],
        10,
        "a later barrier for A",
    )[0]
    _commit(c, f"{a}_job", t2)
    rb = {d.table: d for d in c.delay().tables}[b]
    assert rb.barrier == t
    entry = next(p for p in rb.path if p.table == a)  # A arrived "last" (after B even)
    assert entry.barrier == t2 and rb.path[0].table == b and rb.path[0].own_ms == 0
    _check_sums(rb)


def test_a_view_never_started_is_as_late_as_its_wait_and_state_tables_are_state(
    fast, c, table_name, capsys
):
    """issue 24, item 13: a not_started view behind many barriers showed lag_ms 0, and a view's
    state table was labelled root (``snapview tables`` says state)."""
    src, view, st = (f"{table_name}_{s}" for s in ("src", "v", "v__sv_groups"))
    c.create_table(src, "id BIGINT, v BIGINT", primary_key=["id"])
    c.create_table(view, "id BIGINT, v BIGINT", primary_key=["id"], kind="view")
    c.create_table(st, "g0 BIGINT, n BIGINT", primary_key=["g0"], kind="state")
    c.jobs.register_job(f"{view}_job", view, [src], kind="view", query="SELECT * FROM src")
    wait_for(
        lambda: any(t.table == view and t.barriers_behind >= 5 for t in c.delay().tables),
        10,
        "5 barriers the view has not computed",
    )
    assert snapview_cli.main(["delay", "--coordinator", fast.address, "--format", "json"]) == 0
    rows = {r["table"]: r for r in json.loads(capsys.readouterr().out)["tables"]}
    assert rows[view]["job_state"] == "not_started"
    assert rows[view]["barrier_lag_ms"] >= 400  # 5 barriers of 100 ms at least, not 0
    assert rows[st]["kind"] == "state"
    assert rows[src]["kind"] == "root"
