"""gc: drop versions that no reader at or above the safepoint can need."""

from __future__ import annotations

from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import parse_changes_key, parse_versioned_key, versioned_key
from kvstore.mvcc.records import WriteKind


def gc(ctx: WriteContext, safepoint: int) -> int:
    """Remove history at or below ``safepoint``; returns how many records it removed.

    Invariant: a read at any ts >= safepoint returns what it returned before. For every key it
    keeps all versions above the safepoint and the newest Put at or below it; when the newest
    record at or below it is a Delete, that Delete and everything older go. Rollback and Lock
    records at or below it go, and so do change-index entries at or below it (change scans must
    start at or above the safepoint; the store refuses older ones)."""
    reader, buf = ctx.reader, ctx.buf
    removed = 0
    cur_key, settled = None, False
    # Decide first, delete after: no cursor walks a tree that is being changed under it.
    doomed: list[tuple[str, bytes]] = []
    for k, v in reader.iter_range("write", b"", None):
        uk, commit_ts = parse_versioned_key(k)
        if uk != cur_key:
            cur_key, settled = uk, False
        if commit_ts > safepoint:
            continue
        w = reader.parse_write(k, v)
        keep = not settled and w.kind is WriteKind.PUT
        if not settled and w.kind in (WriteKind.PUT, WriteKind.DELETE):
            settled = True
        if keep:
            continue
        doomed.append(("write", k))
        if w.kind is WriteKind.PUT and w.short_value is None:
            doomed.append(("data", versioned_key(uk, w.start_ts)))
        removed += 1
    doomed += [
        ("changes", k)
        for k, _ in reader.iter_range("changes", b"", None)
        if parse_changes_key(k)[0] <= safepoint
    ]
    for cf, k in doomed:
        buf.delete(cf, k)
    return removed
