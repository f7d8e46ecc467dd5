"""Text the CLI did not write (lease holders, revisions' who and errors, hold names) is printed
with every control character escaped: the renderers of `snapview leases` and `snapview
revisions` as well as `snapview jobs` (tests/integration/test_bad_input.py)."""

from __future__ import annotations

from types import SimpleNamespace

from coordinator.revisions import Revision
from snapview.commands.leases import format_gc_report, gc_report
from snapview.commands.revisions import format_revisions
from snapview.terminal import shown

EVIL = "x\x1b]0;t\x07\x1b[2J\r\n\t\x7f\x9b\u202ey"
CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0), 0x202E)]


def _clean(lines: list[str]) -> None:
    text = "\n".join(lines)
    assert all(line.count("\n") == 0 for line in lines)
    assert not any(c in text.replace("\n", "") for c in CONTROLS), text


def test_shown_escapes_controls_and_keeps_printable_text():
    assert shown(EVIL) == "x\\x1b]0;t\\x07\\x1b[2J\\r\\n\\t\\x7f\\x9b\\u202ey"
    assert shown("Zoë ✓ 日本 a\\b") == "Zoë ✓ 日本 a\\b"
    assert shown(42) == "42"


def test_snapview_revisions_escapes_who_table_and_error():
    rev = Revision(
        3, f"t{EVIL}", "rollback", "aborted", f"who{EVIL}", 1, 2, 5, 0, 6, 0, 0, 1, 0, "", "",
        (), f"err{EVIL}", "k",
    )  # fmt: skip
    lines = format_revisions([rev])
    _clean(lines)
    assert "who" + shown(EVIL) in "\n".join(lines)


def test_snapview_leases_escapes_holders_and_hold_names():
    progress = SimpleNamespace(
        passes=0, steps=0, versions_removed=0, records_examined=0, records_deleted=0,
        step_seconds=0.0, pass_safepoint=0, pass_phase="", last_pass_seconds=0.0,
        epoch_records_removed=0, barriers_removed=0,
    )  # fmt: skip
    st = SimpleNamespace(
        enabled=True, safepoint=1 << 18, retention_s=1.0, interval_s=1.0, now_ms=10, progress=progress,
        holds=[SimpleNamespace(kind="lease", name=f"h{EVIL}", ts=1 << 18)],
        leases=[SimpleNamespace(id="ab", holder=f"h{EVIL}", ts=1 << 18, ttl_ms=1000, expires_ms=20)],
        lease_count=1, total_leases=1, oldest_lease_ts=1 << 18, next_page_token="",
    )  # fmt: skip
    lines = format_gc_report(gc_report(st))
    _clean(lines)
    assert sum(("h" + shown(EVIL)) in line for line in lines) == 2
