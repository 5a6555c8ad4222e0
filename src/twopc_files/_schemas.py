"""Schemas readers can merge: what the files sink checks before a batch may commit.

Readers of a directory of files (``pyarrow.dataset`` with ``pa.unify_schemas``, Spark with
``mergeSchema``) merge the files' schemas by column name: a column may be missing from some
files (it reads as null) and a null-typed column takes any type, but a column with two types
cannot be merged. So every batch's data columns (``partition_by`` columns are directories,
not file columns) must unify, by ``pa.unify_schemas``' default rule:

* with the other partitions of the same batch. Each task writes its schema into its own
  staging directory, ``_schema-<fingerprint>``, *then* lists those of the batch's other
  attempts and unifies with them: of two tasks that disagree, the later one to list sees
  both and fails. The files live and go with the attempt's staging directory.
* with what the output already holds: ``<path>/_twopc_schema``, the unified schema of every
  committed batch, which the commit widens (before it makes the batch's files visible).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

__all__ = [
    "RECORD_FILE",
    "SCHEMA_PREFIX",
    "conflict",
    "data_schema",
    "decode",
    "encode",
    "fingerprint",
    "is_schema_file",
    "schema_file",
]

RECORD_FILE = "_twopc_schema"
"""At the output's root: the unified schema of everything committed there (Arrow IPC)."""
SCHEMA_PREFIX = "_schema-"
"""In an attempt's staging directory: ``_schema-<fingerprint>``, the attempt's schema."""
_SCHEMA_NAME = re.compile(re.escape(SCHEMA_PREFIX) + "[0-9a-f]{16}")


def data_schema(schema: pa.Schema, partition_by: Sequence[str]) -> pa.Schema:
    """The columns the files hold (without ``partition_by`` ones), without metadata."""
    fields = [f.remove_metadata() for f in schema if f.name not in partition_by]
    return pa.schema(fields)


def encode(schema: pa.Schema) -> bytes:
    return bytes(schema.serialize().to_pybytes())


def decode(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


def fingerprint(schema: pa.Schema) -> str:
    return hashlib.sha256(encode(schema)).hexdigest()[:16]


def schema_file(schema: pa.Schema) -> str:
    """The name of the file that holds ``schema`` in an attempt's staging directory."""
    return f"{SCHEMA_PREFIX}{fingerprint(schema)}"


def is_schema_file(name: str) -> bool:
    """Whether ``name`` is an attempt's schema file (and not, say, a store's temporary
    file for one)."""
    return _SCHEMA_NAME.fullmatch(name) is not None


def conflict(ours: pa.Schema, others: Iterable[pa.Schema]) -> tuple[str, Any, Any] | None:
    """What in ``ours`` cannot be merged with one of ``others``: ``("column 'x'", our type,
    their type)``, or the whole schemas where no single column is to blame (duplicate
    names); ``None`` when everything unifies."""
    for other in others:
        try:
            pa.unify_schemas([ours, other])
            continue
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            pass
        for field in ours:
            index = other.get_field_index(field.name)
            if index < 0:
                continue
            theirs = other.field(index)
            try:
                pa.unify_schemas([pa.schema([field]), pa.schema([theirs])])
            except (pa.ArrowTypeError, pa.ArrowInvalid):
                return f"column {field.name!r}", field.type, theirs.type
        return "the columns", _names(ours), _names(other)
    return None


def _names(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"
