"""The runnable examples in scripts/examples and ``snapview demo bank``, run for real."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scripts.examples import author_posts, shopping
from tests.conftest import serve


@pytest.fixture(scope="module")
def ex_server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("examples"), "--barrier-interval", "200ms")


def test_author_posts_matches_posts_at_every_read(spark, ex_server):
    lines = []
    assert author_posts.run(spark, ex_server.address, rounds=4, out=lines.append) == []
    assert "strategy: full_recompute" in lines[0]
    assert lines[-1].startswith("author_posts: 0 mismatches")


def test_shopping_join_never_mixes_barriers(spark, ex_server):
    r = shopping.run(spark, ex_server.address, seconds=6, out=lambda _: None)
    assert r["consistent_reads"] >= 20 and r["consistent_bad"] == 0
    assert r["latest_reads"] == r["consistent_reads"]


def test_demo_bank_command(tmp_path):
    """`snapview demo bank`, shortened: the live lines, 0 violations in snapshot mode."""
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
