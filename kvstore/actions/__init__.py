"""Percolator actions, one module per verb.

An action is a free function over a ``WriteContext`` (writes) or a ``Reader`` (reads). It never
imports grpc and never touches LMDB directly: it fills the context's write buffer, which the group
committer applies in one LMDB write transaction only if the action returns. It reads through the
``Reader``'s named methods only (the hot paths through its walks: ``get_many``, ``items_from``,
``keys_from``, ``write_seeker``), never its transaction or a cursor, so another engine can stand
behind the same ``Reader``; ``tests/unit/test_layering.py`` pins this, for ``kvstore.planning``
too. Each module's public function names in its docstring the invariant it keeps.
"""

from kvstore.actions.check_txn_status import check_txn_status
from kvstore.actions.commit import commit, commit_key
from kvstore.actions.fence import (
    check_fences,
    check_not_dropped,
    clear_fence,
    clear_fences_of,
    fenced_by,
    fences,
    set_fence,
)
from kvstore.actions.gc import GcCursor, GcStep, delete_gc_records, plan_gc_step
from kvstore.actions.get import get
from kvstore.actions.heartbeat import txn_heartbeat
from kvstore.actions.one_pc import one_pc_commit
from kvstore.actions.prewrite import keys_held, prewrite
from kvstore.actions.resolve_locks import resolve_locks, resolve_locks_step, settle_txn
from kvstore.actions.resolved_ts import resolved_ts
from kvstore.actions.rollback import rollback, rollback_key
from kvstore.actions.scan import first_blocking_lock, past_versions, scan, scan_ranges
from kvstore.actions.scan_changes import (
    change_records,
    changed_keys,
    count_changes,
    scan_changes,
)

__all__ = [
    "check_fences",
    "check_not_dropped",
    "check_txn_status",
    "clear_fence",
    "clear_fences_of",
    "commit",
    "commit_key",
    "first_blocking_lock",
    "GcCursor",
    "GcStep",
    "delete_gc_records",
    "fenced_by",
    "fences",
    "get",
    "keys_held",
    "one_pc_commit",
    "plan_gc_step",
    "past_versions",
    "prewrite",
    "resolve_locks",
    "resolve_locks_step",
    "resolved_ts",
    "rollback",
    "rollback_key",
    "scan",
    "scan_changes",
    "changed_keys",
    "change_records",
    "count_changes",
    "scan_ranges",
    "set_fence",
    "settle_txn",
    "txn_heartbeat",
]
