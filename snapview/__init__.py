"""The snapview application: what a person runs, built on the library packages.

``snapview.cli`` is the ``snapview`` command; ``snapview.embedded`` starts ``snapview serve`` as a
child process; ``snapview.local_spark`` is the one local SparkSession recipe; ``snapview.demos``
holds the bank demo and ``snapview.chaos`` the chaos suite's runner, nemesis, checker and
workloads. Library packages (``kvstore``, ``coordinator``, ``spark_source``, ``spark_sink``) never
import this package.
"""
