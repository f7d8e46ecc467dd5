"""The store's own keys in the ``meta`` column family.

    gc/safepoint                decimal ts          the GC safepoint: no read below it (store, direct)
    catalog/next_table_id       4-byte big-endian   the id the next created table gets (catalog)
    store/format                decimal             the on-disk record layout (kvstore.storage)
    store/fences                JSON                tables fenced by a revision (actions.fence)
    catalog/dropped/<id:4>      JSON {"name", "id"} a dropped table's tombstone: writes into its
                                                    id are refused for good (actions.fence)
    catalog/dropped-name/<name> JSON {"name"}       a table of this name was dropped: the next table
                                                    of the name is created ``recreated`` (catalog)

The coordinator keeps its state in the same column family under prefixes of its own, all named
in ``coordinator.server.meta``; the two key spaces are disjoint.
"""

from __future__ import annotations

GC_SAFEPOINT = b"gc/safepoint"
NEXT_TABLE_ID = b"catalog/next_table_id"
STORE_FORMAT_KEY = b"store/format"
FENCES_KEY = b"store/fences"
DROPPED_TABLE_PREFIX = b"catalog/dropped/"
DROPPED_NAME_PREFIX = b"catalog/dropped-name/"


def dropped_table_key(table_prefix: bytes) -> bytes:
    """The tombstone key of the table whose keys start with ``table_prefix`` (4 bytes). Table
    ids are never reused, so a tombstone is never in a live table's way; each is a few bytes,
    and they are kept for good, so a writer that learns of a drop late is still refused."""
    return DROPPED_TABLE_PREFIX + table_prefix


def dropped_name_key(name: str) -> bytes:
    """The marker that a table named ``name`` was dropped once (so a later one is recreated)."""
    return DROPPED_NAME_PREFIX + name.encode()
