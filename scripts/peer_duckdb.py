"""DuckDB as a peer of ``scripts/bench_views.py``: the same sources and the same change stream,
each view recomputed whole per barrier (what a user who keeps the tables in DuckDB and reruns the
query would pay). Optional: DuckDB is not a dependency of snapview; ``ensure_duckdb`` installs it
into this interpreter on demand (``pip install duckdb``) and returns None if that fails.

The peer loads each source from the store at one timestamp (``client.read``, as Arrow), then
takes each barrier's change as the workload made it (``apply``: upserts and deletes by key) and
recomputes a view with ``CREATE OR REPLACE TABLE ... AS <query>``. Its views are compared with
snapview's at the end of a run (``check``), so a peer that skipped work cannot look fast.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from typing import Any


def ensure_duckdb() -> Any:
    """The ``duckdb`` module, installed into this interpreter if missing; None if it cannot be."""
    try:
        import duckdb

        return duckdb
    except ImportError:
        pass
    print("  (installing duckdb for the peer: pip install duckdb)", flush=True)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "duckdb"], capture_output=True, text=True
    )
    if r.returncode != 0:
        print(f"  duckdb could not be installed; no DuckDB peer: {r.stderr.strip()[-300:]}")
        return None
    import duckdb

    return duckdb


class DuckPeer:
    """DuckDB holding copies of the sources; ``apply`` a barrier's change, ``recompute`` a view."""

    def __init__(self, duckdb: Any, client, tables: dict[str, str], at: int) -> None:
        """``tables``: source name -> its primary key column (one column)."""
        self.db = duckdb.connect()
        self.db.execute("SET threads TO 2")  # this machine's cores, as Spark's local[2]
        self.keys = tables
        self.version = duckdb.__version__
        for t, key in tables.items():
            self.db.register("peer_in", client.read(t, at=at))
            self.db.execute(f"CREATE TABLE {t} AS SELECT * FROM peer_in")
            self.db.unregister("peer_in")
            self.db.execute(f"CREATE UNIQUE INDEX {t}_key ON {t} ({key})")

    def apply(self, log: list[tuple[str, str, dict]]) -> float:
        """Apply one barrier's change (("put"|"delete", table, row or key), in order: the last
        write of a key wins); returns seconds."""
        import pyarrow as pa

        t0 = time.perf_counter()
        last: dict[tuple[str, Any], tuple[str, dict]] = {}
        for op, table, row in log:
            last[(table, row[self.keys[table]])] = (op, row)
        for table, key in self.keys.items():
            ids = [k for (t, k) in last if t == table]
            if not ids:
                continue
            self.db.register("peer_gone", pa.table({"k": pa.array(ids, pa.int64())}))
            self.db.execute(f"DELETE FROM {table} WHERE {key} IN (SELECT k FROM peer_gone)")
            self.db.unregister("peer_gone")
            puts = [row for (t, _), (op, row) in last.items() if t == table and op == "put"]
            if puts:
                cols = [d[0] for d in self.db.execute(f"SELECT * FROM {table} LIMIT 0").description]
                self.db.register("peer_new", pa.table({c: [r[c] for r in puts] for c in cols}))
                self.db.execute(f"INSERT INTO {table} SELECT {', '.join(cols)} FROM peer_new")
                self.db.unregister("peer_new")
        return time.perf_counter() - t0

    def recompute(self, name: str, query: str) -> float:
        """Recompute view ``name`` whole from ``query``; returns seconds."""
        t0 = time.perf_counter()
        self.db.execute(f"CREATE OR REPLACE TABLE peer_{name} AS {query}")
        return time.perf_counter() - t0

    def check(self, name: str, client, target: str) -> None:
        """Raise if view ``name`` differs from snapview's ``target`` (rows compared sorted,
        floating point values to 9 significant digits)."""
        cur = self.db.execute(f"SELECT * FROM peer_{name}")
        cols = [d[0] for d in cur.description]
        mine = [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
        compare_rows(
            f"the DuckDB peer's {name}",
            mine,
            f"snapview's {target}",
            client.read(target).to_pylist(),
        )


def compare_rows(what: str, mine: list[dict], other: str, theirs: list[dict]) -> None:
    """Raise SystemExit naming both sides and the first difference unless the two row lists
    hold the same rows (in any order; floating point values compared to 9 significant digits,
    as two engines may round a sum's last bits differently)."""

    def norm(rows: list[dict]) -> list[tuple]:
        out = []
        for r in rows:
            out.append(
                tuple(
                    float(f"{v:.9g}") if isinstance(v, float) and math.isfinite(v) else v
                    for v in r.values()
                )
            )
        return sorted(out, key=repr)

    a, b = norm(mine), norm(theirs)
    if a != b:
        diff = next((x, y) for x, y in zip(a + [()], b + [()], strict=False) if x != y)
        raise SystemExit(
            f"{what} differs from {other}: {len(a)} vs {len(b)} rows; first difference {diff}"
        )
