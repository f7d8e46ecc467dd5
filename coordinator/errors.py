"""The coordinator's own errors: refusals of the job topology and of consistent reads.

Each is registered with ``kvstore.errors.register_error``, so a client gets the very same class
back from a failed call (importing ``coordinator`` imports this module).
"""

from __future__ import annotations

from kvstore.errors import (
    AlreadyExists,
    FailedPrecondition,
    NotFound,
    SnapviewError,
    Unavailable,
    register_error,
)


@register_error
class SecondWriter(AlreadyExists):
    """A job asked to write a table another registered job already writes (one writer per
    table)."""


@register_error
class TopologyCycle(FailedPrecondition):
    """Registering a job would make a table depend on itself."""


@register_error
class BarrierNotReached(FailedPrecondition):
    """A table has no version at the barrier asked for (not yet, or it never will)."""


@register_error
class LeaseNotFound(FailedPrecondition):
    """A reader lease that expired (it stopped holding the GC safepoint when it did), was
    released, or was never taken. Take a new one; its snapshot may already be too old."""


class RevisionNotReached(SnapviewError):
    """``Client.wait_revised`` ran out of time: some view downstream of a revision has not
    reached the revision's barrier (its message names them and their jobs' states). The
    revision itself is committed; the views follow when their jobs run."""


def not_revisable(table: str, kind: str) -> FailedPrecondition:
    """The refusal of a revision of a view or state table (``kind``): its contents follow from
    its sources. One text for the server's refusal and the client's early checks."""
    return FailedPrecondition(
        f"table {table!r} is a {kind} table: its contents follow from its sources; revise the "
        f"sources, or rebuild it with `snapview rebuild {table}`"
    )


def not_correctable(table: str) -> FailedPrecondition:
    """The refusal of corrections into an append-only table (no key to correct by)."""
    return FailedPrecondition(
        f"table {table!r} is append-only: its rows have no key to correct by; roll it back to "
        "a barrier instead"
    )


@register_error
class JobDropped(NotFound):
    """An epoch call of a job that a drop of its table unregistered (``coordinator.server.
    drops``): its epochs went with the table, and its writes are refused for good. NOT_FOUND, so
    callers that stop on an unregistered job (NotFound) stop on this too; registering the job
    again starts it anew, at epoch 1."""


@register_error
class RevisionOutcomeUnknown(Unavailable):
    """A revision call ended without knowing whether the revision was applied (its message
    names the revision, or the revision key, and how to look it up). It is applied wholly or
    not at all, and the server settles which; asking again with the same revision key answers
    with it. UNAVAILABLE: a client holding the key may ask again."""
