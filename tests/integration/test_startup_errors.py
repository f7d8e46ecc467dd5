"""``snapview serve`` start-up failures: one clear line, exit status 1, and no data dir left
behind by a start that failed; IPv6 hosts; the warning for an --insecure non-loopback bind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

import coordinator
from kvstore.store import LocalStore
from snapview.embedded import EmbeddedServer


def serve(data_dir, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snapview", "serve", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line_error(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("snapview: error: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_garbage_tls_certificate(tmp_path):
    """A certificate and key that are not PEM: one line naming them; no data dir."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("not a certificate\n")
    key.write_text("not a key\n")
    d = tmp_path / "data"
    r = serve(d, "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key))
    assert_one_line_error(r, "TLS certificate", str(cert), str(key))
    assert not d.exists()


def test_busy_port(tmp_path):
    """A port another process listens on: one line naming the address; no data dir."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        d = tmp_path / "data"
        r = serve(d, "--port", str(port))
    assert_one_line_error(r, f"cannot bind 127.0.0.1:{port}", "in use")
    assert not d.exists()


def test_address_not_of_this_host(tmp_path):
    """An address no interface has: one line; no data dir (nor its parents)."""
    d = tmp_path / "new" / "data"
    r = serve(d, "--port", "0", "--host", "192.0.2.1", "--insecure")  # TEST-NET-1
    assert_one_line_error(r, "cannot bind 192.0.2.1")
    assert not (tmp_path / "new").exists()


def test_store_that_fails_to_open_leaves_no_new_data_dir(tmp_path):
    """A step after the data dir was created fails (the store refuses its map size): one line,
    and the directories this start created are removed again."""
    d = tmp_path / "new" / "data"
    r = serve(d, "--port", "0", "--map-size-mb", "-1")
    assert_one_line_error(r, "cannot open the store")
    assert not (tmp_path / "new").exists()


def test_zeroed_lmdb_meta_pages(tmp_path):
    """An LMDB file whose meta pages were zeroed: one line saying the store cannot be opened;
    the (pre-existing) data dir and its file are left as they were."""
    d = tmp_path / "data"
    LocalStore(str(d / "lmdb"), sync=False).close()
    mdb = d / "lmdb" / "data.mdb"
    with open(mdb, "r+b") as f:
        f.write(b"\0" * 2 * 4096)  # both meta pages
    before = mdb.read_bytes()
    r = serve(d, "--port", "0")
    assert_one_line_error(r, "cannot be opened", str(d / "lmdb"))
    assert mdb.read_bytes() == before


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this host")
def test_ipv6_host(tmp_path):
    """``--host ::1`` binds [::1]:PORT (bracketed) and serves."""
    with EmbeddedServer(str(tmp_path / "d"), extra_args=["--host", "::1"]) as srv:
        with coordinator.connect(f"[::1]:{srv.port}") as c:
            assert c.tso() > 0


def test_insecure_non_loopback_bind_warns(tmp_path):
    """--insecure on a non-loopback address starts, with a warning on stderr saying so."""
    srv = EmbeddedServer(str(tmp_path / "d"), extra_args=["--host", "0.0.0.0", "--insecure"])
    with srv:
        with coordinator.connect(f"127.0.0.1:{srv.port}") as c:
            assert c.tso() > 0
    with open(srv.log_path) as f:
        log = f.read()
    assert "not loopback" in log and "--insecure" in log, log


def test_loopback_bind_does_not_warn(server):
    with open(os.path.join(server.data_dir, "serve.log")) as f:
        assert "--insecure" not in f.read()
