"""The library packages change nothing process-wide for their importers (issue 24, item 1): no
environment variable, fork handler, signal handler or logging set-up in kvstore, coordinator,
spark_source or spark_sink, but for one documented fork hook (``ALLOWED``). The ``snapview``
package is the application (its CLI may set its own process up) and is not checked."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("kvstore", "coordinator", "spark_source", "spark_sink")
PROCESS_WIDE = re.compile(
    r"os\.register_at_fork\(|signal\.signal\(|logging\.basicConfig\(|os\.putenv\("
    r"|os\.environ\.(setdefault|update|pop)\(|os\.environ\[[^]]+\]\s*=(?!=)"
    r"|\.addHandler\(|\.setLevel\(|sys\.setswitchinterval\(|gc\.freeze\("
)


def offenders(text: str) -> list[str]:
    """The lines of ``text`` that call one of PROCESS_WIDE (not comments, nor a docstring's
    ``quoted`` example)."""
    return [
        ln.strip()
        for ln in text.splitlines()
        if PROCESS_WIDE.search(ln) and not ln.strip().startswith("#") and "``" not in ln
    ]


def test_the_pattern_catches_what_it_must():
    planted = 'os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")\nos.register_at_fork(before=f)\nx = os.environ["A"]\nos.environ["B"] = "1"\nsys.setswitchinterval(0.001)\n'
    assert offenders(planted) == [
        'os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")',
        "os.register_at_fork(before=f)",
        'os.environ["B"] = "1"',
        "sys.setswitchinterval(0.001)",
    ]


# The one exception, documented in coordinator.tso_client.prepare_fork and design.md §5.7: a
# fork hook acting on the client's own TSO streams only, without which a forked child can abort
# inside gRPC's core.
ALLOWED = {"coordinator/tso_client.py": ["os.register_at_fork(before=prepare_fork)"]}


def test_library_packages_change_nothing_process_wide():
    found = {
        str(p.relative_to(ROOT)): hits
        for pkg in LIBRARIES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if (hits := offenders(p.read_text()))
    }
    assert found == ALLOWED
