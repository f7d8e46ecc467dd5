"""The data dir is the server's alone (kvstore.private_files): a real ``snapview serve`` makes its
directories 0700 and its files 0600 even under umask 000, tightens the files an older snapview
left readable, and refuses, in one line naming the path and the fix, a data dir (or a file the
server keeps in it) that is a symbolic link or another user's, and a data dir open to others,
writing nothing through the link or into the refused directory."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading

import pytest

from snapview.embedded import READY_PREFIX
from tests.integration.test_startup_errors import assert_one_line_error, serve

FILES = ("serve.lock", "instance", "lmdb/data.mdb", "lmdb/lock.mdb")
NOBODY = 65534


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def start_with_umask(data_dir, umask: int) -> subprocess.Popen:
    """``snapview serve`` under ``umask``, returned once it is ready."""
    proc = subprocess.Popen(
        ["sh", "-c", f'umask {umask:03o}; exec "$@"', "sh", sys.executable, "-m", "snapview"]
        + ["serve", "--data-dir", str(data_dir), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(READY_PREFIX):
                ready.set()
                return

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(30):
        proc.kill()
        proc.wait()
        raise AssertionError("snapview serve did not start")
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(10)


def test_directories_0700_files_0600_whatever_the_umask(tmp_path):
    """Under umask 000 the server makes the data dir (and the parent it creates), lmdb/ and every
    file 0700/0600; files an older snapview left 0644 (lmdb/ 0755) are tightened at the next
    start."""
    d = tmp_path / "new" / "data"
    proc = start_with_umask(d, 0o000)
    try:
        for p in (tmp_path / "new", d, d / "lmdb"):
            assert mode(p) == 0o700, p
        for f in FILES:
            assert mode(d / f) == 0o600, f
    finally:
        stop(proc)
    for f in FILES:
        os.chmod(d / f, 0o644)
    os.chmod(d / "lmdb", 0o755)
    proc = start_with_umask(d, 0o022)
    try:
        assert mode(d / "lmdb") == 0o700
        for f in FILES:
            assert mode(d / f) == 0o600, f
    finally:
        stop(proc)


def test_data_dir_that_is_a_symlink_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    r = serve(link, "--port", "0")
    assert_one_line_error(r, f"data dir {link} is a symbolic link", str(real))
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("entry", ["instance", "serve.lock", "lmdb/data.mdb"])
def test_file_that_is_a_symlink_is_refused_and_nothing_written_through_it(tmp_path, entry):
    d = tmp_path / "data"
    (d / "lmdb").mkdir(mode=0o700, parents=True)
    d.chmod(0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    (d / entry).symlink_to(victim)
    r = serve(d, "--port", "0")
    assert_one_line_error(r, str(d / entry), "symbolic link")
    assert victim.read_text() == "precious\n"
    assert mode(victim) == 0o644


@pytest.mark.parametrize("perms", [0o750, 0o705], ids=["0750", "0705"])
def test_data_dir_open_to_others_is_refused_naming_the_fix(tmp_path, perms):
    d = tmp_path / "data"
    d.mkdir()
    d.chmod(perms)
    r = serve(d, "--port", "0")
    assert_one_line_error(r, str(d), f"mode {perms:04o}", f"chmod 700 {d}")
    assert mode(d) == perms  # not changed behind the user's back
    assert list(d.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
@pytest.mark.parametrize("entry", ["", "instance", "lmdb"])
def test_data_dir_or_file_of_another_user_is_refused(tmp_path, entry):
    d = tmp_path / "data"
    (d / "lmdb").mkdir(mode=0o700, parents=True)
    d.chmod(0o700)
    (d / "instance").write_text("x")
    os.chown(d / entry, NOBODY, -1)
    r = serve(d, "--port", "0")
    path = str(d / entry) if entry else str(d)
    assert_one_line_error(r, f"{path} is owned by uid {NOBODY}", f"chown -R 0 {path}")
    assert (d / "instance").read_text() == "x"
    assert not (d / "serve.lock").exists()
