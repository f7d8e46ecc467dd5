"""Revisions: roll a root table back, apply a correction set, rebuild a view; each recorded.

A revision is a new transaction, never a rewrite of history: the revised table can be read AS OF
before and after it, and revised again. Every view downstream follows by its ordinary maintenance
(the revision is a change of its source like any other), so all of them reach it at one barrier,
the first issued at or above the revision's commit ts (``RevisionRecord.barrier``).

``manager`` (``RevisionManager``, the server's one entry: each call handed to its kind's module),
``records`` (``RevisionRecord`` and the record store in ``meta``: start, update, DONE, close),
``checks`` (what a request must name: a root table, printable labels; the views it reaches),
``rollback`` (fence, drain, write the difference under the revision's primary; settle, recover),
``corrections`` (a correction set's epoch transaction, settled when its writer is gone),
``rebuild`` (a view's job asked to recompute the view at its next barrier) and ``holds`` (the GC
holds of rollbacks running and correction sets being written).

The modules import each other, never this package's names, so any one imports without a cycle.
"""

from coordinator.server.revisions.manager import RevisionManager
from coordinator.server.revisions.records import REVISION_JOB_PREFIX, RevisionRecord
from coordinator.server.revisions.rollback import rollback_primary_key

__all__ = ["REVISION_JOB_PREFIX", "RevisionManager", "RevisionRecord", "rollback_primary_key"]
