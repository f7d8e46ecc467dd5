"""TPC-H over snapview: the 22 queries as views, kept up through the refresh functions RF1
(new orders) and RF2 (deleted orders), compared with Spark's batch result at every barrier.

``data`` generates and loads the tables (DuckDB's dbgen) and runs the refresh functions,
``queries`` holds the queries, ``suite`` runs them; ``test_tpch`` is the short run of
``make test`` and ``scripts/bench_tpch.py`` (``make tpch``) the long one.
"""
