"""fence: keep writers out of a table while a revision rewrites it.

A revision (``coordinator.server.revisions``) that rolls a table back computes its difference from
the table's whole recent history, so nothing may commit into the table between the moment it
reads and the moment it commits. A fence is a record in ``meta`` (``store/fences``: table prefix
-> the table's name and the revision holding it); while it stands, ``prewrite`` and
``one_pc_commit`` of any other transaction touching the table raise ``TableFenced``
(UNAVAILABLE, which clients retry). The check runs inside the write action, so it is ordered with
every other write by LMDB's one writer (the direct path included): a write either ran before the
fence went up, or is refused.

A drop is a fence that never comes down: ``drop_table_action`` leaves a tombstone
(``catalog/dropped/<id>``) in the same write that deletes the table's records, and
``check_not_dropped`` (run by the same actions) refuses any later write into the id with
TableNotFound naming the table, a permanent refusal (NOT_FOUND), not a retryable one.
"""

from __future__ import annotations

import json

from kvstore.errors import TableFenced, TableNotFound
from kvstore.group_commit import WriteContext
from kvstore.meta_keys import FENCES_KEY, dropped_table_key
from kvstore.mvcc.keys import table_prefix
from kvstore.mvcc.records import Mutation
from kvstore.storage import Reader


def fences(reader: Reader) -> dict[str, tuple[str, int]]:
    """Every standing fence: table prefix (hex) -> (table name, revision id)."""
    raw = reader.get("meta", FENCES_KEY)
    return {} if raw is None else {k: (v[0], v[1]) for k, v in json.loads(raw).items()}


def check_fences(reader: Reader, mutations: list[Mutation], revision: int = 0) -> None:
    """Raise TableFenced if a mutation's table is fenced by a revision other than ``revision``.

    Invariant: costs one lookup when no fence stands (the common case)."""
    raw = reader.get("meta", FENCES_KEY)
    if raw is None:
        return
    standing = json.loads(raw)
    for prefix in {m[1][:4] for m in mutations}:
        hit = standing.get(prefix.hex())
        if hit is not None and hit[1] != revision:
            raise TableFenced(
                f"table {hit[0]!r} is being revised (revision {hit[1]}); writes to it wait "
                "until the revision commits"
            )


def check_not_dropped(reader: Reader, mutations: list[Mutation]) -> None:
    """Raise TableNotFound (naming the table) if a mutation's table was dropped.

    Invariant: no record is written into a dropped table's id after its drop committed, however
    late the writer learns of the drop (a direct prewrite, a request validated before the drop).
    Costs one lookup per distinct table of ``mutations``."""
    for prefix in {m[1][:4] for m in mutations}:
        raw = reader.get("meta", dropped_table_key(prefix))
        if raw is not None:
            tomb = json.loads(raw)
            raise TableNotFound.dropped(tomb["name"], tomb["id"])


def set_fence(ctx: WriteContext, table_id: int, table: str, revision: int) -> None:
    """Fence ``table`` for ``revision`` (replacing nothing: one revision per table at a time is
    the caller's rule)."""
    standing = fences(ctx.reader)
    standing[table_prefix(table_id).hex()] = (table, revision)
    ctx.buf.put("meta", FENCES_KEY, json.dumps(standing).encode())


def clear_fences_of(ctx: WriteContext, revision: int) -> None:
    """Lift every fence ``revision`` holds (whatever became of its table: dropped, renamed)."""
    standing = fences(ctx.reader)
    kept = {k: v for k, v in standing.items() if v[1] != revision}
    if kept == standing:
        return
    if kept:
        ctx.buf.put("meta", FENCES_KEY, json.dumps(kept).encode())
    else:
        ctx.buf.delete("meta", FENCES_KEY)


def fenced_by(reader: Reader, table_id: int) -> int:
    """The revision fencing table ``table_id`` (0: none)."""
    hit = fences(reader).get(table_prefix(table_id).hex())
    return hit[1] if hit else 0


def clear_fence(ctx: WriteContext, table_id: int) -> None:
    """Lift ``table_id``'s fence (a no-op without one); the record goes when none is left."""
    standing = fences(ctx.reader)
    if standing.pop(table_prefix(table_id).hex(), None) is None:
        return
    if standing:
        ctx.buf.put("meta", FENCES_KEY, json.dumps(standing).encode())
    else:
        ctx.buf.delete("meta", FENCES_KEY)
