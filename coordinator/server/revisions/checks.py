"""The checks a revision request passes before anything is recorded: the table it revises is a
root table (``root_table``), its labels are printable and bounded (``check_who``,
``check_text``); and the views it reaches (``downstream``), recorded with it.
"""

from __future__ import annotations

from coordinator.errors import not_revisable
from coordinator.server.registry import Registry
from kvstore.errors import InvalidArgument, TableNotFound, cut
from kvstore.store import LocalStore
from kvstore.text import control_character

MAX_WHO_CHARS = 200
ROOT = "root"


def root_table(store: LocalStore, registry: Registry, table: str, what: str) -> int:
    """The id of root table ``table``; refuses a missing table, a view or state table, and a
    table a view job writes (``what`` names the operation)."""
    if not isinstance(table, str) or not table:
        raise InvalidArgument(f"{what}: a table name is required")
    try:
        info = store.catalog.get(table)
    except TableNotFound:
        raise TableNotFound(table) from None
    writer = registry.topology().writer_of(table)
    if info.kind != ROOT or (writer is not None and writer.is_view):
        raise not_revisable(table, info.kind if info.kind != ROOT else "view")
    return info.id


def downstream(registry: Registry, table: str) -> tuple[str, ...]:
    """The views downstream of ``table`` through view jobs only, upstream first: those that
    reach a revision at its barrier. A table a non-view job writes from it (a sink fed by a
    change stream) follows at its own pace, and so do the views over it: not included."""
    return tuple(registry.topology().downstream(table, views_only=True))


def check_who(who: str) -> str:
    check_text("who", who, MAX_WHO_CHARS)
    return who or "unknown"


def check_text(name: str, value: str, limit: int) -> None:
    """Refuse a revision's label ``name`` (who, key) longer than ``limit`` characters or holding
    a control character (shown raw, it would act on the operator's terminal)."""
    if len(value) > limit:
        raise InvalidArgument(f"{name} {cut(value)} must be at most {limit} characters")
    bad = control_character(value)
    if bad is not None:
        raise InvalidArgument(
            f"{name} {cut(value)} contains the control character {bad}; only printable text is "
            "allowed"
        )
