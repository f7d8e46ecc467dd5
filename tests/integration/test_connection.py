"""One set of connection settings (coordinator.ConnectionSettings), and a server that needs TLS
or a token named as such at once, not after the transport retries run out."""

from __future__ import annotations

import time

import pytest

import coordinator
from coordinator import ConnectionSettings
from kvstore.errors import Unauthenticated, Unavailable
from tests.conftest import cli, self_signed_cert, serve

TOKEN = "s3cret"


# Not server_fixture: files are written before the server starts and their paths go to the tests.
@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """(server, ca): a server that speaks TLS only."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = self_signed_cert(str(d))
    for srv in serve(d / "data", "--tls-cert", cert, "--tls-key", key):
        yield srv, cert


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    """(server, token file): a server that needs the token."""
    d = tmp_path_factory.mktemp("tok")
    tok = d / "token"
    tok.write_text(TOKEN + "\n")
    for srv in serve(d / "data", "--token-file", str(tok)):
        yield srv, str(tok)


def timed(fn):
    t = time.monotonic()
    try:
        fn()
    except Exception as e:
        return e, time.monotonic() - t
    raise AssertionError("no error")


def test_settings_from_env(monkeypatch):
    monkeypatch.setenv("SNAPVIEW_ADDRESS", "h:1")
    monkeypatch.setenv("SNAPVIEW_TOKEN_FILE", "/tok")
    monkeypatch.setenv("SNAPVIEW_TLS_CA", "/ca.pem")
    s = ConnectionSettings.from_env()
    assert s == ConnectionSettings("h:1", None, "/tok", "/ca.pem")
    # a token given clears the token file, and the token never shows in repr
    s2 = ConnectionSettings.from_env(address="h:2", token="xyz")
    assert (s2.address, s2.token, s2.token_file) == ("h:2", "xyz", None) and "xyz" not in repr(s2)
    assert s2.spark_options() == {"address": "h:2", "token": "xyz", "tlsCa": "/ca.pem"}
    monkeypatch.delenv("SNAPVIEW_ADDRESS")
    monkeypatch.setenv("SNAPVIEW_COORDINATOR", "old:3")  # the older name still works
    assert ConnectionSettings.from_env().address == "old:3"


def test_tls_server_with_the_ca(tls):
    srv, ca = tls
    with coordinator.connect(f"localhost:{srv.port}", tls_ca=ca) as c:
        assert c.tso() > 0
    with coordinator.connect(ConnectionSettings(f"localhost:{srv.port}", tls_ca=ca)) as c:
        assert c.tso() > 0
        assert c.settings.tls_ca == ca


def test_tls_server_without_the_ca_is_named_at_once(tls):
    srv, ca = tls
    e, took = timed(lambda: coordinator.connect(srv.address))
    assert isinstance(e, Unavailable) and took < 3, (e, took)
    assert f"server at {srv.address} requires TLS: pass tls_ca" in str(e)


def test_plain_server_with_a_ca_is_named_at_once(server, tls):
    _, ca = tls
    e, took = timed(lambda: coordinator.connect(server.address, tls_ca=ca))
    assert isinstance(e, Unavailable) and took < 3, (e, took)
    assert "does not speak TLS" in str(e)


def test_token_server_without_token_is_named_at_once(token_server):
    srv, tok = token_server
    e, took = timed(lambda: coordinator.connect(srv.address))
    assert isinstance(e, Unauthenticated) and took < 3, (e, took)
    assert f"server at {srv.address} needs a token" in str(e)
    e, took = timed(lambda: coordinator.connect(srv.address, token="wrong"))
    assert isinstance(e, Unauthenticated) and "refused the token" in str(e) and took < 3
    with coordinator.connect(ConnectionSettings(srv.address, token_file=tok)) as c:
        assert c.tso() > 0
    with coordinator.connect(srv.address, token=TOKEN) as c:
        assert c.tso() > 0


def test_unreachable_server_is_not_an_error_at_connect():
    """Nothing listening (not started yet, restarting): connect stays lazy, calls retry."""
    c = coordinator.connect("127.0.0.1:1", retry=coordinator.RetryPolicy(max_attempts=2))
    with pytest.raises(coordinator.SnapviewError):
        c.tso()
    c.close()


def test_cli_connection_flags_and_env(tls, token_server):
    """Every client verb takes --address, --token-file and --tls-ca (or SNAPVIEW_*); a
    mismatch is one line naming what is missing."""
    srv, ca = tls
    addr = f"localhost:{srv.port}"
    for verb in ("status", "tables", "topology", "delay"):
        r = cli(verb, "--address", addr, "--tls-ca", ca)
        assert r.returncode == 0, (verb, r.stderr)
    r = cli("tables", env={"SNAPVIEW_ADDRESS": addr, "SNAPVIEW_TLS_CA": ca})
    assert r.returncode == 0 and r.stdout.strip() == "no tables", r.stderr
    r = cli("status", "--address", srv.address)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert "requires TLS: pass tls_ca" in r.stderr
    tsrv, tok = token_server
    r = cli("status", "--address", tsrv.address)
    assert r.returncode == 1 and "needs a token" in r.stderr and "--token-file" in r.stderr
    assert cli("status", "--address", tsrv.address, "--token-file", tok).returncode == 0
    r = cli("status", env={"SNAPVIEW_ADDRESS": tsrv.address, "SNAPVIEW_TOKEN_FILE": tok})
    assert r.returncode == 0, r.stderr
