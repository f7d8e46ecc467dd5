"""Named fail points in production code, armed by SNAPVIEW_FAILPOINTS (TiKV's fail_point!).

    SNAPVIEW_FAILPOINTS="epoch.commit.after_primary=panic;sink.prewrite.mid=50%sleep(200)"

Actions: ``panic`` (SIGKILL this process, as a crash would), ``panic_group`` (SIGKILL the process
group of this process's session leader, then this process's own group: a Spark task taking down
the local-mode query it belongs to, whose Python workers sit in a group of their own),
``sleep(ms)``,
``error`` (raise FailPointError), ``on`` (nothing: a planted fault the code asks for with
``armed(name)``, e.g. ``drop.keep_job_records=on``). A ``N%`` prefix fires with that probability
(seeded by SNAPVIEW_FAILPOINTS_SEED). Disarmed, ``fail_point`` is one dict truth test.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time

from kvstore.errors import SnapviewError

_SPEC = re.compile(r"^(?:(\d+(?:\.\d+)?)%)?(panic_group|panic|error|on|sleep\((\d+)\))$")


class FailPointError(SnapviewError):
    code = "UNAVAILABLE"


def parse(spec: str) -> dict[str, tuple[float, str, int]]:
    """``name=[N%]action;...`` -> {name: (probability, action, sleep_ms)}; ValueError if bad."""
    armed = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, _, action = part.partition("=")
        m = _SPEC.match(action.strip())
        if not name.strip() or not m:
            raise ValueError(
                f"bad fail point {part!r}: want name=[N%]panic|panic_group|error|on|sleep(ms)"
            )
        prob = float(m.group(1)) / 100 if m.group(1) else 1.0
        kind = "sleep" if m.group(3) else m.group(2)
        armed[name.strip()] = (prob, kind, int(m.group(3) or 0))
    return armed


_ARMED = parse(os.environ.get("SNAPVIEW_FAILPOINTS", ""))
_RNG = random.Random(int(os.environ.get("SNAPVIEW_FAILPOINTS_SEED", "0")))


def fail_point(name: str) -> None:
    """Trigger the fail point ``name`` if it is armed."""
    if not _ARMED:
        return
    armed = _ARMED.get(name)
    if armed is None:
        return
    prob, kind, ms = armed
    if prob < 1.0 and _RNG.random() >= prob:
        return
    if kind == "panic":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "panic_group":
        for group in (os.getpgid(os.getsid(0)), os.getpgid(0)):
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    elif kind == "sleep":
        time.sleep(ms / 1000)
    elif kind == "on":
        return
    else:
        raise FailPointError(f"fail point {name} injected an error")


def armed(name: str) -> bool:
    """Whether the fail point ``name`` fires now (a planted fault: the caller does the wrong
    thing on purpose); always False when disarmed."""
    if not _ARMED:
        return False
    armed = _ARMED.get(name)
    return armed is not None and (armed[0] >= 1.0 or _RNG.random() < armed[0])


def arm(spec: str) -> None:
    """Arm fail points in this process (tests); ``arm("")`` disarms all."""
    _ARMED.clear()
    _ARMED.update(parse(spec))
