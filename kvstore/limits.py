"""What one request may carry, and how clients stay inside it.

The store has one writer (the group committer): a request's write runs as one action inside one
LMDB write transaction, and everything behind it waits. Bounding a request bounds that wait, and
bounds the memory the server needs to parse it (a 90 MB prewrite of 1M mutations once held the
writer for 53 s and left the server at 1.37 GB RSS for good; issue 11, item 6).

* A prewrite (or a rollback) carries at most ``MAX_REQUEST_MUTATIONS`` mutations (keys) and
  ``MAX_REQUEST_BYTES`` of keys and values; the server refuses more with ``RequestTooLarge``
  (INVALID_ARGUMENT naming the count and the limit).
* gRPC refuses any message above ``MAX_MESSAGE_BYTES`` before it is parsed (RESOURCE_EXHAUSTED).
* A write group takes actions until ``MAX_GROUP_MUTATIONS`` mutations, so a small request waits
  for at most one bounded group however many large ones are queued beside it.
* Resolving a transaction's locks (``ResolveLocks``) runs in writes of ``RESOLVE_STEP`` locks.
* A scan chunk holds about ``SCAN_CHUNK_BYTES`` of values at most (rows per chunk adapt to the
  row size), so a table of large rows is read in bounded responses too.
* A keyed multi-range read (``ScanRanges``) names at most ``MAX_SCAN_RANGES`` ranges; the server
  refuses more with ``RequestTooLarge``. Its answer comes in scan chunks, bounded the same way.

Clients split with ``split_mutations`` (and ``split_ranges``); a transaction of any size still commits atomically (the
split requests are prewrites of one Percolator transaction).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

MAX_REQUEST_MUTATIONS = 16_384
MAX_REQUEST_BYTES = 32 << 20
# Framing and the request's other fields on top of the mutations; still far below what once
# let one request pin the writer.
MAX_MESSAGE_BYTES = MAX_REQUEST_BYTES + (8 << 20)
MAX_GROUP_MUTATIONS = MAX_REQUEST_MUTATIONS
SCAN_CHUNK_BYTES = 16 << 20
RESOLVE_STEP = 4096  # locks one resolve_locks write finishes before the next request's turn
MAX_SCAN_RANGES = 65_536  # key ranges in one ScanRanges request

M = TypeVar("M", bound=tuple)


def split_mutations(
    mutations: Sequence[M],
    max_mutations: int = MAX_REQUEST_MUTATIONS,
    max_bytes: int = MAX_REQUEST_BYTES,
) -> list[list[M]]:
    """Consecutive runs of ``mutations`` (``(op, key, value)`` tuples), each within both limits;
    their concatenation is ``mutations``. A single mutation above ``max_bytes`` gets a run of its
    own (the server then names it; values have their own, smaller limit)."""
    return _split(mutations, lambda m: len(m[1]) + len(m[2]), max_mutations, max_bytes)


def split_ranges(
    ranges: Sequence[tuple[bytes, bytes]],
    max_ranges: int = MAX_SCAN_RANGES,
    max_bytes: int = MAX_REQUEST_BYTES,
) -> list[list[tuple[bytes, bytes]]]:
    """Consecutive runs of ``(start, end)`` key ranges, each within both limits (for
    ScanRanges requests); their concatenation is ``ranges``."""
    return _split(ranges, lambda r: len(r[0]) + len(r[1]), max_ranges, max_bytes)


def _split(
    items: Sequence[M], size_of: Callable[[M], int], max_items: int, max_bytes: int
) -> list[list[M]]:
    runs: list[list[M]] = []
    run: list[M] = []
    size = 0
    for m in items:
        n = size_of(m)
        if run and (len(run) >= max_items or size + n > max_bytes):
            runs.append(run)
            run, size = [], 0
        run.append(m)
        size += n
    if run:
        runs.append(run)
    return runs


def split_keys(keys: Sequence[bytes], max_keys: int = MAX_REQUEST_MUTATIONS) -> list[list[bytes]]:
    """``keys`` in runs of at most ``max_keys`` (for rollback and commit requests)."""
    return [list(keys[i : i + max_keys]) for i in range(0, len(keys), max_keys)] or [[]]
