"""The net change between two in-memory versions of a table, as a change scan gives it, and
keyed reads' rows cut to the columns asked for, as ``StoreInputs.fetch`` gives them."""

from __future__ import annotations

from spark_sink.ivm.inputs import add_images


def net_change(old: dict, new: dict) -> tuple[list[tuple], list[int]]:
    """Rows and weights: for each key (in key order) whose row differs, its old row at -1 and
    its new row at +1 (an absent side gives nothing)."""
    rows, weights = [], []
    for key in sorted(set(old) | set(new)):
        x, y = old.get(key), new.get(key)
        if x == y:
            continue
        add_images(rows, weights, x, y)  # the same rule as a change scan's images
    return rows, weights


def cut(rows: list[tuple], names: tuple[str, ...], columns: tuple[str, ...] | None) -> list[tuple]:
    """``rows`` (over ``names``) over ``columns`` in that order; whole when ``columns`` is None."""
    if columns is None:
        return list(rows)
    at = [names.index(c) for c in columns]
    return [tuple(r[i] for i in at) for r in rows]
