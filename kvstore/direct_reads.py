"""Direct reads: a process on the server's host reads the server's LMDB environment itself, in
read transactions of its own, with the actions the server runs for the same calls
(``actions.scan_ranges``; ``actions.changed_keys`` and ``actions.change_records``;
``planning.change_boundary``), so an incremental epoch's keyed reads, change scans and
change counts skip gRPC, protobuf and the server's queue
(docs/design.md, "The moving parts"; the write side is ``kvstore.direct``).

A direct read gives the server's answer or hands the read back (``DirectUnavailable``, and
``KeyIsLocked`` raised as it is), and the caller then makes the RPC, which resolves what needs
the server:

- **Settled timestamps only.** The server keeps the one-phase commits in flight in memory and a
  read at ts waits for those at or below it. A process cannot see that set, so the caller
  settles a ts first (``settle``): one read answered by the server at that ts proves that every
  commit at or below it has landed (a later commit takes a later TSO timestamp). A direct read
  above the settled ts is refused.
- **No lock read through.** A lock in the way raises KeyIsLocked, as the action does on the
  server; only the server resolves it.
- **Above the GC safepoint,** read from the meta column family in the same read transaction
  (GC persists the safepoint before it deletes anything at it), as the server checks its own.
- **A map the server grew** is adopted and the read retried (``Storage.read_txn``).

Reads are bounded like the server's: at most SCAN_CHUNK_ROWS rows and about SCAN_CHUNK_BYTES
per read transaction, change scans in windows of CHANGE_WINDOW_KEYS keys, so no transaction
stays open long and none holds more than a window.
"""

from __future__ import annotations

from functools import partial

import lmdb

from kvstore import actions, planning
from kvstore.direct import DirectUnavailable
from kvstore.limits import SCAN_CHUNK_BYTES
from kvstore.meta_keys import GC_SAFEPOINT
from kvstore.results import ChangeRecord
from kvstore.storage import Reader, Storage
from kvstore.store import CHANGE_WINDOW_KEYS, SCAN_CHUNK_ROWS
from kvstore.validation import check_key_ranges


class DirectReader:
    """Reads of the server's LMDB environment from this process (one per open environment)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.settled = 0  # the highest ts a read answered by the server has settled

    def settle(self, ts: int) -> None:
        """Record that the server has answered a read at ``ts`` (see the module docstring)."""
        self.settled = max(self.settled, ts)

    def scan_ranges(
        self, ranges: list[tuple[bytes, bytes]], ts: int, range_limit: int = 0
    ) -> list[bytes]:
        """The values ``store.scan_ranges(ranges, ts, range_limit=range_limit)`` returns, in
        the same order. DirectUnavailable or KeyIsLocked: make the RPC instead."""
        self._check_settled(ts)
        checked = check_key_ranges(ranges)
        values: list[bytes] = []
        first, resume = 0, None
        while first < len(checked):
            rows = max(SCAN_CHUNK_ROWS, range_limit)

            def step(r: Reader, f=first, c=resume, w=rows):
                return actions.scan_ranges(r, checked, ts, w, SCAN_CHUNK_BYTES, f, c, range_limit)

            _, vals, first, resume = self._read(step, ts)
            values += vals
        return values

    def scan_changes(self, table_id: int, from_ts: int, to_ts: int) -> list[ChangeRecord]:
        """The records ``store.scan_changes`` returns for the table of ``table_id`` in
        (from_ts, to_ts], in key order. DirectUnavailable or KeyIsLocked: make the RPC."""
        self._check_settled(to_ts)
        out: list[ChangeRecord] = []
        after: bytes | None = None
        while True:

            def window(r: Reader, a=after):
                return actions.changed_keys(r, table_id, from_ts, to_ts, a, CHANGE_WINDOW_KEYS)

            keys, more = self._read(window, from_ts)
            for i in range(0, len(keys), SCAN_CHUNK_ROWS):
                part = keys[i : i + SCAN_CHUNK_ROWS]
                out += self._read(
                    lambda r, p=part: actions.change_records(r, p, from_ts, to_ts), from_ts
                )
            if not more or not keys:
                return out
            after = keys[-1]

    def change_boundary(
        self, table_id: int, from_ts: int, to_ts: int, max_changes: int
    ) -> tuple[int, int]:
        """What ``store.change_boundary`` answers for the table of ``table_id``. It needs no
        settled ts: the server's count does not wait for commits in flight either (a view
        epoch counts at barriers its sources have resolved, where none can be). Below the GC
        safepoint: DirectUnavailable."""
        if max_changes <= 0 or from_ts >= to_ts:
            raise DirectUnavailable("the server names what is wrong with this count")
        count = partial(planning.change_boundary, table_id=table_id, from_ts=from_ts)
        return self._read(lambda r: count(r, to_ts=to_ts, max_changes=max_changes), from_ts)

    def _check_settled(self, ts: int) -> None:
        if ts > self.settled:
            raise DirectUnavailable(f"ts {ts} is above the settled ts {self.settled}")

    def _read(self, fn, oldest: int):
        """``fn`` over one read transaction, refused below the GC safepoint. (A map the server
        grew is adopted by ``Storage.read_txn``.)"""
        try:
            with self.storage.read_txn() as r:
                raw = r.get("meta", GC_SAFEPOINT)
                if raw is not None and oldest < int(raw):
                    raise DirectUnavailable(f"ts {oldest} is below the GC safepoint {int(raw)}")
                return fn(r)
        except lmdb.Error as e:
            # An environment closed under the read (its server restarted: the prewriter that
            # opened it was closed), or any other engine trouble: the server answers instead,
            # and names a damaged record itself if that is what it is.
            raise DirectUnavailable(f"the direct read failed ({e}); the server reads it") from None
