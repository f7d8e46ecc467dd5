"""The LMDB environment: named sub-databases as column families, a reader, and a write buffer.

One environment holds every CF, the catalog and the coordinator's own state (``meta``), so one
LMDB write transaction can change any of them atomically. The map grows instead of failing: a
write that hits MDB_MAP_FULL is retried after the map doubles (see ``Storage.grow``).

Durability: with ``sync=True`` (the default) every LMDB commit fsyncs before it returns, so a write
acknowledged to a caller survives kill -9 and power loss. ``sync=False`` skips the fsync (an OS
crash may lose the newest commits, a process crash loses nothing); benchmarks print which they use.

Integrity: before LMDB opens the data file, ``kvstore.integrity.check_data_file`` checks its meta
pages; before anything reads a tree page, ``check_pages_present`` checks that the file holds every
page LMDB may read (a truncated file would otherwise be a SIGBUS on the first read of a missing
page). The store's record layout is recorded in the meta CF
(``store/format``) and checked at open. Records carry a checksum (kvstore.mvcc.records); the
``Reader`` verifies every record it decodes and raises DataLoss naming the table and key of a
damaged one. A write that fails because the filesystem is full becomes DiskFull
(``Storage.resource_error``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from operator import itemgetter

import lmdb

from kvstore import integrity
from kvstore.errors import DataLoss, DiskFull, FailedPrecondition
from kvstore.meta_keys import STORE_FORMAT_KEY
from kvstore.mvcc.keys import TS_MASK, encode_ts, parse_versioned_key, table_id_of, versioned_key
from kvstore.mvcc.records import (
    CRC_BYTES,
    STORE_FORMAT,
    ChecksumMismatch,
    Lock,
    Write,
    crc32,
)
from kvstore.private_files import PRIVATE_FILE_MODE, make_private_dirs, tighten

CF_NAMES = ("lock", "data", "write", "changes", "txn_locks", "txn_ranges", "catalog", "meta")
DEFAULT_MAP_SIZE = 64 << 20
# A failed write leaves the filesystem with less than this free: it was the space that ran out
# (LMDB reports a short write of the data file as EIO, not ENOSPC).
DISK_FULL_SLACK_BYTES = 4 << 20


# What LMDB raises on a page that is not what the tree expects (garbage inside the data file).
DAMAGED_TREE = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.BadTxnError, lmdb.PanicError)


def raw_key_name(key: bytes) -> str:
    """How a user key is named without a catalog: its table id and bytes."""
    if len(key) < 4:
        return f"key {key.hex()}"
    return f"table id {table_id_of(key)} key {key.hex()}"


class _ResizeLock:
    """Readers share it; growing the map takes it alone (LMDB forbids a resize under readers).

    Re-entrant per thread: a thread that holds a share takes another one without waiting, even
    while a resize waits. The resize waits for that thread's first share to end, so making the
    second one wait for the resize would deadlock both for good (issue 24). Shares are counted
    per thread that took them, so a share released on another thread (a generator finished
    elsewhere) still releases the right one. A thread holding a share must not wait for the
    writer either (``holds_share``): the writer may be the one growing the map."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._resizing = False
        self._shares: dict[int, int] = {}  # thread id -> shares it holds

    def holds_share(self) -> bool:
        """Whether the calling thread holds a share (it has a read transaction open)."""
        return threading.get_ident() in self._shares

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if me not in self._shares:
                while self._resizing:
                    self._cond.wait()
            self._readers += 1
            self._shares[me] = self._shares.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._shares[me] == 1:
                    del self._shares[me]
                else:
                    self._shares[me] -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        if self.holds_share():
            raise RuntimeError("the map cannot grow on a thread that has a read transaction open")
        with self._cond:
            self._resizing = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()


