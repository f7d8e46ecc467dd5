"""The walk: generate (or replay) ops, run each under a deadline, check the invariants after it,
and on a failure shrink the sequence and print how to replay it.

``KNOWN_OPEN`` gates what today's code is known to get wrong (issue 24's open items): the walk
does not generate those ops or situations. Empty it as the items are fixed; ``LIFECYCLE_SKIP``
(comma-separated op kinds or tags, see ``ops.tags``) skips more for one run.
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from tests.lifecycle import invariants
from tests.lifecycle.model import Model
from tests.lifecycle.ops import CHECK_AFTER, SPARK_OPS, Gen, Op, run
from tests.lifecycle.world import Violation, World

# Op kinds and situations (ops.tags) today's code gets wrong, by issue 24 item. The walk does not
# generate them; empty this once the items are fixed.
KNOWN_OPEN: dict[str, str] = {}

SERVER_OP_DEADLINE_S = 60.0
SPARK_OP_DEADLINE_S = 300.0
RESTART_DEADLINE_S = 120.0
INVARIANTS_DEADLINE_S = 90.0


@dataclass
class Config:
    """One walk: ``seed``, at most ``steps`` ops or ``seconds`` of walking (whichever first),
    Spark ops or not, what to ``skip`` (on top of KNOWN_OPEN), ``env`` for the server (fail
    points), ``check_every`` steps a full ``snapview check``, a ``plant``ed model fault (the
    shrinking self-test) and the time budget for shrinking a failure."""

    seed: int = 1
    steps: int = 10_000
    seconds: float = 60.0
    spark: bool = False
    skip: frozenset[str] = frozenset()
    env: dict[str, str] = field(default_factory=dict)
    check_every: int = 10
    plant: str = ""
    shrink_s: float = 120.0
    spark_every: int = 0  # >0: at most one Spark op per this many steps (short runs)
    run_check: bool = True  # `snapview check` after CHECK_AFTER ops and every check_every steps

    @property
    def skipped(self) -> frozenset[str]:
        return self.skip | frozenset(KNOWN_OPEN)


@dataclass
class Result:
    seed: int
    ops: list[Op]  # what ran, the failing op last
    failure: Violation | None = None
    steps: int = 0
    elapsed_s: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failure is None


def skip_from_env() -> frozenset[str]:
    return frozenset(filter(None, os.environ.get("LIFECYCLE_SKIP", "").split(",")))


def with_deadline(fn: Callable[[], object], seconds: float, what: str) -> object:
    """``fn()`` in a thread; a call still running after ``seconds`` is a ``hang`` with every
    thread's stack (faulthandler), so a deadlock is a failure, not a stuck test."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["e"] = e

    t = threading.Thread(target=target, name=f"lifecycle {what}", daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        with tempfile.TemporaryFile("w+") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
            f.seek(0)
            stacks = f.read()
        raise Violation("hang", f"{what} still running after {seconds:.0f}s\n{stacks[-6000:]}")
    if "e" in box:
        raise box["e"]  # type: ignore[misc]
    return box.get("v")


def _as_violation(e: BaseException, where: str) -> Violation:
    if isinstance(e, Violation):
        return e
    tb = "".join(traceback.format_exception_only(type(e), e)).strip()
    return Violation(f"error:{where}:{type(e).__name__}", f"{tb[:1500]}")


def _stop_jobs(m: Model) -> None:
    """Stop what runs in this process's Spark (streams, view jobs) before the world goes."""
    if m.stream.query is not None:
        try:
            m.stream.query.stop()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - cleanup
            pass
    for vm in m.views.values():
        if vm.job is not None:
            try:
                vm.job._halt()  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - cleanup
                pass
    for _, lease in m.leases.values():
        try:
            lease.release()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - cleanup
            pass


def execute(
    ops: Iterable[Op],
    cfg: Config,
    spark_factory: Callable[[], object] | None = None,
    log: Callable[[str], None] = lambda s: None,
    model: Model | None = None,
) -> Result:
    """Run ``ops`` (a list to replay, or a generator) on a fresh world; stop at the first
    violation. Every op and the invariants after it run under a deadline."""
    m = model if model is not None else Model()
    w = World(env=dict(cfg.env), spark_factory=spark_factory)
    res = Result(cfg.seed, [])
    t0 = time.monotonic()
    try:
        with_deadline(w.start, RESTART_DEADLINE_S, "server start")
        for i, op in enumerate(ops):
            res.ops.append(op)
            res.steps = i + 1
            where = op.kind
            try:
                deadline = (
                    SPARK_OP_DEADLINE_S
                    if op.kind in SPARK_OPS
                    else RESTART_DEADLINE_S
                    if op.kind == "restart"
                    else SERVER_OP_DEADLINE_S
                )
                status = with_deadline(lambda op=op: run(op, w, m), deadline, str(op))
                res.counts[f"{op.kind}:{status}"] = res.counts.get(f"{op.kind}:{status}", 0) + 1
                _plant(cfg, op, m)
                log(f"[{i:4d}] {op} -> {status}")
                where = "invariants"
                skip = cfg.skipped
                with_deadline(
                    lambda i=i, skip=skip: invariants.check_all(w, m, i, skip),
                    INVARIANTS_DEADLINE_S,
                    "invariants",
                )
                due = op.kind in CHECK_AFTER or (i + 1) % cfg.check_every == 0
                if cfg.run_check and due:
                    with_deadline(lambda: invariants.check_clean(w), 120, "snapview check")
            except BaseException as e:  # noqa: BLE001 - every failure is a violation
                if isinstance(e, KeyboardInterrupt):
                    raise
                res.failure = _as_violation(e, where)
                log(f"[{i:4d}] FAILED: {res.failure}")
                return res
        if cfg.run_check:
            try:
                with_deadline(lambda: invariants.check_clean(w), 120, "snapview check")
            except BaseException as e:  # noqa: BLE001
                res.failure = _as_violation(e, "final check")
        return res
    finally:
        res.elapsed_s = time.monotonic() - t0
        _stop_jobs(m)
        w.close()


def _plant(cfg: Config, op: Op, m: Model) -> None:
    """A planted model fault for the shrinking self-test: ``forget_recreated`` makes the model
    lose a table created for the second time (create, drop, create is the shortest repro)."""
    if cfg.plant == "forget_recreated" and op.kind == "create":
        t = op.args["table"]
        if m.incarnation.get(t, 0) >= 2 and t in m.tables:
            m.tables.pop(t)


def walk(
    cfg: Config,
    spark_factory: Callable[[], object] | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> Result:
    """A seeded walk of ``cfg.steps`` ops or ``cfg.seconds``, whichever ends first. The
    generator picks each op from the walk's model as it stands after the previous one."""
    gen = Gen(random.Random(cfg.seed), cfg.spark, cfg.skipped)
    m = Model()
    deadline = time.monotonic() + cfg.seconds

    def ops() -> Iterator[Op]:
        last_spark = -(10**9)
        for i in range(cfg.steps):
            if time.monotonic() >= deadline:
                return
            op = gen.next(m)
            if op.kind in SPARK_OPS and cfg.spark_every and i - last_spark < cfg.spark_every:
                gen.spark = False  # a short run: few Spark steps, many server steps
                op = gen.next(m)
                gen.spark = True
            if op.kind in SPARK_OPS:
                last_spark = i
            yield op

    return execute(ops(), cfg, spark_factory, log, m)


def report(res: Result, shrunk: list[Op] | None, path: str | None) -> str:
    """The failure report: seed, invariant, the shortest sequence found, how to replay it."""
    assert res.failure is not None
    seq = shrunk if shrunk is not None else res.ops
    lines = [
        f"lifecycle walk FAILED: seed={res.seed} after {res.steps} steps "
        f"({res.elapsed_s:.0f}s): {res.failure}",
        f"shortest sequence found ({len(seq)} ops):",
        *(f"  {i}. {op}" for i, op in enumerate(seq)),
    ]
    if path:
        lines.append(f"replay: python -m tests.lifecycle --replay {path}")
    lines.append(f"or the whole walk again: make lifecycle SEED={res.seed}")
    return "\n".join(lines)


def save(res: Result, ops: list[Op], directory: str | None = None) -> str:
    """Write the replay file (seed, failure, ops) and return its path."""
    directory = directory or tempfile.gettempdir()
    path = os.path.join(directory, f"lifecycle-seed{res.seed}-{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump(
            {
                "seed": res.seed,
                "failure": str(res.failure),
                "invariant": res.failure.invariant if res.failure else "",
                "ops": [op.to_json() for op in ops],
            },
            f,
            indent=1,
        )
    return path


def load(path: str) -> tuple[int, list[Op]]:
    with open(path) as f:
        d = json.load(f)
    return d.get("seed", 0), [Op.from_json(o) for o in d["ops"]]


def run_and_report(
    cfg: Config,
    spark_factory: Callable[[], object] | None = None,
    replay: list[Op] | None = None,
    out=sys.stdout,
) -> tuple[Result, list[Op] | None, str]:
    """Walk (or replay), and on a failure shrink it within ``cfg.shrink_s`` and print the
    report. Returns (result, shrunk ops or None, report text)."""
    from tests.lifecycle.shrink import shrink

    def log(s: str) -> None:
        print(s, file=out, flush=True)

    if replay is not None:
        res = execute(replay, cfg, spark_factory, log)
    else:
        res = walk(cfg, spark_factory, log)
    if res.ok:
        text = (
            f"lifecycle walk passed: seed={cfg.seed}, {res.steps} steps in {res.elapsed_s:.0f}s; "
            + ", ".join(f"{k} {v}" for k, v in sorted(res.counts.items()))
        )
        print(text, file=out, flush=True)
        return res, None, text
    assert res.failure is not None
    log(f"shrinking {len(res.ops)} ops (budget {cfg.shrink_s:.0f}s) ...")
    shrunk = shrink(res.ops, res.failure.invariant, cfg, spark_factory, log)
    path = save(res, shrunk)
    text = report(res, shrunk, path)
    print(text, file=out, flush=True)
    return res, shrunk, text
