"""The four parts every manager of the server is built on: the store, its timestamp oracle, the
job registry and the barriers (``Core``).

``snapview serve`` opens them in that order (each needs the ones before it) and hands the bundle
to the managers built on top of them (``GcManager``, ``RevisionManager``, ``Rollbacks``), so a
manager's constructor names what is its own and a fifth shared part is added in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coordinator.server.barriers import Barriers
    from coordinator.server.registry import Registry
    from coordinator.server.tso import TimestampOracle
    from kvstore.store import LocalStore


@dataclass(frozen=True)
class Core:
    """The server's shared parts. Immutable: the parts themselves are the long-lived objects;
    this only says which belong together."""

    store: LocalStore
    tso: TimestampOracle
    registry: Registry
    barriers: Barriers
