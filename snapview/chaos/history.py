"""The history of a chaos run: every operation as invoke, then ok / fail / info (Jepsen's model).

``ok`` means the operation took effect, ``fail`` that it certainly did not, ``info`` that its
outcome is unknown (the process died, the server did not answer). Each process appends JSON lines
to its own file, flushed per line, so a kill -9 loses at most the line being written.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"


@dataclass
class Op:
    process: str
    type: str
    f: str
    value: dict = field(default_factory=dict)
    time: float = 0.0
    ts: int = 0  # commit ts for ok writes, read ts for reads
    error: str = ""


class Recorder:
    """Appends the ops of one process to ``path``."""

    def __init__(self, path: str, process: str) -> None:
        self.process = process
        self._f = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process

    def record(self, type_: str, f: str, value: dict, ts: int = 0, error: str = "") -> Op:
        op = Op(self.process, type_, f, value, time.time(), ts, error)
        self._f.write(json.dumps(asdict(op)) + "\n")
        return op

    def close(self) -> None:
        self._f.close()


def load(directory: str) -> list[Op]:
    """Every op recorded under ``directory`` (a torn last line of a killed process is skipped)."""
    ops = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(directory, name)) as f:
            for line in f:
                try:
                    ops.append(Op(**json.loads(line)))
                except (json.JSONDecodeError, TypeError):
                    continue
    return ops


def completions(ops: list[Op]) -> dict[tuple[str, str], Op]:
    """(process, op id) -> the op's final record; an invoke without one counts as info."""
    out: dict[tuple[str, str], Op] = {}
    for op in ops:
        key = (op.process, op.value.get("id", ""))
        if op.type == INVOKE:
            out.setdefault(key, Op(op.process, INFO, op.f, op.value, op.time, 0, "no completion"))
        else:
            out[key] = op
    return out
