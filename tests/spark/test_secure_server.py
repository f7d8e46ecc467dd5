"""Spark against a server that needs TLS and a token: the builder, the source and EpochWriter
take one ConnectionSettings (or the source's options address/token/tokenFile/tlsCa), and a
missing CA or token is named at once, not after a 30 s hang."""

from __future__ import annotations

import time

import pytest

import coordinator
from coordinator import ConnectionSettings
from kvstore.errors import SnapviewError
from spark_sink import EpochWriter, MaterializedView
from tests.conftest import self_signed_cert, serve


# Not server_fixture: files are written before the server starts and their paths go to the tests.
@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """(settings, server): a server with TLS and a token, and the settings that reach it."""
    d = tmp_path_factory.mktemp("secure")
    cert, key = self_signed_cert(str(d))
    tok = d / "token"
    tok.write_text("s3cret\n")
    extra = ["--tls-cert", cert, "--tls-key", key, "--token-file", str(tok)]
    for srv in serve(d / "data", *extra):
        yield ConnectionSettings(f"localhost:{srv.port}", token_file=str(tok), tls_ca=cert), srv


# "At once", not after the 30 s hang a TLS or token mismatch used to be: the error goes through
# Spark's Python data source (a Python worker) and took 3.3 s once on a busy 2-core machine.
PROMPT_S = 10.0


def error_within(seconds: float, fn) -> str:
    t = time.monotonic()
    with pytest.raises(Exception) as e:
        fn()
    took = time.monotonic() - t
    assert took < seconds, f"took {took:.1f}s: {e.value}"
    return str(e.value)


def test_source_reads_with_tls_and_token_options(spark, secure):
    settings, _ = secure
    with coordinator.connect(settings) as c:
        c.create_table("sec_src", "id BIGINT, v BIGINT", primary_key=["id"], if_not_exists=True)
        with c.transaction() as t:
            t.put("sec_src", {"id": 1, "v": 10})
    df = (
        spark.read.format("snapview").options(**settings.spark_options()).option("table", "sec_src")
    )
    assert [r.asDict() for r in df.load().collect()] == [{"id": 1, "v": 10}]
    # the older names: coordinator and authToken
    old = (
        spark.read.format("snapview")
        .option("coordinator", settings.address)
        .option("authToken", "s3cret")
        .option("tlsCa", settings.tls_ca)
        .option("table", "sec_src")
    )
    assert old.load().count() == 1
    # without the CA: TLS is named, at once
    msg = error_within(
        PROMPT_S,
        lambda: (
            spark.read.format("snapview")
            .option("address", settings.address)
            .option("tokenFile", settings.token_file)
            .option("table", "sec_src")
            .load()
            .collect()
        ),
    )
    assert "requires TLS: pass tls_ca" in msg
    msg = error_within(
        PROMPT_S,
        lambda: (
            spark.read.format("snapview")
            .option("address", settings.address)
            .option("tlsCa", settings.tls_ca)
            .option("table", "sec_src")
            .load()
            .collect()
        ),
    )
    assert "needs a token" in msg


def test_builder_and_epoch_writer_with_settings(spark, secure):
    settings, _ = secure
    with coordinator.connect(settings) as c:
        c.create_table("sec_acc", "id BIGINT, b BIGINT", primary_key=["id"], if_not_exists=True)
        c.create_table("sec_out", "id BIGINT, b BIGINT", primary_key=["id"], if_not_exists=True)
        with c.transaction() as t:
            for i in range(5):
                t.put("sec_acc", {"id": i, "b": i % 2})
        # EpochWriter takes the settings
        EpochWriter(settings, table="sec_out")(
            spark.createDataFrame([(7, 1)], "id long, b long"), 0
        )
        assert c.read("sec_out").to_pylist() == [{"id": 7, "b": 1}]
        job = (
            MaterializedView.builder(spark)
            .connection(settings)
            .query("SELECT b, COUNT(*) AS n FROM sec_acc GROUP BY b")
            .target("sec_view")
            .trigger_interval("100 milliseconds")
            .build()
            .start()
        )
        try:
            job.await_barrier(c.tso(), timeout=60)
            snap = c.snapshot(["sec_view"])
            assert sorted(snap.read("sec_view").to_pylist(), key=lambda r: r["b"]) == [
                {"b": 0, "n": 3},
                {"b": 1, "n": 2},
            ]
        finally:
            job.stop()
    # without the CA, the builder names TLS at once
    msg = error_within(
        PROMPT_S,
        lambda: (
            MaterializedView.builder(spark)
            .connection(ConnectionSettings(settings.address, token_file=settings.token_file))
            .query("SELECT b, COUNT(*) AS n FROM sec_acc GROUP BY b")
            .target("sec_view2")
            .build()
        ),
    )
    assert "requires TLS" in msg
    # .coordinator() and .auth_token() are thin aliases that keep the rest of the settings
    b = MaterializedView.builder(spark).connection(settings).coordinator("h:9").auth_token("t")
    assert b._conn() == ConnectionSettings("h:9", token="t", tls_ca=settings.tls_ca)
    with pytest.raises(SnapviewError, match="needs a token"):
        coordinator.connect(settings.address, tls_ca=settings.tls_ca)
