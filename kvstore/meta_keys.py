"""The store's own keys in the ``meta`` column family.

    gc/safepoint                decimal ts          the GC safepoint: no read below it (store, direct)
    catalog/next_table_id       4-byte big-endian   the id the next created table gets (catalog)
    store/format                decimal             the on-disk record layout (kvstore.storage)
    store/fences                JSON                tables fenced by a revision (actions.fence)

The coordinator keeps its state in the same column family under prefixes of its own, all named
in ``coordinator.server.meta``; the two key spaces are disjoint.
"""

from __future__ import annotations

GC_SAFEPOINT = b"gc/safepoint"
NEXT_TABLE_ID = b"catalog/next_table_id"
STORE_FORMAT_KEY = b"store/format"
FENCES_KEY = b"store/fences"
