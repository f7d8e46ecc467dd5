"""A stream source's Python process ends quietly when Spark hangs up on it.

Spark runs each streaming Python data source's reader in a process of its own on the driver
(``pyspark.sql.streaming.python_streaming_source_runner``), which serves the JVM's calls over a
socket until the query stops. Spark normally ends that process with SIGTERM before it closes the
socket. But when a query stops mid-call (Spark interrupts its stream thread, which closes the
socket), or on a busy machine where the SIGTERM comes late, the process first finds the socket
gone: it calls the reader's ``stop()`` from its ``finally``, tries to report the error to the JVM
that is no longer there, and prints a three-part traceback (ConnectionResetError, then
BrokenPipeError) on the user's console. Nothing is wrong and nobody is listening.

``end_if_spark_hung_up`` is called from our readers' ``stop()``: when the error in flight is a
hang-up and this process is Spark's stream source runner, it ends the process at once with exit
status 0, after the reader has let go of what it held. Anywhere else (an executor, a user's own
process, a real error) it does nothing, so real errors still print. It ends only a process Spark
made for this one reader and was about to end anyway; it installs nothing process-wide.
"""

from __future__ import annotations

import os
import sys

STREAM_SOURCE_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
# What reading from or writing to a socket the JVM has closed raises (Spark's read_int raises
# EOFError on a closed stream; ConnectionError covers reset and broken pipe).
HANGUP = (ConnectionError, EOFError)


def in_stream_source_runner() -> bool:
    """True in the process Spark runs a streaming data source's reader in."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == STREAM_SOURCE_RUNNER


def _hung_up(exc: BaseException | None) -> bool:
    """``exc`` or one it was raised while handling is a hang-up (a reader's own clean-up, say a
    lease release failing, can stand between the hang-up and the handler)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, HANGUP):
            return True
        exc, seen = exc.__context__, seen + 1
    return False


def end_if_spark_hung_up() -> None:
    """Exit this process quietly (status 0) if it is Spark's stream source runner and the
    exception being handled is the JVM hanging up; otherwise return and change nothing."""
    if _hung_up(sys.exc_info()[1]) and in_stream_source_runner():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(0)  # not sys.exit: the runner's handlers would try the dead socket again
