"""Layering rules that keep the store's parts swappable, checked on the source.

Actions and read planning are engine-free (``kvstore/actions/__init__.py``): they read through the
storage ``Reader``'s named methods and never reach its LMDB transaction, handles or cursors, so
another engine can stand behind the same ``Reader`` interface. And a client process (a Spark
executor on another host, a user's script) imports neither LMDB nor the server.
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import kvstore

KVSTORE = pathlib.Path(kvstore.__file__).parent
ENGINE_FREE = sorted((KVSTORE / "actions").glob("*.py")) + [KVSTORE / "planning.py"]

# The Reader's and Storage's LMDB handles: an action naming one is reaching past the interface.
ENGINE_ATTRS = {"txn", "cf", "env", "storage"}


def engine_uses(source: str) -> list[str]:
    """Where ``source`` imports lmdb, touches an engine handle or opens a cursor ("line: what")."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _lmdb(a.name)]
        elif isinstance(node, ast.ImportFrom) and _lmdb(node.module or ""):
            found.append(f"{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Attribute) and node.attr in ENGINE_ATTRS:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name == "cursor":
                found.append(f"{node.lineno}: cursor(")
    return found


def _lmdb(module: str) -> bool:
    return module == "lmdb" or module.startswith("lmdb.")


def test_actions_and_planning_are_engine_free():
    assert len(ENGINE_FREE) > 10  # the glob found the action modules
    bad = {
        str(p.relative_to(KVSTORE.parent)): uses
        for p in ENGINE_FREE
        if (uses := engine_uses(p.read_text()))
    }
    assert not bad, f"engine access outside kvstore.storage: {bad}"


def test_engine_check_catches_planted_violations():
    planted = {
        "import lmdb": "import lmdb",
        "import lmdb.cffi as c": "import lmdb.cffi",
        "from lmdb import Cursor": "from lmdb import",
        "raw = reader.txn.get(key)": ".txn",
        "db = reader.cf['write']": ".cf",
        "cur = txn.cursor(db=db)": "cursor(",
        "cur = cursor()": "cursor(",
        "env = ctx.reader.storage.env": ".env",
    }
    for source, what in planted.items():
        uses = engine_uses(f"def f(reader, ctx, txn, db, key):\n    {source}\n")
        assert any(what in u for u in uses), (source, uses)
    clean = "def f(reader):\n    return list(reader.items_from('write', b''))\n"
    assert engine_uses(clean) == []


# What a client process imports, and what it must not load (the engine and the server's side).
CLIENT_MODULES = [
    "kvstore.remote",
    "kvstore.wire",
    "kvstore.lock_resolution",
    "kvstore.table_info",
    "kvstore.results",
    "kvstore.schema",
    "kvstore.rowcodec",
    "kvstore.errors",
    "kvstore.mvcc.keys",
    "kvstore.mvcc.records",
    "coordinator",
    "spark_source",
]
SERVER_MODULES = (
    "lmdb",
    "kvstore.storage",
    "kvstore.group_commit",
    "kvstore.actions",
    "kvstore.catalog",
    "kvstore.store",
    "kvstore.direct",
    "kvstore.service",
)


def _loaded_by(modules: list[str]) -> set[str]:
    """The modules a fresh interpreter has loaded after importing ``modules``."""
    code = "import importlib, sys\n"
    code += "".join(f"importlib.import_module({m!r})\n" for m in modules)
    code += "print('\\n'.join(sys.modules))\n"
    root = str(KVSTORE.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def test_client_modules_load_neither_lmdb_nor_the_server():
    loaded = _loaded_by(CLIENT_MODULES)
    assert set(CLIENT_MODULES) <= loaded
    bad = sorted(m for m in loaded if any(m == s or m.startswith(s + ".") for s in SERVER_MODULES))
    assert not bad, f"a client import loads {bad}"


def test_client_import_check_sees_the_engine():
    assert {"lmdb", "kvstore.storage"} <= _loaded_by(["kvstore.store"])
