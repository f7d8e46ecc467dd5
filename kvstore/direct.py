"""Direct prewrites: another process on the server's host writes locks into the server's LMDB
environment itself (docs/design.md, "The moving parts": executors on the server's host may open
the LMDB environment directly, faster, with the same semantics).

The same ``actions.prewrite`` runs in one LMDB write transaction, which LMDB serialises with the
server's own writer across processes, after the same row validation the server does. Anything
that needs the server's judgement is handed back to the caller, who then uses the RPC: a lock or
conflict in the way (KeyIsLocked, WriteConflict, TxnRolledBack are raised as they are), a full
map (DirectUnavailable: only the server grows the map), a full disk (DirectUnavailable: the server
answers the same write with DiskFull), a start_ts at or below the GC safepoint.
"""

from __future__ import annotations

import os
import threading

import lmdb

from kvstore import actions
from kvstore.errors import InvalidArgument, KeyPrewrittenTwice, SnapviewError, TableFenced
from kvstore.group_commit import WriteContext
from kvstore.meta_keys import GC_SAFEPOINT
from kvstore.mvcc.records import LockOp, Mutation
from kvstore.private_files import write_private
from kvstore.storage import Reader, Storage, WriteBuffer
from kvstore.table_info import TableInfo
from kvstore.validation import describe_key, repeated_key, validate_rows

INSTANCE_FILE = "instance"


class DirectUnavailable(SnapviewError):
    """This prewrite must go through the server (the caller falls back to the RPC)."""


def write_instance_id(data_dir: str, instance_id: str) -> None:
    """Record the server's instance id in its data dir (0600, never through a link: a process
    of the server's user on its host reads it, ``same_instance``)."""
    write_private(os.path.join(data_dir, INSTANCE_FILE), instance_id.encode())


def same_instance(data_dir: str, instance_id: str) -> bool:
    """Whether this process sees the server's data dir (same host, same files) and may read it
    (a process of another user may not: it uses the RPC)."""
    try:
        with open(os.path.join(data_dir, INSTANCE_FILE)) as f:
            return f.read().strip() == instance_id
    except OSError:
        return False


class DirectPrewriter:
    """Prewrites into an LMDB environment opened from another process (one per process)."""

    def __init__(self, lmdb_path: str, map_size: int) -> None:
        self.storage = Storage(lmdb_path, map_size=map_size, sync=True, create=False)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the environment (the server it belonged to is gone; a new one was opened)."""
        with self._lock:
            self.storage.close()

    def prewrite(
        self,
        info: TableInfo,
        mutations: list[Mutation],
        primary: bytes,
        start_ts: int,
        ttl_ms: int,
        encoded_here: bool = False,
    ) -> None:
        """Lock ``mutations`` (PUTs of rows of ``info``, and DELETEs of its keys) for txn
        ``start_ts``, all or none.

        Rows are checked as the server checks them, unless ``encoded_here``: the caller built
        them in this process with ``info``'s own row and key codecs (spark_sink.ArrowEncoder,
        whose output the tests hold to ``validate_rows``, and ``encode_key``), so the check would
        re-derive what it just wrote. DELETEs are taken only ``encoded_here`` (else handed back,
        DirectUnavailable: the server checks their keys). A key twice in one call is refused
        (InvalidArgument) either way, as the server does."""
        if not encoded_here and any(op is not LockOp.PUT for op, _, _ in mutations):
            raise DirectUnavailable("a DELETE built elsewhere: the server checks its key")
        keys = [k for _, k, _ in mutations]
        dup = repeated_key(keys)
        if dup is not None:
            raise InvalidArgument(
                f"{describe_key(info, dup)} appears twice in one request (one row per primary "
                "key in a batch)"
            )
        if not encoded_here:
            validate_rows(info, keys, [v for _, _, v in mutations])
        with self._lock:
            try:
                self._write(mutations, primary, start_ts, ttl_ms)
            except KeyPrewrittenTwice as e:
                where = describe_key(info, e.key)
                raise KeyPrewrittenTwice.of(e.key, e.start_ts, where) from None
            except lmdb.MapFullError:
                raise DirectUnavailable("the store's map is full; the server grows it") from None
            except lmdb.MapResizedError:
                # Adopt the size the server grew it to, under the resize lock: direct reads of
                # this process (kvstore.direct_reads) may have transactions open.
                self.storage.adopt_map_size()
                self._write(mutations, primary, start_ts, ttl_ms)
            except lmdb.Error as e:
                if self.storage.resource_error(e) is None:
                    raise
                # The server answers the same write with DiskFull (RESOURCE_EXHAUSTED).
                raise DirectUnavailable(f"the store's disk is full ({e})") from None

    def _write(self, mutations: list[Mutation], primary: bytes, start_ts: int, ttl_ms: int) -> None:
        with self.storage.env.begin(write=True) as txn:
            raw = txn.get(GC_SAFEPOINT, db=self.storage.cf["meta"])
            if raw is not None and start_ts <= int(raw):
                raise DirectUnavailable(f"start_ts {start_ts} is at or below the GC safepoint")
            ctx = WriteContext(Reader(self.storage, txn), WriteBuffer(txn, self.storage.cf))
            try:
                actions.prewrite(ctx, mutations, primary, start_ts, ttl_ms, len(mutations))
            except TableFenced as e:
                # Handed back: the server answers UNAVAILABLE, which the remote path retries
                # until the revision holding the fence is done.
                raise DirectUnavailable(str(e)) from None
