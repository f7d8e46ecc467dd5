"""The packages' import rules (docs/design.md, "Layout"), checked on the source and in a fresh
interpreter.

    kvstore  <-  coordinator (client)  <-  spark_source  <-  spark_sink  <-  snapview
                 coordinator.server (inside ``snapview serve``) imports kvstore's engine

A remote client (a user's script, a Spark executor on another host) must not load the storage
engine or the server: the client modules import no engine module at module level. Only
``spark_sink``'s direct prewriter loads ``kvstore.direct``, lazily, when an executor shares the
server's host.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import spark_sink

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ("kvstore", "coordinator", "spark_source", "spark_sink")
# Modules that are the storage engine or the server: never loaded by a client at import time.
ENGINE = (
    "lmdb",
    "kvstore.storage",
    "kvstore.group_commit",
    "kvstore.store",
    "kvstore.actions",
    "kvstore.catalog",
    "kvstore.direct",
    "kvstore.direct_reads",
    "kvstore.gc_pass",
    "kvstore.planning",
    "kvstore.service",
    "kvstore.testing",
    "coordinator.server",
)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # what it imports, dotted (absolute)
    top_level: bool  # at module level (runs on import), not inside a function
    line: int


def _within(name: str, prefixes: tuple[str, ...] | str) -> bool:
    if isinstance(prefixes, str):
        prefixes = (prefixes,)
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def imports_of(module: str, source: str) -> list[Import]:
    """Every import in ``source`` (the module ``module``), resolved to absolute names."""
    out: list[Import] = []
    package = module.rsplit(".", 1)[0]

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                inner = False  # imports for the type checker only: never run
            if isinstance(child, ast.Import):
                out.extend(Import(module, a.name, top, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    up = parts[: len(parts) - child.level + 1]
                    base = ".".join([*up, base] if base else up)
                for a in child.names:
                    out.append(Import(module, f"{base}.{a.name}", top, child.lineno))
            visit(child, inner)

    visit(ast.parse(source), True)
    return out


# The one call from the client into spark_sink: ``Client.revise(corrections=<DataFrame>)`` hands
# the DataFrame to the Spark writer, imported inside the method (a caller holding a DataFrame
# runs Spark already). Lazy only: at module level it would load Spark with the client.
DATAFRAME_UPCALL = {
    ("coordinator.client", "spark_sink.revision.write_dataframe_corrections", False),
}


def violations(imports: list[Import]) -> list[str]:
    """The broken rules, one line each naming the module, its line and the import."""
    bad = []
    for i in imports:
        m, t = i.module, i.target
        where = f"{m}:{i.line} imports {t}"
        if _within(t, "tests") and not _within(m, "tests"):
            bad.append(f"{where}: nothing but tests imports tests")
        if _within(m, LIBRARY) and _within(t, "snapview") and not _within(t, "snapview_proto"):
            bad.append(f"{where}: library packages never import the application")
        if _within(m, ("kvstore",)) and _within(t, ("coordinator", "spark_source", "spark_sink")):
            bad.append(f"{where}: kvstore imports nothing above it")
        if (
            _within(m, ("coordinator", "spark_source"))
            and _within(t, "spark_sink")
            and (m, t, i.top_level) not in DATAFRAME_UPCALL
        ):
            bad.append(f"{where}: only the application imports spark_sink")
        if _within(m, "coordinator") and _within(t, "spark_source"):
            bad.append(f"{where}: coordinator imports nothing above it")
        client = _within(m, ("coordinator", "spark_source", "spark_sink")) and not _within(
            m, "coordinator.server"
        )
        if client and _within(t, "coordinator.server"):
            bad.append(f"{where}: client code never imports the server")
        elif client and i.top_level and _within(t, ENGINE):
            bad.append(f"{where}: client code loads no storage engine at import time")
    return bad


def _package_modules() -> dict[str, str]:
    out = {}
    for pkg in (*LIBRARY, "snapview"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path.read_text()
    return out


def test_every_package_obeys_the_import_rules():
    found = [i for m, src in _package_modules().items() for i in imports_of(m, src)]
    assert len(found) > 100, "the checker read almost nothing"
    assert violations(found) == []


@pytest.mark.parametrize(
    ("module", "source", "rule"),
    [
        ("kvstore.store", "from coordinator.jobs import EpochInfo", "nothing above it"),
        ("coordinator.client", "import lmdb", "no storage engine"),
        ("coordinator.client", "from kvstore.catalog import Catalog", "no storage engine"),
        (
            "spark_source.readers",
            "from coordinator.server.meta import x",
            "never imports the server",
        ),
        ("spark_source.readers", "from spark_sink import EpochWriter", "only the application"),
        (
            "coordinator.client",
            "from spark_sink.revision import write_dataframe_corrections",
            "only the application",
        ),
        (
            "coordinator.client",
            "def f():\n    from spark_sink.epoch_writer import EpochWriter",
            "only the application",
        ),
        (
            "spark_sink.epoch_writer",
            "from snapview.embedded import E",
            "never import the application",
        ),
        ("snapview.cli", "from tests.conftest import x", "nothing but tests"),
        ("coordinator.jobs", "from .server import meta", "never imports the server"),
    ],
)
def test_the_checker_catches_a_planted_violation(module, source, rule):
    bad = violations(imports_of(module, source))
    assert any(rule in line for line in bad), bad


def test_a_lazy_engine_import_is_allowed_where_top_level_is_not():
    lazy = "def f():\n    from kvstore.direct import DirectPrewriter\n"
    assert violations(imports_of("spark_sink.partition_writer", lazy)) == []
    typing_only = "if TYPE_CHECKING:\n    from kvstore.direct import DirectPrewriter\n"
    assert violations(imports_of("spark_sink.partition_writer", typing_only)) == []
    top = "from kvstore.direct import DirectPrewriter\n"
    assert violations(imports_of("spark_sink.partition_writer", top))


def _loaded_by(statement: str) -> set[str]:
    code = f"{statement}; import sys; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def test_importing_the_client_loads_neither_the_engine_nor_spark():
    loaded = _loaded_by("import coordinator; coordinator.connect('127.0.0.1:1').close()")
    assert "coordinator" in loaded and "grpc" in loaded  # the probe did import the client
    bad = sorted(
        m for m in loaded if _within(m, (*ENGINE, "pyspark", "spark_source", "spark_sink"))
    )
    assert bad == []


def test_importing_the_spark_packages_loads_no_engine():
    # every public name of spark_sink is resolved: its package imports them lazily
    names = "; ".join(f"spark_sink.{n}" for n in spark_sink.__all__)
    loaded = _loaded_by(f"import spark_source, spark_sink; {names}")
    assert {"pyspark", "spark_sink.materialized_view"} <= loaded
    assert sorted(m for m in loaded if _within(m, ENGINE)) == []


# What a Spark Python worker imports to run our code in a task: the data sources' readers (the
# job's own sources, the barrier stream), and the functions a build passes to mapInArrow.
WORKER_MODULES = (
    "spark_sink.job_session",
    "spark_sink.executor_diff",
    "spark_sink.partition_writer",
    "spark_source.barrier_source",
)
# What only a driver needs: the view planner, the delta rules, pandas. Each new worker process
# that imported them spent about a second of CPU on it (spark_sink/__init__.py).
DRIVER_ONLY = ("spark_sink.materialized_view", "spark_sink.ivm", "pandas")


def test_a_workers_imports_leave_out_the_driver_only_modules():
    loaded = _loaded_by("import " + ", ".join(WORKER_MODULES))
    assert set(WORKER_MODULES) <= loaded
    assert sorted(m for m in loaded if _within(m, DRIVER_ONLY)) == []


def test_the_driver_only_probe_sees_a_view_import():
    # the planted fault: a worker module that imports the view planner at its top
    loaded = _loaded_by("import spark_sink.job_session; from spark_sink import MaterializedView")
    assert {"spark_sink.materialized_view", "spark_sink.ivm"} <= loaded


def test_the_lazy_package_names_every_public_name_and_refuses_others():
    assert set(spark_sink.__all__) <= set(dir(spark_sink))
    for name in spark_sink.__all__:
        assert getattr(spark_sink, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'MaterialisedView'"):
        spark_sink.MaterialisedView  # noqa: B018


def test_the_import_probe_sees_the_engine_when_it_is_loaded():
    assert {"lmdb", "kvstore.storage"} <= _loaded_by("import kvstore.store")
