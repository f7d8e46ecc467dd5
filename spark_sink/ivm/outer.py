"""Match counts of outer joins: for each outer side of a LEFT, RIGHT or FULL join, a state table
holding, per join key, how many rows of the other side carry it (rows with a NULL key never
match and are not counted).

A row of the outer side dangles (appears padded with NULLs) exactly while its key's count is 0,
so an epoch needs, per key the change touches, only the count before and after: the old count is
read by key, the new one is the old plus the other side's change for that key. The padded rows
then change only where the count crosses 0 (the kept side's rows of that key read by key, at
the old barrier to retract or the new one to emit) or where the kept side itself changed under
a count of 0. Nothing reads the other side's rows to decide whether a key has a match.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvstore.errors import SchemaMismatch

if TYPE_CHECKING:
    from kvstore.table_info import TableInfo
    from spark_sink.ivm.inputs import StoreInputs


class MatchCounts:
    """One outer side's match counts during one epoch."""

    def __init__(self, info: TableInfo, inputs: StoreInputs, view: str) -> None:
        self.info = info
        self.inputs = inputs
        self.view = view
        # key -> its new count, where it changed. Keyed, so a step taken again for the same
        # keys (the row rules taking an epoch the columnar path handed back below an aggregate,
        # after it stepped) records each key once: the count follows from the stored count and
        # the same change either way.
        self._new: dict[tuple, int] = {}

    @property
    def upserts(self) -> list[list]:
        """The counts to write: [key..., count] of each key whose count changed and is > 0."""
        return [[*k, n] for k, n in self._new.items() if n > 0]

    @property
    def deletes(self) -> list[list]:
        """The keys whose count fell to 0: [key..., 0]."""
        return [[*k, 0] for k, n in self._new.items() if n == 0]

    def step(self, keys: set[tuple], change: dict[tuple, int]) -> dict[tuple, tuple[int, int]]:
        """key -> (count at the old barrier, count at the new one) for ``keys``, given the other
        side's net change per key; records the new counts to write."""
        raw = self.inputs.read_state(self.info, list(keys))
        out = {}
        for k in keys:
            got = raw.get(k)
            old = int(got[0]) if got else 0
            new = old + change.get(k, 0)
            if new < 0:
                raise SchemaMismatch(
                    f"view {self.view!r}: join key {k!r} would have {new} matches; the view's "
                    "state is inconsistent with its sources (rebuild the view)"
                )
            if new != old:
                self._new[k] = new
            out[k] = (old, new)
        return out
