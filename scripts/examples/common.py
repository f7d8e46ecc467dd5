"""What a standalone example needs: a ``snapview serve`` on a temporary dir and a SparkSession."""

from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from snapview.local_spark import local_session  # noqa: E402


@contextlib.contextmanager
def local_stack(barrier_interval: str = "500ms"):
    """Yield (spark, address): an embedded server and a local[2] SparkSession, both stopped
    on exit."""
    from snapview.embedded import EmbeddedServer

    srv = EmbeddedServer(extra_args=["--barrier-interval", barrier_interval]).start()
    spark = local_session()
    try:
        yield spark, srv.address
    finally:
        spark.stop()
        srv.stop()
