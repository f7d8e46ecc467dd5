"""Every fallback has a stable reason code (spark_sink.ivm.plan.REASON_CODES): each code the
engine raises is in the table, each code of the table is raised somewhere and listed in
docs/design.md §6.4, and an unknown code is refused where it is made."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_sink.ivm.plan import REASON_CODES, Unsupported

ROOT = Path(__file__).resolve().parents[2]


def _raised() -> set[str]:
    codes = set()
    for p in (ROOT / "spark_sink").rglob("*.py"):
        text = p.read_text()
        codes |= set(re.findall(r'code="([A-Z_]+)"', text))
        codes |= set(re.findall(r'"\[([A-Z_]+)\] ', text))  # explain()'s own ([ASKED], ...)
    return codes


def test_every_code_raised_is_known_and_every_known_code_is_raised():
    assert _raised() == set(REASON_CODES)


def test_design_lists_every_code():
    design = (ROOT / "docs" / "design.md").read_text()
    section = design[design.index("### 6.4 Incremental maintenance") :]
    section = section[: section.index("\n### ", 10)]
    listed = set(re.findall(r"^\| `([A-Z_]+)` \|", section, flags=re.MULTILINE))
    assert listed == set(REASON_CODES)


def test_an_unknown_code_is_refused():
    with pytest.raises(ValueError, match="unknown reason code 'NOPE'"):
        Unsupported("x", code="NOPE")
    assert Unsupported("y", code="LIMIT").code == "LIMIT"