class Storage:
    """An open LMDB environment with the snapview column families."""

    def __init__(
        self,
        path: str,
        map_size: int = DEFAULT_MAP_SIZE,
        sync: bool = True,
        create: bool = True,
        readonly: bool = False,
    ) -> None:
        """Open (``create``: or make) the environment at ``path``. ``readonly`` opens an existing
        one for reading only (``snapview check``), beside a server or without one."""
        if not readonly:
            make_private_dirs(path)  # 0700, and its files 0600 (kvstore.private_files)
        self.path = path
        self.sync = sync
        # How errors name a user key; LocalStore names the table and the key's values instead.
        self.key_namer: Callable[[bytes], str] = raw_key_name
        integrity.check_data_file(path)  # the header: LMDB refuses a bad one less clearly
        self.env = lmdb.open(
            path,
            map_size=map_size,
            max_dbs=len(CF_NAMES) + 2,
            sync=sync,
            max_readers=1024,
            readahead=False,
            metasync=sync,
            readonly=readonly,
            create=not readonly,
            mode=PRIVATE_FILE_MODE,  # LMDB's data.mdb and lock.mdb (less what the umask takes)
        )
        self._resize = _ResizeLock()
        try:
            if create and not readonly:
                # 0600 whatever the umask, or the mode an older snapview left.
                for name in ("data.mdb", "lock.mdb"):
                    tighten(os.path.join(path, name))
            # Before the first read of a tree page (opening a CF reads the main tree): a page
            # past the end of the file would be a SIGBUS, here it is DataLoss naming the file.
            integrity.check_pages_present(self.env, path)
            self.cf = self._open_cfs(readonly)
            self._check_format(create and not readonly)
        except DAMAGED_TREE as e:  # a damaged page on the way to the CFs or the format record
            self.env.close()
            raise self.tree_damaged(e) from None
        except BaseException:
            self.env.close()
            raise

    def _open_cfs(self, readonly: bool) -> dict[str, lmdb._Database]:
        # Opening the CFs is this process's first transaction. Another process (the server, for
        # a direct prewriter or reader) may have grown the map past the size this one mapped,
        # even between lmdb.open and here: LMDB then refuses the transaction (MDB_MAP_RESIZED)
        # until this process adopts the grown size, which it may do now, with none open.
        for _ in range(3):
            try:
                return {name: self._open_cf(name, readonly) for name in CF_NAMES}
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)
        return {name: self._open_cf(name, readonly) for name in CF_NAMES}

    def _open_cf(self, name: str, readonly: bool) -> lmdb._Database:
        if not readonly:
            return self.env.open_db(name.encode())
        try:
            return self.env.open_db(name.encode(), create=False)
        except lmdb.NotFoundError:
            raise DataLoss(
                f"data loss: {self.path}: the column family {name!r} is missing"
            ) from None

    def _check_format(self, create: bool) -> None:
        """Refuse a store of another record layout; record ours in a new one (``create``)."""
        with self.env.begin(write=create) as txn:
            raw = txn.get(STORE_FORMAT_KEY, db=self.cf["meta"])
            if raw is None:
                empty = all(txn.stat(db)["entries"] == 0 for db in self.cf.values())
                if empty and create:
                    txn.put(STORE_FORMAT_KEY, str(STORE_FORMAT).encode(), db=self.cf["meta"])
                    return
                found = "1 (records without checksums)" if not empty else "unknown (none recorded)"
            elif raw == str(STORE_FORMAT).encode():
                return
            else:
                found = raw.decode(errors="replace")
        raise FailedPrecondition(
            f"{self.path}: the store's on-disk format is {found}; this snapview reads format "
            f"{STORE_FORMAT} only. Read the data with the snapview that wrote it and load it into "
            "a new data dir"
        )

    def close(self) -> None:
        self.env.close()

    @contextlib.contextmanager
    def read_txn(self, within: Reader | None = None) -> Iterator[Reader]:
        """A consistent read-only view of every CF. A damaged LMDB tree met on the way (a page
        overwritten with garbage) is DataLoss naming the data file, not a bare lmdb error.

        ``within``: a Reader the caller has open already, handed back as it is. A function that
        reads takes one, so a caller holding a transaction never opens a second one: one thread,
        one read transaction at a time (see ``_ResizeLock``).

        While it is open, the thread must not wait for the writer (``no_read_open``): the writer
        may be growing the map, which waits for every read transaction to end."""
        if within is not None:
            yield within
            return
        try:
            for attempt in (1, 2):
                opened = False
                try:
                    with self._resize.shared(), self.env.begin() as txn:
                        opened = True
                        yield Reader(self, txn)
                    return
                except lmdb.MapResizedError:
                    if opened or attempt == 2:
                        raise
                # Another process (the server, when this is `snapview check` or a direct
                # writer) grew the map past the size this process mapped: adopt it, once.
                self.adopt_map_size()
        except DAMAGED_TREE as e:
            raise self.tree_damaged(e) from None

    def adopt_map_size(self) -> None:
        """Map the size another process grew the environment to (MDB_MAP_RESIZED). Never on a
        thread holding a read transaction: that one would be the share the resize waits for."""
        self.no_read_open("adopting a grown map")
        with self._resize.exclusive():
            self.env.set_mapsize(0)

    def no_read_open(self, what: str) -> None:
        """Refuse (RuntimeError, a bug of the caller) ``what`` on a thread with a read transaction
        open: ``what`` may wait for the writer, and the writer for that transaction to end."""
        if self._resize.holds_share():
            raise RuntimeError(
                f"{what} may wait for the writer; it must not run inside a read transaction "
                "(the writer may be growing the map, which waits for that transaction to end)"
            )

    def tree_damaged(self, exc: BaseException) -> DataLoss:
        return DataLoss(
            f"data loss: the LMDB data file {os.path.join(self.path, 'data.mdb')} is damaged "
            f"({type(exc).__name__}: {exc}); `snapview check` reports what is affected"
        )

    def begin_write(self) -> lmdb.Transaction[bytes]:
        return self.env.begin(write=True)

    def grow(self) -> int:
        """Double the map size; called by the single writer after MDB_MAP_FULL."""
        with self._resize.exclusive():
            new = self.env.info()["map_size"] * 2
            self.env.set_mapsize(new)
            return new

    def map_size(self) -> int:
        return self.env.info()["map_size"]

    def used_bytes(self) -> int:
        info, stat = self.env.info(), self.env.stat()
        return (info["last_pgno"] + 1) * stat["psize"]

    def free_bytes(self) -> int:
        """Space left on the filesystem of the data file, for the user this process runs as."""
        st = os.statvfs(self.path)
        return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize

    def resource_error(self, exc: BaseException) -> DiskFull | None:
        """DiskFull for a write that failed because the filesystem is full, else None.

        ENOSPC and EDQUOT say so themselves. LMDB reports a short write of the data file as EIO
        (py-lmdb: lmdb.Error "Input/output error", or lmdb.DiskError), so an I/O error counts
        as a full disk when the filesystem has less than DISK_FULL_SLACK_BYTES left."""
        if isinstance(exc, DiskFull):
            return exc
        if not isinstance(exc, lmdb.Error | OSError):
            return None
        code = getattr(exc, "errno", None)
        text = str(exc)
        if code in (errno.ENOSPC, errno.EDQUOT) or "No space left" in text:
            full = True
        elif code == errno.EIO or isinstance(exc, lmdb.DiskError) or "Input/output error" in text:
            try:
                full = self.free_bytes() < DISK_FULL_SLACK_BYTES
            except OSError:
                full = False
        else:
            full = False
        if not full:
            return None
        try:
            left = f"{self.free_bytes():,} bytes free"
        except OSError:
            left = "free space unknown"
        err = DiskFull(
            f"disk full: the filesystem holding the data dir {self.path} is full ({left}); "
            f"writing {os.path.join(self.path, 'data.mdb')} failed ({text}). Nothing of this "
            "write was applied; reads still work; free space on that filesystem and retry"
        )
        err.__cause__ = exc
        return err


