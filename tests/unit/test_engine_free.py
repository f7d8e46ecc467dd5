"""The storage engine stays behind the storage Reader, checked on the source.

Actions and read planning are engine-free (``kvstore/actions/__init__.py``): they read through the
storage ``Reader``'s named methods and never reach its LMDB transaction, handles or cursors, so
another engine can stand behind the same ``Reader`` interface.
That a client process loads neither LMDB nor the server is pinned in test_layering.py.
"""

from __future__ import annotations

import ast
import pathlib

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
