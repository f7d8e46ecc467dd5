"""resolved_ts: the timestamp below which a table's history is final."""

from __future__ import annotations

from kvstore.mvcc.keys import table_prefix
from kvstore.storage import Reader


def resolved_ts(reader: Reader, table_id: int, tso_now: int) -> int:
    """A ts such that no commit at or below it can still appear in table ``table_id``.

    ``tso_now`` must be taken from the TSO *before* ``reader`` was opened. Then a txn without a
    lock in the table yet will take its commit_ts after tso_now, and a txn with a lock commits
    above its start_ts, so the answer is min(tso_now, min start_ts of the table's locks - 1)."""
    res = tso_now
    for key, raw in reader.iter_prefix("lock", table_prefix(table_id)):
        res = min(res, reader.parse_lock(key, raw).start_ts - 1)
    return res