_SECOND = itemgetter(1)


class Reader:
    """Point and range reads over one LMDB transaction (read-only, or the group's write txn)."""

    def __init__(self, storage: Storage, txn: lmdb.Transaction[bytes]) -> None:
        self.storage = storage
        self.txn = txn
        self.cf = storage.cf
        self._write_cursor: lmdb.Cursor[bytes] | None = None

    def write_cursor(self) -> lmdb.Cursor[bytes]:
        """The reader's cursor of the write CF (the one ``seek_write``, ``iter_writes`` and
        ``iter_write_records`` move): for a caller that walks many keys' versions in one loop
        (``actions.get.get_changes``), which calls one of those only to leave a key's walk."""
        return self._writes()

    def _writes(self) -> lmdb.Cursor[bytes]:
        # One cursor for the point lookups of the write CF: opening a cursor costs more than
        # the seek. Only seek_write / iter_writes / find_txn_write use it, and none of their
        # callers interleaves two of them.
        if self._write_cursor is None:
            self._write_cursor = self.txn.cursor(db=self.cf["write"])
        return self._write_cursor

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self.txn.get(key, db=self.cf[cf])

    def damaged(self, cf: str, key: bytes, what: str) -> DataLoss:
        """The DataLoss error for a damaged record of ``cf`` at ``key``, naming table and key."""
        if cf in ("write", "data") and len(key) > 12:
            uk, ts = parse_versioned_key(key)
            where = f"{self.storage.key_namer(uk)}, {cf} record at ts {ts}"
        elif cf in ("txn_locks", "txn_ranges") and len(key) > 12:
            where = f"{self.storage.key_namer(key[8:])}, {cf} entry of start_ts "
            where += str(int.from_bytes(key[:8], "big"))
        else:
            where = f"{self.storage.key_namer(key)}, {cf} record"
        return DataLoss(
            f"data loss: {where}: {what}; the stored record is damaged and is not served "
            f"(store {self.storage.path}; `snapview check` lists every damaged record)"
        )

    def parse_lock(self, key: bytes, raw: bytes) -> Lock:
        """Decode the lock stored at ``key``; DataLoss if it is damaged."""
        try:
            return Lock.parse(raw)
        except ChecksumMismatch as e:
            raise self.damaged("lock", key, str(e)) from None

    def parse_write(self, vkey: bytes, raw: bytes) -> Write:
        """Decode the write record stored at versioned key ``vkey``; DataLoss if damaged."""
        try:
            return Write.parse(raw)
        except ChecksumMismatch as e:
            raise self.damaged("write", vkey, str(e)) from None

    def check_intact(self, cf: str, items: list[tuple[bytes, bytes]]) -> None:
        """Raise DataLoss for the first damaged sealed record of ``items`` (one C-level pass)."""
        if crc32(b"".join(map(_SECOND, items))):
            i = next((i for i, (_, v) in enumerate(items) if crc32(v)), 0)
            raise self.damaged(cf, items[i][0], f"{cf} record fails its checksum")

    def get_lock(self, key: bytes) -> Lock | None:
        """The lock on ``key``, or None if there is none."""
        raw = self.txn.get(key, db=self.cf["lock"])
        return None if raw is None else self.parse_lock(key, raw)

    def get_lock_raw(self, key: bytes) -> bytes | None:
        """The encoded (sealed) lock on ``key``, checked intact, or None if there is none."""
        raw = self.txn.get(key, db=self.cf["lock"])
        if raw is not None and crc32(raw):
            raise self.damaged("lock", key, "lock record fails its checksum")
        return raw

    def locked_of(self, keys: list[bytes]) -> list[tuple[bytes, bytes]]:
        """(key, raw lock) of each of ``keys`` that holds a lock, in the order given, unparsed
        and unchecked: one C-level call for a batch of point reads (``actions.scan._points``),
        which parse only the few found."""
        return self.txn.cursor(db=self.cf["lock"]).getmulti(keys)

    def locks_in(self, ranges: Sequence[tuple[bytes, bytes]]) -> list[tuple[int, bytes, bytes]]:
        """(index of the range, key, raw lock) of every lock in any of the [start, end)
        ``ranges``, range by range in the order given and in key order inside each, unparsed:
        one cursor seek per range (a batch of short range reads, ``actions.scan._shorts``)."""
        cur = self.txn.cursor(db=self.cf["lock"])
        seek, key = cur.set_range, cur.key
        out = []
        for i, (start, end) in enumerate(ranges):
            if not seek(start) or key() >= end:
                continue  # nearly always: no lock in the range
            for k, raw in cur.iternext():
                if k >= end:
                    break
                out.append((i, k, raw))
        return out

    def short_runs(
        self, ranges: Sequence[tuple[bytes, bytes]], most: int
    ) -> list[tuple[list[bytes], list[bytes]] | None]:
        """For each [start, end) of ``ranges`` (user keys), in order, its write records (keys,
        raw records; unchecked), or None from the first range that holds more than ``most``
        (the list ends there): one cursor seek per range and one Python step per record, for
        ranges that hold a few keys' versions each."""
        cur = self.txn.cursor(db=self.cf["write"])
        seek = cur.set_range
        out: list[tuple[list[bytes], list[bytes]] | None] = []
        for start, end in ranges:
            ks: list[bytes] = []
            vs: list[bytes] = []
            if seek(start):
                for k, v in cur.iternext():
                    if k[:-8] >= end:  # compared on the user key, as scan cuts its run
                        break
                    if len(ks) == most:
                        out.append(None)
                        return out
                    ks.append(k)
                    vs.append(v)
            out.append((ks, vs))
        return out

    def newest_records(self, keys: list[bytes], ts: int) -> list[tuple[bytes, bytes]]:
        """For each of ``keys`` in order, (versioned key, raw record) of its newest write record
        with commit_ts <= ts, unchecked; a key with none is skipped. One cursor seek per key."""
        cur = self._writes()
        suffix = encode_ts(ts)  # versioned_key(key, ts) == key + suffix
        out = []
        for key in keys:
            if cur.set_range(key + suffix):
                vk, raw = cur.item()
                if vk[:-8] == key:
                    out.append((vk, raw))
        return out

    def seek_write(self, key: bytes, ts: int = TS_MASK) -> tuple[int, Write] | None:
        """The newest write record of ``key`` with commit_ts <= ts, or None if there is none."""
        cur = self._writes()
        if not cur.set_range(versioned_key(key, ts)):
            return None
        k = cur.key()
        if len(k) != len(key) + 8 or k[:-8] != key:
            return None
        return parse_versioned_key(k)[1], self.parse_write(k, cur.value())

    def newest_commit_ts(self, key: bytes) -> int | None:
        """The commit_ts of ``key``'s newest write record (of any kind), or None."""
        cur = self._writes()
        if not cur.set_range(key):
            return None
        k = cur.key()
        if len(k) != len(key) + 8 or k[:-8] != key:
            return None
        return parse_versioned_key(k)[1]

    def _versions(self, key: bytes, ts: int) -> Iterator[tuple[bytes, bytes]]:
        """(versioned key, raw record) of ``key``'s write records with commit_ts <= ts, newest
        first, unchecked."""
        cur = self._writes()
        if not cur.set_range(versioned_key(key, ts)):
            return
        n = len(key) + 8
        while True:
            k = cur.key()
            if len(k) != n or k[:-8] != key:
                return
            yield k, cur.value()
            if not cur.next():
                return

    def iter_writes(self, key: bytes, ts: int = TS_MASK) -> Iterator[tuple[int, Write]]:
        """Write records of ``key`` with commit_ts <= ts, newest first."""
        for k, raw in self._versions(key, ts):
            yield parse_versioned_key(k)[1], self.parse_write(k, raw)

    def iter_write_records(self, key: bytes, ts: int = TS_MASK) -> Iterator[tuple[int, bytes]]:
        """``iter_writes`` without parsing: (commit_ts, the sealed record, checked intact),
        newest first, for a caller that reads the kind byte and the value itself
        (``actions.get.decisive_record``)."""
        for k, raw in self._versions(key, ts):
            if crc32(raw):
                raise self.damaged("write", k, "write record fails its checksum")
            yield parse_versioned_key(k)[1], raw

    def find_txn_write(self, key: bytes, start_ts: int) -> tuple[int, Write] | None:
        """The commit or rollback record written by the txn ``start_ts`` on ``key``, if any.

        Commit records of that txn have commit_ts > start_ts; its rollback record sits at
        start_ts itself, so only versions with commit_ts >= start_ts are examined."""
        for commit_ts, w in self.iter_writes(key):
            if commit_ts < start_ts:
                return None
            if w.start_ts == start_ts:
                return commit_ts, w
        return None

    def get_data(self, key: bytes, start_ts: int) -> bytes | None:
        """The large value txn ``start_ts`` wrote for ``key`` (checked intact), or None."""
        vkey = versioned_key(key, start_ts)
        raw = self.txn.get(vkey, db=self.cf["data"])
        if raw is None:
            return None
        if crc32(raw):
            raise self.damaged("data", vkey, "value fails its checksum")
        return raw[:-CRC_BYTES]

    def iter_range(self, cf: str, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Items of ``cf`` with start <= key < end (end None: to the last key)."""
        cur = self.txn.cursor(db=self.cf[cf])
        if not cur.set_range(start):
            return
        for k, v in cur:
            if end is not None and k >= end:
                return
            yield k, v

    def items_between(
        self, cf: str, start: bytes, end: bytes, chunk: int = 8192, limit: int = 0
    ) -> list[tuple[bytes, bytes]]:
        """The items of ``cf`` with start <= key < end (the first ``limit`` of them when limit
        > 0), read in C-level chunks."""
        cur = self.txn.cursor(db=self.cf[cf])
        out: list[tuple[bytes, bytes]] = []
        if not cur.set_range(start):
            return out
        it = cur.iternext()
        while not limit or len(out) < limit:
            want = chunk if not limit else min(chunk, limit - len(out))
            part = list(islice(it, want))
            if not part:
                return out
            if part[-1][0] < end:
                out += part
                continue
            out += part[: bisect_left(part, (end,))]
            return out
        return out

    def entries(self, cf: str) -> int:
        """How many items ``cf`` holds (LMDB keeps the count: no walk)."""
        return int(self.txn.stat(self.cf[cf])["entries"])

    def walk(self, cf: str) -> Iterator[tuple[bytes, bytes]]:
        """Every item of ``cf`` in key order; a damaged tree raises DataLoss (``snapview check``)."""
        try:
            yield from self.txn.cursor(db=self.cf[cf]).iternext()
        except DAMAGED_TREE as e:
            raise self.storage.tree_damaged(e) from None

    def iter_prefix(self, cf: str, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        cur = self.txn.cursor(db=self.cf[cf])
        if not cur.set_range(prefix):
            return
        for k, v in cur:
            if not k.startswith(prefix):
                return
            yield k, v

    # The walks below hand the engine's own iterators and calls to hot loops (a bulk prewrite,
    # a scan), which take C-level chunks of them: no Python step per item. Like every read of a
    # Reader, what they return is valid only while its transaction is open.

    def get_many(self, cf: str, keys: list[bytes]) -> list[tuple[bytes, bytes]]:
        """The (key, value) items of ``cf`` for those of ``keys`` that are present, in the order
        of ``keys`` (a key asked twice comes twice), looked up in one engine call. Absent keys are
        left out: an empty list when none is present, or when ``keys`` is empty."""
        return self.txn.cursor(db=self.cf[cf]).getmulti(keys)

    def items_from(self, cf: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every item of ``cf`` with key >= start, in key order, to the last key of the CF: the
        caller stops where its range ends. An empty iterator when no key is >= start."""
        cur = self.txn.cursor(db=self.cf[cf])
        if not cur.set_range(start):
            return iter(())  # (iternext on a cursor that found nothing would start at the first)
        return cur.iternext()

    def keys_from(self, cf: str, start: bytes) -> Iterator[bytes]:
        """The keys of ``items_from(cf, start)``, without reading their values."""
        cur = self.txn.cursor(db=self.cf[cf])
        if not cur.set_range(start):
            return iter(())
        return cur.iternext(keys=True, values=False)

    def write_seeker(self) -> tuple[Callable[[bytes], bool], Callable[[], bytes]]:
        """``(seek, key)`` over a position of its own in the write CF, for a caller visiting
        sorted keys: ``seek(k)`` moves to the first record whose key is >= k and returns whether
        there is one; ``key()`` is the key of the record there (b"" after a seek found none).
        Both are the engine's calls, so a seek costs no Python frame."""
        cur = self.txn.cursor(db=self.cf["write"])
        return cur.set_range, cur.key


class WriteBuffer:
    """The writes of one action. They go into the action's own nested LMDB transaction, so the
    action reads its own writes, and they reach the group's transaction only if it succeeds."""

    __slots__ = ("_txn", "_cf")

    def __init__(self, txn: lmdb.Transaction[bytes], cfs: dict[str, lmdb._Database]) -> None:
        self._txn = txn
        self._cf = cfs

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self._txn.put(key, value, db=self._cf[cf])

    def delete(self, cf: str, key: bytes) -> None:
        self._txn.delete(key, db=self._cf[cf])

    def put_many(self, cf: str, items: list[tuple[bytes, bytes]]) -> None:
        """Put many items in one C-level loop (faster for the thousands of a large commit)."""
        self._txn.cursor(db=self._cf[cf]).putmulti(items)

    def delete_run(self, cf: str, first: bytes, n: int) -> None:
        """Delete the ``n`` consecutive items starting at key ``first``, which the caller has
        read in this transaction (no key comparison per item)."""
        cur = self._txn.cursor(db=self._cf[cf])
        if not cur.set_key(first):
            raise KeyError(f"{cf}: run start {first.hex()} is not there")
        delete = cur.delete
        for _ in range(n):
            delete()

    def delete_many(self, cf: str, keys: list[bytes]) -> None:
        """Delete ``keys`` (sorted): a run of neighbours is deleted by stepping the cursor along
        it, and only a gap costs a search."""
        cur = self._txn.cursor(db=self._cf[cf])
        positioned = False
        for k in keys:
            if not (positioned and cur.key() == k):
                positioned = cur.set_key(k)
                if not positioned:
                    continue
            positioned = cur.delete()
