"""Files only their owner can read: a server's data dir and everything the server keeps in it.

The data dir holds every row, readable there past any token. So, as PostgreSQL treats its data
directory, ``snapview serve`` makes it its own alone: every directory it creates is 0700 and every
file 0600, set explicitly (``fchmod``) whatever the umask, and it refuses to start, with one line
naming the path and the fix, on a data dir

- that is a symbolic link, or holds one where the server keeps a file (``serve.lock``,
  ``instance``, ``lmdb/`` and LMDB's ``data.mdb`` and ``lock.mdb``): nothing is written through
  a link (files are opened with ``O_NOFOLLOW``);
- that is owned by another user (``st_uid != geteuid()``), or holds such a file;
- that grants its group or others any permission: the fix is ``chmod 700 DIR``. The server does
  not tighten an existing data dir itself (a chmod of someone's directory would surprise them);
  the files inside one that passed are its own, and it tightens those to 0600 (0700 for
  ``lmdb/``) at each start, so a data dir written by an older snapview (0644 files) needs only
  that one chmod.

A data dir that passes these checks can be changed by no other user (root aside), so what the
server then opens in it is what it checked. Another process of the same user on the same host
(a direct writer, ``kvstore.direct``) still opens the store; one of another user cannot, and
falls back to the RPC.
"""

from __future__ import annotations

import os
import shlex
import stat

from kvstore.errors import FailedPrecondition

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def make_private_dirs(path: str) -> str | None:
    """Create ``path`` and its missing parents, each 0700 whatever the umask. Returns the
    outermost directory created (None: ``path`` existed), which a caller that fails later
    may remove. An existing ``path`` is left as it is (``check_private_dir`` judges it)."""
    path = os.path.abspath(path)
    missing: list[str] = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    created: str | None = None
    for d in reversed(missing):
        try:
            os.mkdir(d, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another process: the checks that follow judge it
        created = created or d
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
        try:
            os.fchmod(fd, PRIVATE_DIR_MODE)  # the umask may have taken bits the owner needs
        finally:
            os.close(fd)
    return created


def _owner_problem(path: str, st: os.stat_result, what: str) -> FailedPrecondition | None:
    me = os.geteuid()
    if st.st_uid == me:
        return None
    return FailedPrecondition(
        f"{what} {path} is owned by uid {st.st_uid}, not by this server's user (uid {me}): "
        f"run snapview serve as its owner, or give it to this user (chown -R {me} "
        f"{shlex.quote(path)})"
    )


def check_private_dir(path: str, what: str = "data dir") -> None:
    """Refuse (FailedPrecondition, one line naming ``path`` and the fix) a ``path`` that is a
    symbolic link, not a directory, owned by another user, or open to its group or others."""
    st = os.lstat(os.path.normpath(path))  # "link/" would follow the link
    if stat.S_ISLNK(st.st_mode):
        raise FailedPrecondition(
            f"{what} {path} is a symbolic link; snapview serve follows no links in its data dir: "
            f"give the real directory ({os.path.realpath(path)})"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise FailedPrecondition(f"{what} {path} is not a directory")
    problem = _owner_problem(path, st, what)
    if problem is not None:
        raise problem
    if st.st_mode & 0o077:
        raise FailedPrecondition(
            f"{what} {path} is open to other users (mode {stat.S_IMODE(st.st_mode):04o}); it "
            f"holds every row: run chmod 700 {shlex.quote(path)}"
        )


def check_entry(path: str, directory: bool = False) -> None:
    """Refuse a ``path`` inside a data dir that is a symbolic link, owned by another user, or not
    a regular file (``directory``: not a directory). A missing one is fine (it will be made)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise FailedPrecondition(
            f"{path} is a symbolic link; snapview serve follows no links in its data dir "
            "(nothing was written through it): remove it"
        )
    problem = _owner_problem(path, st, "data dir entry")
    if problem is not None:
        raise problem
    if directory and not stat.S_ISDIR(st.st_mode):
        raise FailedPrecondition(f"{path} is not a directory")
    if not directory and not stat.S_ISREG(st.st_mode):
        raise FailedPrecondition(f"{path} is not a regular file")


def open_private(path: str, flags: int) -> int:
    """``os.open(path, flags)`` for a file of a data dir: made 0600 if created (and set to 0600
    whatever the umask, or its old mode), never through a symbolic link; refused
    (FailedPrecondition) if it is a link, not a regular file, or another user's."""
    check_entry(path)  # before opening: a FIFO would block the open
    try:
        fd = os.open(path, flags | _NOFOLLOW, PRIVATE_FILE_MODE)
    except OSError as e:
        check_entry(path)  # a link put there meanwhile: refused by name
        raise FailedPrecondition(f"cannot open {path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        problem = _owner_problem(path, st, "data dir entry")
        if problem is not None:
            raise problem
        if not stat.S_ISREG(st.st_mode):
            raise FailedPrecondition(f"{path} is not a regular file")
        if stat.S_IMODE(st.st_mode) != PRIVATE_FILE_MODE:
            os.fchmod(fd, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: str, data: bytes) -> None:
    """Replace the contents of the data dir file ``path`` with ``data`` (``open_private``)."""
    fd = open_private(path, os.O_WRONLY | os.O_CREAT)
    with os.fdopen(fd, "wb") as f:
        f.truncate(0)  # only now that it is known to be ours
        f.write(data)


def tighten(path: str, directory: bool = False) -> None:
    """Set an existing data dir entry ``path`` to 0600 (``directory``: 0700), not through a
    link; a missing one is left missing."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags | _NOFOLLOW)
    except FileNotFoundError:
        return
    try:
        mode = PRIVATE_DIR_MODE if directory else PRIVATE_FILE_MODE
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
