"""State tables in the store: created (or re-created) before a view's build.

What each state table holds, and which operator reads and writes it, is declared by the operator
(``spark_sink.ivm.ops.state_table``: the layouts and roles; ``Operator.state_tables``); how a
build fills it on Spark is ``spark_sink.ivm.state_builds``'s. State tables are named after their
view (``kvstore.table_info.state_tables_of``), listed with kind ``state`` by ``snapview tables``,
dropped with the view, and no job may register one as its target.
"""

from __future__ import annotations

from coordinator.client import Client
from kvstore.schema import parse_ddl
from kvstore.table_info import STATE
from spark_sink.ivm.ops.state_table import StateTable


def ensure(client: Client, tables: list[StateTable]) -> list[str]:
    """Create each state table, or re-create one whose schema differs; returns the names
    (re)created. Their contents are (re)built by the view's next full build."""
    existing = {t.name: t for t in client.tables()}
    made = []
    for st in tables:
        old = existing.get(st.name)
        if old is not None:
            cur = client.describe_table(st.name, refresh=True)
            have = [(c.name, c.type.ddl()) for c in cur.table_schema.visible_columns]
            want = [(c.name, c.type.ddl()) for c in parse_ddl(st.ddl, st.name)]
            same = cur.kind == STATE and tuple(cur.primary_key) == st.primary_key
            same = same and have == want
            if same:
                continue
            client.drop_table(st.name)
        client.create_table(st.name, st.ddl, list(st.primary_key), kind=STATE)
        made.append(st.name)
    return made
