"""MVCC building blocks: key encodings and the Lock / Write records of the Percolator CFs."""

from kvstore.mvcc.keys import (
    KeyCodec,
    changes_key,
    decode_ts,
    encode_ts,
    parse_changes_key,
    parse_versioned_key,
    table_id_of,
    table_prefix,
    txn_lock_key,
    versioned_key,
)
from kvstore.mvcc.records import Lock, LockOp, Mutation, Write, WriteKind

__all__ = [
    "KeyCodec",
    "Lock",
    "LockOp",
    "Mutation",
    "Write",
    "WriteKind",
    "changes_key",
    "decode_ts",
    "encode_ts",
    "parse_changes_key",
    "parse_versioned_key",
    "table_id_of",
    "table_prefix",
    "txn_lock_key",
    "versioned_key",
]
