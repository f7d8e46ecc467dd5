"""The one local SparkSession recipe shared by the demo, examples, benchmarks, jobs and tests."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyspark is loaded when a session is asked for
    from pyspark import SparkConf
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
    master: str = "local[2]",
    app_name: str = "snapview",
    shuffle_partitions: int = 2,
    settings: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession (``getOrCreate``) on ``master``: Python workers run this interpreter, no UI
    and no console progress bars, session time zone UTC, Spark's own logs at ERROR from the JVM's
    start (a log4j2 configuration of our own), so a run that goes well prints only what its
    caller prints. One line remains, from the JVM itself before any configuration:
    ``WARNING: Using incubator modules: jdk.incubator.vector``. ``settings`` are further Spark
    configuration (``spark.driver.memory`` takes effect only if this starts the JVM).

    The process's environment is left alone: with ``PYSPARK_PYTHON`` unset, the context this
    starts runs its Python workers on ``sys.executable`` (PySpark reads the interpreter from the
    environment only, so it is set on the context, not exported)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    conf = SparkConf().setMaster(master).setAppName(app_name)
    conf.set("spark.ui.enabled", "false")
    conf.set("spark.ui.showConsoleProgress", "false")
    conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    conf.set("spark.sql.session.timeZone", "UTC")
    conf.set("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_log4j2_file()}")
    for k, v in (settings or {}).items():
        conf.set(k, v)
    started = SparkContext._active_spark_context is None
    if started and SparkContext._gateway is None:
        _start_jvm(conf)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    if started and "PYSPARK_PYTHON" not in os.environ:
        spark.sparkContext.pythonExec = sys.executable
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _start_jvm(conf: SparkConf) -> None:
    """Start Spark's JVM and context as PySpark does, but without closing this process's file
    descriptors in the child between fork and exec (``close_fds=False``; every descriptor
    Python and gRPC open is close-on-exec anyway, PEP 446). PySpark forks with a ``preexec_fn``,
    so gRPC's fork handlers run, and in the child they restart gRPC's poller, which then logged
    "epoll_wait error: Bad file descriptor" now and then when the descriptors were closed under
    it (issue 24, item 1: snapview no longer turns gRPC's fork support off for the process)."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    SparkContext(conf=conf, gateway=launch_gateway(conf, popen_kwargs={"close_fds": False}))
