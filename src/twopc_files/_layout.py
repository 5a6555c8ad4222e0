"""Where files go: hidden staging paths, deterministic final names, Hive-style directories.

Everything twopc writes besides the data lives under names starting with ``_`` (or ``.``),
which Spark's file sources and ``pyarrow.dataset`` skip, so readers never see staged files,
manifests or temporary files::

    <root>/_twopc/<sink_id>/<query_id>/<batch>.decision.json   manifest = the decision
    <root>/_twopc_staging/<sink_id>/<query_id>/<batch>/<partition>-<attempt>/...<name>.inprogress
    <root>/_twopc_staging/<sink_id>/<query_id>/<batch>/spark-<run>/...   Spark's own output
    <root>/[col=value/...]part-<token>-b<batch>-p<partition>-<seq>.<ext>   committed data

``token`` is derived from the sink id and the query id, so a new checkpoint (whose batch ids
restart at 0) never overwrites earlier output, while a replay of the same batch writes the
very same names and can only overwrite, never duplicate.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "COMMITTABLE_FILE",
    "LOG_DIR",
    "SPARK_JOB_PREFIX",
    "STAGED_SUFFIX",
    "STAGING_DIR",
    "STARTED_FILE",
    "attempt_dir",
    "final_name",
    "spark_job_dir",
    "split_by_partition",
]

LOG_DIR = "_twopc"
STAGING_DIR = "_twopc_staging"
COMMITTABLE_FILE = "_committable.json"
STAGED_SUFFIX = ".inprogress"
"""Appended to a staged file's name (``commit_by="move"``), so that a glob on the format's
extension (DuckDB's ``out/**/*.parquet``) never matches a file that is not committed."""
STARTED_FILE = "_started"
"""Written when an attempt that writes multipart uploads begins (its files are not staged)."""
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
SPARK_JOB_PREFIX = "spark-"
"""Names the directory one run of a batch's Spark write job writes into (the JVM path)."""


def attempt_dir(sink_id: str, query_id: str, batch_id: int, partition: int, attempt: int) -> str:
    """The staging directory of one task attempt, relative to the output root."""
    return f"{STAGING_DIR}/{sink_id}/{query_id}/{batch_id:020d}/{partition:05d}-{attempt}"


def spark_job_dir(sink_id: str, query_id: str, batch_id: int, run: int) -> str:
    """Where Spark's own writer writes one run of a batch (the JVM path), relative to the
    output root: next to the batch's attempt directories, so that the sweep removes it
    when no prepared work came of it."""
    return f"{STAGING_DIR}/{sink_id}/{query_id}/{batch_id:020d}/{SPARK_JOB_PREFIX}{run}"


def name_token(sink_id: str, query_id: str) -> str:
    return hashlib.sha256(f"{sink_id}\0{query_id}".encode()).hexdigest()[:12]


def final_name(token: str, batch_id: int, partition: int, seq: int, extension: str) -> str:
    return f"part-{token}-b{batch_id:08d}-p{partition:05d}-{seq:04d}.{extension}"


def hive_directory(columns: Sequence[str], values: Sequence[object]) -> str:
    """``col=value/...`` with Spark's escaping of path-unsafe characters."""
    return "/".join(f"{_escape(c)}={_hive_value(v)}" for c, v in zip(columns, values, strict=True))


def _hive_value(value: object) -> str:
    if value is None:
        return HIVE_NULL
    if isinstance(value, bool):
        text = "true" if value else "false"  # Spark's cast of a boolean to string
    elif isinstance(value, datetime.datetime):
        text = value.isoformat(sep=" ")
    elif isinstance(value, datetime.date):
        text = value.isoformat()
    else:
        text = str(value)
    return _escape(text) if text else HIVE_NULL


# The characters Spark escapes in partition directory names (ExternalCatalogUtils), so
# Spark and pyarrow both decode what twopc writes; anything else, non-ASCII included,
# is kept as it is.
_ESCAPED = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))


def _escape(text: str) -> str:
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in text)


def split_by_partition(
    batch: pa.RecordBatch, columns: Sequence[str]
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Split a batch by the values of ``columns``; yields (hive directory, batch without them).

    Rows keep their input order inside each directory.
    """
    if not columns:
        yield "", batch
        return
    table = pa.Table.from_batches([batch])
    keys = table.select(list(columns)).group_by(list(columns), use_threads=False).aggregate([])
    data_columns = [name for name in table.column_names if name not in columns]
    for row in keys.to_pylist():
        mask = None
        for column in columns:
            value = row[column]
            condition = (
                pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
            )
            condition = pc.fill_null(condition, False)
            mask = condition if mask is None else pc.and_(mask, condition)
        part = table.filter(mask).select(data_columns).combine_chunks()
        for piece in part.to_batches():
            yield hive_directory(columns, [row[c] for c in columns]), piece
