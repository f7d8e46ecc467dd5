"""The net change between two in-memory versions of a table, as a change scan gives it."""

from __future__ import annotations


def net_change(old: dict, new: dict) -> tuple[list[tuple], list[int]]:
    """Rows and weights: for each key (in key order) whose row differs, its old row at -1 and
    its new row at +1 (an absent side gives nothing)."""
    rows, weights = [], []
    for key in sorted(set(old) | set(new)):
        x, y = old.get(key), new.get(key)
        if x == y:
            continue
        if x is not None:
            rows.append(x)
            weights.append(-1)
        if y is not None:
            rows.append(y)
            weights.append(1)
    return rows, weights
