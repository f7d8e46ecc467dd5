"""The verbs of the ``snapview`` command, one module per group; ``snapview.cli`` assembles the
parser from them and dispatches.

Each module holds its verbs' whole story: the handler (``cmd_VERB(args)``: connect, fetch,
print; its docstring is the verb's help), the parser (``add_VERB(subparsers)``: ``add_verb`` and
the verb's options) and the renderer (text and JSON). Importing a module loads nothing but the standard library, ``common``,
``kvstore.errors`` and ``snapview.terminal`` (not even ``coordinator.times``, which loads the
client and gRPC): each handler imports what it needs when it runs, so ``snapview --help`` and
``snapview check`` load no client and ``snapview status`` neither PySpark nor pyarrow.

- ``common``: what the verb modules share (``add_verb``, ``client_args``, ``add_duration``,
  ``options_for``, ``connect``, ``parse_duration``); no verb.
- ``serve.py``: ``serve``, the coordinator and the store on one port.
- ``check.py``: ``check``, every record of a store on disk checked for damage.
- ``status.py``: ``status``, the server's version, TSO, counts and space.
- ``tables.py``: ``tables`` (the tables) and ``read`` (a table as of a time or barrier).
- ``topology.py``: ``topology``, who writes what from what (text, JSON, Graphviz DOT by lag).
- ``delay.py``: ``delay``, every table's lag and E2E delay, each view's critical path.
- ``lifecycle.py``: ``jobs`` (and ``jobs release``), ``drop`` and ``views run``.
- ``leases.py``: ``leases`` (and ``leases release``), the GC safepoint, its holds and leases.
- ``revisions.py``: ``revise``, ``rebuild`` and ``revisions`` (docs/revising.md).
- ``workloads.py``: ``demo`` and ``chaos``, a workload over the whole stack.
"""
