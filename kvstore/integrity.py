"""Integrity checks of a store on disk: the data file's header and size before LMDB opens it, and
``check_store``, the walk behind ``snapview check`` that reports every damaged record.

What is covered (docs/design.md, the failure model):

* the LMDB data file ``data.mdb``: both meta pages must be LMDB meta pages of a known version,
  and the file must be long enough to hold the last page the newer meta page records. A file
  truncated under a *stopped* store is refused here with one line naming the file, instead of the
  SIGBUS LMDB's memory map would raise on the first read of a missing page;
* every lock, write and data record carries a CRC-32 (kvstore.mvcc.records), checked whenever a
  record is decoded, and by ``check_store`` for all of them;
* catalog entries must decode as table definitions, meta values as what their key holds.

Not covered: user keys themselves (a damaged key reads as another, or no, key), the free-page
tree, and a file truncated while a server has it mapped (the server dies of SIGBUS; a fatal-signal
line is printed by faulthandler).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvstore.errors import DataLoss

if TYPE_CHECKING:  # storage imports this module: the engine is loaded where it is used
    from kvstore.storage import Reader, Storage

DATA_FILE = "data.mdb"
_PAGE_HEAD = 16  # pgno (8) + pad (2) + flags (2) + lower (2) + upper (2)
_P_META = 0x08
_MAGIC = 0xBEEFC0DE
_DATA_VERSION = 1
# Inside the page, after the header: magic, version (u32 each), address, map size (u64 each),
# two MDB_db records of 48 bytes (the first one's leading u32 is the page size), last page, txn id.
_META = struct.Struct("<IIQQ")
_PSIZE_AT = _PAGE_HEAD + _META.size
_LAST_AT = _PAGE_HEAD + _META.size + 2 * 48
_LAST = struct.Struct("<QQ")
_MIN_META_BYTES = _LAST_AT + _LAST.size


@dataclass(frozen=True)
class MetaPage:
    index: int
    page_size: int
    last_page: int
    txn_id: int


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
    psize = struct.unpack_from("<I", page, _PSIZE_AT)[0]
    if psize < 512 or psize & (psize - 1):
        raise bad(f"records an impossible page size {psize}")
    last, txn = _LAST.unpack_from(page, _LAST_AT)
    return MetaPage(index, psize, last, txn)


def check_data_file(lmdb_dir: str) -> MetaPage | None:
    """Check ``lmdb_dir/data.mdb`` before LMDB maps it; the newer meta page, or None when there
    is no file yet (a new store). Raises DataLoss naming the file and what is wrong: a meta page
    that is not one, or a file shorter than the last page its meta page records."""
    path = os.path.join(lmdb_dir, DATA_FILE)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise DataLoss(
                f"data loss: {path} is empty (0 bytes): the data file was truncated, or its "
                "creation never finished; restore the data dir from a backup, or remove the "
                "file to start an empty store"
            )
        head = f.read(_MIN_META_BYTES)
        first = _meta_page(path, 0, head)
        f.seek(first.page_size)
        second = _meta_page(path, 1, f.read(_MIN_META_BYTES))
    if second.page_size != first.page_size:
        raise DataLoss(
            f"data loss: {path}: the meta pages disagree on the page size ({first.page_size} and "
            f"{second.page_size}); the data file's header is damaged"
        )
    meta = max(first, second, key=lambda m: m.txn_id)
    need = (meta.last_page + 1) * meta.page_size
    if size < need:
        raise DataLoss(
            f"data loss: {path} is truncated: it has {size:,} bytes, but its meta page "
            f"{meta.index} (transaction {meta.txn_id}) records pages up to {meta.last_page} "
            f"({need:,} bytes); restore the data dir from a backup"
        )
    return meta


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
    from kvstore.catalog import SYSTEM_TABLE_ID
    from kvstore.errors import SnapviewError
    from kvstore.meta_keys import NEXT_TABLE_ID, STORE_FORMAT_KEY
    from kvstore.mvcc.keys import parse_versioned_key, table_id_of, versioned_key
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
