"""Which Python Spark's workers run, checked before any snapview data source is registered.

A SparkContext fixes its workers' interpreter when it starts: ``$PYSPARK_PYTHON``, else
``python3`` on the PATH, which is rarely the virtual environment snapview is installed in. A data
source registered then fails only when a query first runs, deep in a Java stack, with ``No module
named 'spark_source'``. Decisions:

- ``PYSPARK_PYTHON`` unset and the default ``python3`` cannot import snapview: snapview uses the
  driver's own interpreter (``sys.executable``) for the data sources it registers (and for UDFs
  registered afterwards), which is what a user running from a virtual environment means.
- ``PYSPARK_PYTHON`` set to a Python that cannot import snapview: an explicit choice is not
  overridden; ``InvalidArgument`` at once, one line naming ``PYSPARK_PYTHON``.
- Only a local master is checked (its workers run on this machine, with this environment); on a
  cluster the workers' Python is the cluster's business.

The check runs the candidate interpreter once per SparkContext (about a second), and only when it
is not the driver's own.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

from pyspark.sql import SparkSession

from kvstore.errors import InvalidArgument

log = logging.getLogger("snapview.spark")

PROBE = "import pyspark, pyarrow, grpc, lmdb, spark_source"
_CHECKED = "_snapview_worker_python_checked"


def _probe(python: str) -> str | None:
    """None if ``python`` imports what a snapview worker needs, else the reason it does not."""
    path = shutil.which(python)
    if path is None:
        return "not found"
    try:
        r = subprocess.run(
            [path, "-c", PROBE], capture_output=True, text=True, timeout=60, env=os.environ.copy()
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if r.returncode == 0:
        return None
    lines = (r.stderr or r.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {r.returncode}"


def ensure_worker_python(spark: SparkSession) -> None:
    """Make sure the Python workers of ``spark`` can run snapview's data sources (see the module
    docstring); raise InvalidArgument naming PYSPARK_PYTHON if they cannot."""
    sc = spark.sparkContext
    if getattr(sc, _CHECKED, False):
        return
    if not (sc.master or "").startswith("local"):
        setattr(sc, _CHECKED, True)
        return
    python = sc.pythonExec
    same = shutil.which(python) in (sys.executable, os.path.abspath(sys.executable))
    why = None if same else _probe(python)
    if why is not None:
        if os.environ.get("PYSPARK_PYTHON") or python != "python3":
            raise InvalidArgument(
                f"Spark's Python workers run PYSPARK_PYTHON={python}, which cannot import "
                f"snapview ({why}); set PYSPARK_PYTHON={sys.executable} (this Python) before "
                "the SparkSession starts, or unset it"
            )
        log.info("Spark's workers would run %s (%s); using %s", python, why, sys.executable)
        sc.pythonExec = sys.executable
    setattr(sc, _CHECKED, True)
