"""The README says what exists and its tour fits together (issue 24, item 13)."""

from __future__ import annotations

import argparse
import os
import re

from snapview.cli import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = open(os.path.join(ROOT, "README.md")).read()
TOUR = open(os.path.join(ROOT, "scripts", "examples", "spark_tour.py")).read()


def _commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


def test_the_status_table_lists_every_cli_command():
    row = next(ln for ln in README.splitlines() if ln.startswith("| `snapview` CLI:"))
    listed = {name.split()[0] for name in re.findall(r"`([a-z][a-z ]*)`", row)}
    assert set(_commands()) <= listed, sorted(set(_commands()) - listed)


def test_the_tour_makes_the_columns_its_views_and_joins_use():
    """The tour's accounts table is the one its view (GROUP BY branch) and its register_tables
    join (USING (branch)) read: every place that makes it gives it a branch column."""
    made = re.findall(r'create_table\("accounts", "([^"]+)"', README + TOUR)
    assert made and all("branch" in schema for schema in made), made
    assert "GROUP BY branch" in README and "USING (branch)" in README
    for put in re.findall(r'put\("accounts", (\{[^}]*\})', README + TOUR):
        assert '"branch"' in put, put
