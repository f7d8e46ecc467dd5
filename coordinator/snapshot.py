"""``client.snapshot(tables)``: one consistent point to read several tables and views at.

    snap = client.snapshot(["accounts", "branch_balance"])
    snap.barrier                # the barrier T every table has (0 in mode "latest")
    snap.read_ts("accounts")    # T for a root table; the view's commit ts at T for a view
    snap.read("branch_balance") # a pyarrow.Table as of T

Reads at a snapshot are repeatable: the same snapshot reads the same rows, whatever commits later,
until GC passes its read timestamps (then they fail with SnapshotTooOld, never with partial data).
``client.snapshot(tables, lease_s=600)`` holds a reader lease so that GC does not pass them until
``snap.release()`` (or the end of ``with snap:``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvstore.errors import NotFound

if TYPE_CHECKING:
    import pyarrow as pa

    from coordinator.client import Client
    from coordinator.lease import Lease


@dataclass(frozen=True)
class Snapshot:
    client: Client
    barrier: int
    mode: str
    reads: dict[str, int]
    barrier_wall_ms: int = 0
    lease: Lease | None = None  # held with lease_s: GC keeps every read ts of the snapshot

    @property
    def tables(self) -> list[str]:
        return list(self.reads)

    def read_ts(self, table: str) -> int:
        """The timestamp ``table`` is read at in this snapshot."""
        try:
            return self.reads[table]
        except KeyError:
            raise NotFound(
                f"table {table!r} is not in this snapshot (tables: {', '.join(self.reads)})"
            ) from None

    def read(self, table: str) -> pa.Table:
        """``table`` as of this snapshot, in primary-key order."""
        return self.client.read(table, at=self.read_ts(table))

    def release(self) -> None:
        """Give back the snapshot's reader lease, if it holds one (idempotent)."""
        if self.lease is not None:
            self.lease.release()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
