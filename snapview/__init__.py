"""The snapview application: what a person runs, built on the library packages.

``snapview.cli`` is the ``snapview`` command: it assembles the parser from ``snapview.commands``
(one module per group of verbs, each with its parser, handler and renderer) and dispatches;
``snapview.terminal`` escapes the text the CLI prints but did not write;
``snapview.revision_preview`` is ``revise --dry-run``'s Spark preview of the views and
``snapview.views_service`` runs ``snapview views run``'s view jobs. ``snapview.embedded`` starts
``snapview serve`` as a child process; ``snapview.local_spark`` is the one local SparkSession
recipe; ``snapview.demos`` holds the bank demo and ``snapview.chaos`` the chaos suite's runner,
nemesis, checker and workloads. Library packages (``kvstore``, ``coordinator``, ``spark_source``,
``spark_sink``) never import this package.
"""
