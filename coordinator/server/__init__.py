"""The coordinator's server side: what runs inside ``snapview serve``.

``core`` (the store, TSO, registry and barriers the managers are built on), ``tso``
(timestamp oracle), ``epochs`` (one Percolator transaction per job epoch), ``barriers``
(timestamp barriers and view versions), ``registry`` (jobs, one writer per table, no cycles),
``roles`` (who may call what), ``snapshot_planner`` (consistent snapshots and the barriers a view
job may take), ``delay`` (barrier lag and E2E delay), ``meta`` (the coordinator's key space in
the ``meta`` column family), ``gc`` (the GC safepoint and its steps), ``leases`` (reader leases),
``owned_holds`` (holds with an owner and a TTL), ``drops`` (what goes with a dropped table: its
jobs' epochs and view versions), ``revisions`` (a package, one module per concept: rollbacks,
corrections and rebuilds, their records, request checks and GC holds; its ``__init__`` maps it),
``metrics`` and ``metrics_http`` (Prometheus metrics and their endpoint), ``service`` (the
Coordinator gRPC service) and ``serve`` (both services on one port).

Everything here may use the storage engine; the public client (``coordinator`` itself) must not
import this package.
"""
