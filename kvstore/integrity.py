"""Integrity checks of a store on disk: the data file's header and that it holds every page LMDB
may read, before LMDB reads a page, and ``check_store``, the walk behind ``snapview check`` that
reports every damaged record.

What is covered (docs/design.md, the failure model):

* the LMDB data file ``data.mdb``: both meta pages must be LMDB meta pages of a known version,
  and every page past the end of the file, up to the last page the newest meta page records,
  must be a free page (LMDB leaves free pages there legally; any other page is one it may read).
  A file truncated under a *stopped* store is refused with one line naming the file, instead of
  the SIGBUS LMDB's memory map would raise on the first read of a missing page;
* every lock, write and data record carries a CRC-32 (kvstore.mvcc.records), checked whenever a
  record is decoded, and by ``check_store`` for all of them;
* catalog entries must decode as table definitions, meta values as what their key holds.

Not covered: user keys themselves (a damaged key reads as another, or no, key), the free-page
tree beyond its shape (it is read only when the file ends before the meta's last page), and a file truncated while a server has it mapped (the server dies of SIGBUS; a fatal-signal
line is printed by faulthandler).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from kvstore.errors import DataLoss

if TYPE_CHECKING:  # storage imports this module: the engine is loaded where it is used
    import lmdb

    from kvstore.storage import Reader, Storage

DATA_FILE = "data.mdb"
# LMDB's on-disk layout (data version 1, 64-bit; lmdb.h/mdb.c): a page starts with its number
# (u64), a pad and its flags (u16 each), then lower and upper (u16 each; an overflow page keeps
# its page count there as a u32).
_PAGE_HEAD = 16
_P_BRANCH, _P_LEAF, _P_OVERFLOW, _P_META = 0x01, 0x02, 0x04, 0x08
_F_BIGDATA = 0x01  # a leaf node whose value lives on overflow pages (the node holds their pgno)
_MAGIC = 0xBEEFC0DE
_DATA_VERSION = 1
_NO_PAGE = (1 << 64) - 1  # the root of an empty tree
_MAX_DEPTH = 32  # LMDB's cursor stack: no tree is deeper
# Inside the meta page, after the page header: magic, version (u32 each), address, map size (u64
# each), two MDB_db records of 48 bytes (free-page tree, main tree; the first one's leading u32
# is the page size, each one's root page is its last u64), last page, txn id.
_META = struct.Struct("<IIQQ")
_DBS_AT = _PAGE_HEAD + _META.size
_DB_SIZE = 48
_ROOT_IN_DB = 40
_LAST_AT = _DBS_AT + 2 * _DB_SIZE
_LAST = struct.Struct("<QQ")
_MIN_META_BYTES = _LAST_AT + _LAST.size
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class MetaPage:
    index: int
    page_size: int
    last_page: int
    txn_id: int
    free_root: int = _NO_PAGE  # root page of LMDB's free-page tree (FREE_DBI)
    main_root: int = _NO_PAGE  # root page of the main tree, which holds the named trees (CFs)


def _meta_page(path: str, index: int, page: bytes) -> MetaPage:
    def bad(what: str) -> DataLoss:
        return DataLoss(
            f"data loss: {path}: meta page {index} {what}; the data file's header is damaged "
            "and the store cannot be opened (restore the data dir from a backup)"
        )

    if len(page) < _MIN_META_BYTES:
        raise bad(f"is cut short ({len(page)} bytes)")
    flags = struct.unpack_from("<H", page, 10)[0]
    magic, version, _, _ = _META.unpack_from(page, _PAGE_HEAD)
    if not flags & _P_META or magic != _MAGIC:
        raise bad("is not an LMDB meta page (zeroed or overwritten)")
    if version != _DATA_VERSION:
        raise bad(f"has LMDB data version {version}, expected {_DATA_VERSION}")
    psize = struct.unpack_from("<I", page, _DBS_AT)[0]
    if psize < 512 or psize & (psize - 1):
        raise bad(f"records an impossible page size {psize}")
    last, txn = _LAST.unpack_from(page, _LAST_AT)
    (free_root,) = _U64.unpack_from(page, _DBS_AT + _ROOT_IN_DB)
    (main_root,) = _U64.unpack_from(page, _DBS_AT + _DB_SIZE + _ROOT_IN_DB)
    return MetaPage(index, psize, last, txn, free_root, main_root)


def _read_metas(path: str, f: BinaryIO) -> tuple[MetaPage, MetaPage]:
    fd = f.fileno()
    if os.fstat(fd).st_size == 0:
        raise DataLoss(
            f"data loss: {path} is empty (0 bytes): the data file was truncated, or its "
            "creation never finished; restore the data dir from a backup, or remove the "
            "file to start an empty store"
        )
    first = _meta_page(path, 0, os.pread(fd, _MIN_META_BYTES, 0))
    second = _meta_page(path, 1, os.pread(fd, _MIN_META_BYTES, first.page_size))
    if second.page_size != first.page_size:
        raise DataLoss(
            f"data loss: {path}: the meta pages disagree on the page size ({first.page_size} and "
            f"{second.page_size}); the data file's header is damaged"
        )
    return first, second


def check_data_file(lmdb_dir: str) -> MetaPage | None:
    """Check the header of ``lmdb_dir/data.mdb`` before LMDB maps it: the newer meta page, or
    None when there is no file yet (a new store). Raises DataLoss naming the file and what is
    wrong: an empty file, a meta page that is not one, meta pages of two page sizes.

    Whether the file holds every page the store uses is ``check_pages_present``'s job: it needs
    the environment open (a read transaction pins the pages it looks at against a writer in
    another process), and it runs before anything reads a tree page."""
    path = os.path.join(lmdb_dir, DATA_FILE)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return None
    with f:
        return max(_read_metas(path, f), key=lambda m: m.txn_id)


def check_pages_present(env: lmdb.Environment, lmdb_dir: str) -> None:
    """Refuse (DataLoss naming the file) a data file that lacks a page LMDB could read: call it
    after ``lmdb.open`` and before anything reads a tree (opening a named database does), because
    LMDB reads pages through its memory map, where a page past the end of the file is a SIGBUS.

    What LMDB may read from its newest transaction is every page but the two meta pages and the
    free ones (LMDB keeps them disjoint: every page up to the meta's last page is a meta page, a
    page of some tree, or in the free-page tree). So the check is exact: every page at or past the
    end of the file, up to the last page the meta records, must be free. LMDB legally leaves free
    pages past the end: a write transaction that grows the tree and frees the new pages again
    never writes them, yet records them as the last page. Pages are read with pread, never through
    the map, inside a read transaction so that a writer in another process (the server, under a
    direct writer or ``snapview check``) cannot reuse them meanwhile. Cheap in the common case: when
    the file covers the meta's last page, nothing past the meta pages is read; otherwise only the
    free-page tree is."""
    path = os.path.join(lmdb_dir, DATA_FILE)
    with open(path, "rb") as f:
        for _ in range(_META_RETRIES):
            with env.begin() as txn:
                # The transaction's snapshot is that of one of the two meta pages, unless two
                # commits of another process overwrote it since: then look again.
                meta = next((m for m in _read_metas(path, f) if m.txn_id == txn.id()), None)
                if meta is not None:
                    _check_pages(path, f.fileno(), meta)
                    return
    # A writer in another process commits faster than two pages can be read: it has the file
    # mapped and working, which a truncated file would not let it (it dies of SIGBUS).


_META_RETRIES = 100


def _check_pages(path: str, fd: int, meta: MetaPage) -> None:
    psize = meta.page_size
    have = os.fstat(fd).st_size // psize  # whole pages; a partial last page is missing
    if meta.last_page < have:
        return
    free = _FreePages(path, fd, meta, have, have).collect()
    missing = next((p for p in range(have, meta.last_page + 1) if p not in free), None)
    if missing is not None:
        raise _truncated(path, meta, have, f"page {missing:,}, which is in use,")


def _truncated(path: str, meta: MetaPage, have: int, what: str) -> DataLoss:
    return DataLoss(
        f"data loss: {path} is truncated: it has {have:,} whole pages of {meta.page_size} bytes, "
        f"but {what} lies past its end (meta page {meta.index}, transaction {meta.txn_id}, "
        f"records pages up to {meta.last_page:,}); restore the data dir from a backup"
    )


class _FreePages:
    """The page numbers at or past ``since`` in LMDB's free-page tree of ``meta``, in a file of
    ``have`` whole pages: a B-tree keyed by transaction id whose values are lists of page numbers (a count,
    then the numbers, u64 each), long lists on overflow pages. Every page of the tree itself must
    be in the file; a page that is not what the tree expects is DataLoss (a damaged file)."""

    def __init__(self, path: str, fd: int, meta: MetaPage, have: int, since: int) -> None:
        self.path, self.fd, self.meta, self.have, self.since = path, fd, meta, have, since
        self.free: set[int] = set()
        self.seen: set[int] = set()

    def collect(self) -> set[int]:
        if self.meta.free_root != _NO_PAGE:
            self._tree(self.meta.free_root, 0)
        return self.free

    def _damaged(self, pgno: int, what: str) -> DataLoss:
        return DataLoss(
            f"data loss: the LMDB data file {self.path} is damaged (page {pgno:,} of the "
            f"free-page tree {what}); `snapview check` reports what is affected"
        )

    def _read(self, pgno: int, pages: int = 1) -> bytes:
        if pgno in self.seen or pgno < 2 or pgno + pages - 1 > self.meta.last_page:
            raise self._damaged(pgno, "is referenced twice or out of range")
        self.seen.add(pgno)
        if pgno + pages > self.have:
            raise _truncated(
                self.path, self.meta, self.have, f"page {pgno:,} of the free-page tree"
            )
        psize = self.meta.page_size
        return os.pread(self.fd, pages * psize, pgno * psize)

    def _tree(self, pgno: int, depth: int) -> None:
        page = self._read(pgno)
        flags, lower, upper = struct.unpack_from("<HHH", page, 10)
        if (
            depth >= _MAX_DEPTH
            or not flags & (_P_BRANCH | _P_LEAF)
            or not (_PAGE_HEAD <= lower <= upper <= len(page))
        ):
            raise self._damaged(pgno, f"is not a tree page (flags {flags:#x})")
        for i in range((lower - _PAGE_HEAD) // 2):
            (at,) = struct.unpack_from("<H", page, _PAGE_HEAD + 2 * i)
            if not upper <= at <= len(page) - 8:
                raise self._damaged(pgno, f"has a node at offset {at}")
            lo, hi, nflags, ksize = struct.unpack_from("<HHHH", page, at)
            if flags & _P_BRANCH:
                self._tree(lo | hi << 16 | nflags << 32, depth + 1)
                continue
            size, value_at = lo | hi << 16, at + 8 + ksize
            if nflags & _F_BIGDATA:
                (first,) = _U64.unpack_from(page, value_at)
                value = self._overflow(first, size)
            else:
                value = page[value_at : value_at + size]
            if len(value) < 8 or len(value) % 8:
                raise self._damaged(pgno, f"holds a page list of {len(value)} bytes")
            ids = struct.unpack(f"<{len(value) // 8}Q", value)
            self.free.update(p for p in ids[1 : ids[0] + 1] if p >= self.since)

    def _overflow(self, pgno: int, size: int) -> bytes:
        psize = self.meta.page_size
        pages = (_PAGE_HEAD + size + psize - 1) // psize
        raw = self._read(pgno, pages)
        flags, count = struct.unpack_from("<HI", raw, 10)
        if not flags & _P_OVERFLOW or count != pages:
            raise self._damaged(pgno, f"is not the overflow run of {pages} pages it should be")
        return raw[_PAGE_HEAD : _PAGE_HEAD + size]


# ---------------------------------------------------------------- the walk of `snapview check`


@dataclass(frozen=True)
class Damage:
    cf: str
    where: str  # table and key, or the meta/catalog key
    what: str

    def __str__(self) -> str:
        return f"{self.cf}: {self.where}: {self.what}"


@dataclass
class Report:
    path: str
    records: dict[str, int] = field(default_factory=dict)  # checked records per CF
    damage: list[Damage] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damage


def check_store(lmdb_dir: str, limit: int = 1000) -> Report:
    """Walk every record of the store at ``lmdb_dir`` (read-only) and report what is damaged:
    the data file's header and size, the store format, every catalog entry and meta value, and
    every record of the seven data CFs (checksums, layouts, a table for every key, a data record
    for every Put whose value is not inline). Stops listing after ``limit`` damaged records."""
    from kvstore.errors import SnapviewError
    from kvstore.storage import Storage

    report = Report(lmdb_dir)
    if not os.path.exists(os.path.join(lmdb_dir, DATA_FILE)):
        report.damage.append(Damage("file", lmdb_dir, f"no store here (no {DATA_FILE})"))
        return report
    try:
        storage = Storage(lmdb_dir, readonly=True)
    except SnapviewError as e:
        report.damage.append(Damage("file", os.path.join(lmdb_dir, DATA_FILE), str(e)))
        return report
    try:
        check_storage(storage, report, limit)
    finally:
        storage.close()
    return report


def check_storage(storage: Storage, report: Report | None = None, limit: int = 1000) -> Report:
    """``check_store`` over an environment this process has open already."""
    from kvstore.errors import SnapviewError
    from kvstore.meta_keys import NEXT_TABLE_ID, STORE_FORMAT_KEY
    from kvstore.mvcc.keys import (
        SYSTEM_TABLE_ID,
        parse_versioned_key,
        table_id_of,
        versioned_key,
    )
    from kvstore.mvcc.records import ChecksumMismatch, Lock, Write, WriteKind, intact
    from kvstore.table_info import TableInfo
    from kvstore.validation import describe_key

    report = report or Report(storage.path)
    tables: dict[int, TableInfo] = {}

    def name(uk: bytes) -> str:
        if len(uk) < 5:
            return f"key {uk.hex()} (too short to name a table)"
        info = tables.get(table_id_of(uk))
        if info is None:
            if table_id_of(uk) == SYSTEM_TABLE_ID:
                return f"system table key {uk.hex()}"
            return f"table id {table_id_of(uk)} key {uk.hex()}"
        try:
            return describe_key(info, uk)
        except Exception:  # noqa: BLE001 - the key itself is damaged
            return f"table {info.name!r} key {uk.hex()} (does not decode)"

    def known_table(uk: bytes) -> bool:
        return len(uk) >= 5 and (table_id_of(uk) in tables or table_id_of(uk) == SYSTEM_TABLE_ID)

    def add(cf: str, where: str, what: str) -> None:
        if len(report.damage) < limit:
            report.damage.append(Damage(cf, where, what))

    try:
        with storage.read_txn() as r:
            for k, v in _walk(r, "catalog", report, add):
                try:
                    info = TableInfo.from_json(v)
                    if info.name.encode() != k:
                        raise ValueError(f"it defines table {info.name!r}")
                    tables[info.id] = info
                except Exception as e:  # noqa: BLE001 - anything undecodable is damage
                    add("catalog", f"table {k.decode(errors='replace')!r}", f"bad entry ({e})")
            for k, v in _walk(r, "meta", report, add):
                try:
                    if k == NEXT_TABLE_ID:
                        if len(v) != 4:
                            raise ValueError(f"{len(v)} bytes, expected 4")
                    elif k == STORE_FORMAT_KEY:
                        int(v)
                    else:
                        json.loads(v)
                except Exception as e:  # noqa: BLE001
                    add("meta", f"key {k.decode(errors='replace')!r}", f"bad value ({e})")
            puts_without_value: list[bytes] = []
            for cf, parse in (("lock", Lock.parse), ("txn_locks", Write.parse)):
                for k, v in _walk(r, cf, report, add):
                    uk = k if cf == "lock" else k[8:]
                    try:
                        parse(v)
                    except (ChecksumMismatch, ValueError, struct.error) as e:
                        add(cf, name(uk), f"damaged record ({e})")
                    if not known_table(uk):
                        add(cf, name(uk), "key of no table in the catalog")
            for k, v in _walk(r, "write", report, add):
                uk, ts = parse_versioned_key(k)
                try:
                    w = Write.parse(v)
                except (ChecksumMismatch, ValueError, struct.error) as e:
                    add("write", f"{name(uk)} at ts {ts}", f"damaged record ({e})")
                    continue
                if not known_table(uk):
                    add("write", f"{name(uk)} at ts {ts}", "key of no table in the catalog")
                if w.kind is WriteKind.PUT and w.short_value is None:
                    puts_without_value.append(versioned_key(uk, w.start_ts))
            for k, v in _walk(r, "data", report, add):
                if not intact(v):
                    uk, ts = parse_versioned_key(k)
                    add("data", f"{name(uk)} at start_ts {ts}", "value fails its checksum")
            present = dict(r.get_many("data", puts_without_value))
            for vk in puts_without_value:
                if vk not in present:
                    uk, ts = parse_versioned_key(vk)
                    add(
                        "data", f"{name(uk)} at start_ts {ts}", "a committed Put's value is missing"
                    )
            for cf in ("changes", "txn_ranges"):
                for k, v in _walk(r, cf, report, add):
                    if cf == "changes" and (len(k) < 17 or v):
                        add(cf, name(k[12:]), "malformed change-index entry")
                    if cf == "txn_ranges" and (len(k) < 13 or len(v) < 5):
                        add(cf, name(k[8:]), "malformed lock-range entry")
    except SnapviewError as e:
        add("file", os.path.join(storage.path, DATA_FILE), str(e))
    return report


def _walk(
    reader: Reader, cf: str, report: Report, add: Callable[[str, str, str], None]
) -> Iterator[tuple[bytes, bytes]]:
    """Every item of ``cf``, counted; a damaged LMDB tree ends the walk with one Damage entry."""
    report.records.setdefault(cf, 0)
    try:
        for item in reader.walk(cf):
            report.records[cf] += 1
            yield item
    except DataLoss as e:
        add(cf, "(the column family's tree)", str(e))
