"""The one local SparkSession recipe shared by the demo, examples, benchmarks, jobs and tests."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyspark is loaded when a session is asked for
    from pyspark.sql import SparkSession


# Spark's log4j2 set-up for a local session: only errors, and no "Using Spark's default log4j
# profile" banner (printed only without a configuration file). PySpark's JVM counts as a shell,
# whose log level is its main class's (PythonGatewayServer), WARN unless configured; at ERROR, as
# the root, Spark does not print "Setting default log level to ..." either.
LOG4J2 = """\
rootLogger.level = error
logger.shell.name = org.apache.spark.api.python.PythonGatewayServer
logger.shell.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


def _log4j2_file() -> str:
    path = os.path.join(tempfile.gettempdir(), f"snapview-log4j2-{os.getuid()}.properties")
    try:
        with open(path) as f:
            if f.read() == LOG4J2:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(LOG4J2)
    os.replace(tmp, path)
    return path


def local_session(
    master: str = "local[2]", app_name: str = "snapview", shuffle_partitions: int = 2
) -> SparkSession:
    """A SparkSession (``getOrCreate``) on ``master``: Python workers run this interpreter, no UI
    and no console progress bars, session time zone UTC, Spark's own logs at ERROR from the JVM's
    start (a log4j2 configuration of our own), so a run that goes well prints only what its
    caller prints. One line remains, from the JVM itself before any configuration:
    ``WARNING: Using incubator modules: jdk.incubator.vector``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_log4j2_file()}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
