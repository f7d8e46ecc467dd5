"""Every public function and method of the packages carries type hints.

Public means a module-level function or a method of a module-level class (nested classes too)
whose name does not start with ``_``, plus ``__init__``. Each of its parameters (but the
``self``/``cls`` of a method) has an annotation, and so does its return. Functions nested inside
other functions are private to them and not checked. mypy (``make lint``) checks that the hints
are right; this test checks that they are there, which mypy does not insist on.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("kvstore", "coordinator", "spark_source", "spark_sink", "snapview")

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _public(name: str) -> bool:
    return not name.startswith("_") or name == "__init__"


def _is_static(fn: Function) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)


def _functions(body: list[ast.stmt], in_class: bool) -> Iterator[tuple[Function, bool]]:
    """The functions defined in ``body`` (a module's or a class's), with whether each is a
    method; looks into classes and into module-level ``if``/``try`` blocks, not into functions."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node, in_class
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body, True)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for inner in getattr(node, block, []):
                    if isinstance(inner, ast.ExceptHandler):
                        yield from _functions(inner.body, in_class)
                    else:
                        yield from _functions([inner], in_class)


def missing_annotations(module: str, source: str) -> list[str]:
    """``module:line name(param)`` for each unannotated parameter of a public function in
    ``source``, and ``module:line name() -> ?`` for each missing return annotation."""
    out = []
    for fn, method in _functions(ast.parse(source).body, False):
        if not _public(fn.name):
            continue
        a = fn.args
        params = [*a.posonlyargs, *a.args]
        if method and params and not _is_static(fn) and params[0].arg in ("self", "cls"):
            params = params[1:]
        params += a.kwonlyargs
        params += [p for p in (a.vararg, a.kwarg) if p is not None]
        where = f"{module}:{fn.lineno} {fn.name}"
        out.extend(f"{where}({p.arg})" for p in params if p.annotation is None)
        if fn.returns is None:
            out.append(f"{where}() -> ?")
    return out


def _package_modules() -> dict[str, str]:
    """Dotted module name -> source, for every module of the packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path.read_text()
    return out


def test_every_public_function_is_annotated() -> None:
    modules = _package_modules()
    assert len(modules) > 50, "the walk found the packages"
    missing = [m for name, src in modules.items() for m in missing_annotations(name, src)]
    assert not missing, "public functions without type hints:\n" + "\n".join(missing)


PLANTED = """
from typing import TYPE_CHECKING

def typed(a: int, *rest: str, flag: bool = False, **kw: object) -> int:
    def helper(x):  # nested: private to typed
        return x
    return a

def untyped(a, b: int):
    return b

def _private(a):
    return a

class Thing:
    def __init__(self, client):
        self.client = client

    def method(self, x: int):
        return x

    @staticmethod
    def static(self) -> None:
        pass

    @classmethod
    def make(cls) -> "Thing":
        return cls(None)

    def _hidden(self, y):
        return y

    class Inner:
        def deep(self, *args, **kwargs) -> None:
            pass

if TYPE_CHECKING:
    def declared(z) -> None: ...
"""


def test_checker_reports_planted_gaps() -> None:
    assert missing_annotations("pkg.m", PLANTED) == [
        "pkg.m:9 untyped(a)",
        "pkg.m:9 untyped() -> ?",
        "pkg.m:16 __init__(client)",
        "pkg.m:16 __init__() -> ?",
        "pkg.m:19 method() -> ?",
        "pkg.m:23 static(self)",
        "pkg.m:34 deep(args)",
        "pkg.m:34 deep(kwargs)",
        "pkg.m:38 declared(z)",
    ]


def test_checker_passes_annotated_code() -> None:
    annotated = """
class Barriers: ...

class EpochManager:
    def __init__(self, barriers: Barriers | None = None) -> None:
        self.barriers = barriers

    @property
    def ready(self) -> bool:
        return self.barriers is not None

def read(client: "object", /, table: str, *, limit: int = 10) -> list[bytes]:
    return []
"""
    assert missing_annotations("pkg.m", annotated) == []
