"""The DuckDB peer's result check (scripts/peer_duckdb.compare_rows): a benchmark peer whose
views differ from snapview's must stop the run, so a peer that skipped work cannot look fast."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from peer_duckdb import compare_rows  # noqa: E402


def test_equal_rows_in_any_order_pass_and_float_noise_is_ignored():
    a = [{"g": 1, "n": 2, "avg": 0.1 + 0.2}, {"g": 2, "n": 1, "avg": None}]
    b = [{"g": 2, "n": 1, "avg": None}, {"g": 1, "n": 2, "avg": 0.3}]
    compare_rows("peer", a, "snapview", b)


@pytest.mark.parametrize(
    "theirs",
    [
        [{"g": 1, "n": 3}],  # a different count
        [{"g": 1, "n": 2}, {"g": 1, "n": 2}],  # a row twice
        [],  # a view the peer filled and snapview did not
    ],
)
def test_a_difference_stops_the_run_naming_both_sides(theirs):
    with pytest.raises(SystemExit, match=r"peer agg differs from snapview's agg_inc"):
        compare_rows("peer agg", [{"g": 1, "n": 2}], "snapview's agg_inc", theirs)
