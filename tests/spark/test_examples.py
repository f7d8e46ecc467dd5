"""The runnable examples in scripts/examples and ``snapview demo bank``, run for real."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from scripts.examples import author_posts, shopping
from snapview.demos import bank
from tests.conftest import ROOT, run_script, server_fixture

ex_server = server_fixture("examples", "--barrier-interval", "200ms")


def test_author_posts_matches_posts_at_every_read(spark, ex_server):
    lines = []
    assert author_posts.run(spark, ex_server.address, rounds=4, out=lines.append) == []
    # the correlated subquery becomes an aggregate LEFT OUTER joined to authors: incremental
    assert "strategy: incremental (asked: auto)" in lines[0]
    assert "author_posts__sv_groups" in lines[0]
    assert lines[-1].startswith("author_posts: 0 mismatches")


def test_shopping_join_never_mixes_barriers(spark, ex_server):
    """FLIP-276's shopping example, incrementally end to end (the join of two views too): its
    invariant (avg price = unit price) holds in every consistent read."""
    r = shopping.run(spark, ex_server.address, seconds=6, out=lambda _: None)
    assert r["consistent_reads"] >= 20 and r["consistent_bad"] == 0
    assert r["latest_reads"] == r["consistent_reads"]
    assert set(r["strategies"].values()) == {"incremental"}, r["strategies"]
    assert set(r["last_steps"].values()) == {"delta"}, r["last_steps"]


def test_demo_bank_command(tmp_path):
    """`snapview demo bank --revise`, shortened: the live lines, 0 violations in snapshot mode,
    and a revision of accounts reaching all three views while the checker reads."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "snapview.cli",
            "demo",
            "bank",
            "--duration",
            "6s",
            "--accounts",
            "200",
            "--writers",
            "2",
            "--barrier-interval",
            "300ms",
            "--revise",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    live = [ln for ln in lines if ln.startswith("t=")]
    assert len(live) >= 4 and all("violations snapshot=0" in ln for ln in live)
    assert "freshness=" in live[-1] and "barrier=" in live[-1]
    done = lines[-1]
    assert done.startswith("done:") and "with 0 violations in snapshot mode" in done
    # the three views are maintained incrementally (explain() says so)
    assert sum("strategy: incremental (asked: auto)" in ln for ln in lines) == 3, lines
    # start-up is never silent: each slow step says what it is doing, then how long it took
    for step in ("Starting Spark", "Building the 3 views", "Waiting for the views' first barrier"):
        i = next(i for i, ln in enumerate(lines) if ln.startswith(step))
        assert any(ln.startswith("  done in ") for ln in lines[i + 1 : i + 8]), lines[i:]
    # the summary: four lines before "done:"
    summary = lines[-5:-1]
    assert summary[0].startswith("summary after ") and " transfers:" in summary[0]
    assert re.fullmatch(
        r"  snapshot mode: \d+ consistent reads, 0 violations: every read saw one state",
        summary[1],
    )
    assert re.fullmatch(
        r"  latest mode:   \d+ reads, \d+ saw tables at different states.*", summary[2]
    )
    assert summary[3].startswith("  freshness:     median ")
    # --revise: the buggy batch shows in a consistent read, then the revision reaches every view
    jump = next(ln for ln in lines if ln.startswith("revise: branch 0 total "))
    before, after = map(int, re.match(r"revise: branch 0 total (\d+) .* -> (\d+) ", jump).groups())
    assert after > before, jump
    rev = next(ln for ln in lines if ln.startswith("revise: revision 1: accounts back to "))
    restored, removed = map(int, re.search(r": done, (\d+) restored, (\d+) removed", rev).groups())
    assert restored + removed > 0, rev
    progress = [ln for ln in lines if ln.startswith("  revision 1: barrier ")]
    assert progress and progress[-1].count("✓") == 3, progress
    assert len(progress) == len(set(progress)), progress  # printed when it changes, not per poll
    revised = next(ln for ln in lines if ln.startswith("revised: the whole topology shows"))
    x = re.match(r"revised: the whole topology shows the revision at barrier (\d+) ", revised)[1]
    assert revised.endswith("(accounts, branch_balance, total_balance, total_from_branches)")
    assert any(ln.endswith(f"invariant at {x}: holds") for ln in lines), lines
    assert any(ln.startswith("revised: audit record: revision 1: ") for ln in lines)
    assert not any(ln.startswith("revision demo failed") for ln in lines)
    # latest mode has no barrier: its examples name the read timestamp instead
    assert not any("at barrier 0" in ln for ln in lines)
    assert all("all tables at ts" in ln for ln in lines if ln.startswith("example latest"))


def test_demo_summary_says_when_views_fall_behind():
    checker = bank.Checker(client=None, expected_total=0, accounts=0)  # type: ignore[arg-type]
    checker.reads = {"snapshot": 10, "latest": 10}
    checker.violations = {"snapshot": 0, "latest": 4}
    checker.freshness_samples = [1000, 3000, 9000]
    lines = bank.summary_lines(checker, 500, 30.2, behind=7, barrier_interval="1s")
    assert lines[0] == "summary after 30s, 500 transfers:"
    assert lines[2] == "  latest mode:   10 reads, 4 saw tables at different states (40%)"
    assert lines[3] == (
        "  freshness:     median 3.0s, at the end 9.0s; views 7 barriers behind at the end "
        "(barriers every 1s)"
    )
    kept_up = bank.summary_lines(checker, 500, 30, behind=1, barrier_interval="1s")
    assert kept_up[3].endswith("views kept up with the barriers")


TOUR = os.path.join(ROOT, "scripts", "examples", "spark_tour.py")


def test_readme_spark_section_is_the_tour_script():
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme[readme.index("### Spark\n") : readme.index("### A materialized view")]
    block = section[section.index("```python\n") + len("```python\n") : section.index("```\n")]
    assert block == open(TOUR).read()


def test_spark_tour_runs(ex_server):
    out = run_script(TOUR, ex_server.address)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "accounts_log rows: 5" in out.stdout
    assert "accounts_log rows after the load: 7" in out.stdout  # the batch writer's epoch
    assert out.stdout.count("insert") == 5  # the net changes in (t0, t1]: five new accounts
