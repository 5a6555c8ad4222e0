"""Phase 1 by Spark's own Parquet writer (the JVM path): which tables it can serve, the
projection and options its job gets, and how its output becomes the table's data files.

Spark's files carry no Iceberg field ids (Spark sets them only from column metadata,
which a write plan cannot give): readers find their columns by name, through the table's
``schema.name-mapping.default``, which the commit sets when it is missing (as pyiceberg's
``add_files`` does; schema changes keep it up to date). Everything else the files hold is
what the Python path writes: the table's types (the projection casts to them, with ANSI
casts, so a value that does not fit fails the batch instead of becoming null), timestamps
as microseconds, one partition per file.

Identity partitions are written by ``partitionBy`` on a hidden copy of each source column:
the real column stays in the files, and a file's partition value is read back from its
footer (every row of the file holds it), never parsed from Spark's directory names. String
copies are prefixed so that an empty string and a null land in different directories
(Spark writes both as its default partition). Other transforms (``day``, ``bucket`` ...)
stay with the Python path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from twopc import PermanentSinkError, SinkError
from twopc.storage import fsync_directory, fsync_file, is_local
from twopc_iceberg._datafiles import WrittenFile
from twopc_iceberg._tables import Place

__all__ = [
    "SESSION_CONF",
    "WRITE_PATHS",
    "JobFile",
    "job_files",
    "partition_key_of",
    "projection",
    "spark_options",
    "stage_split",
    "statistics_of",
    "table_refusals",
]

WRITE_PATHS = ("auto", "spark", "python")
"""Where phase 1 runs (``IcebergSink(write_path=...)``)."""

SESSION_CONF = {
    # Spark writes TIMESTAMP columns as INT96 by default, which Iceberg does not read
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # a cast to the table's type that does not fit fails the batch (not a silent null)
    "spark.sql.ansi.enabled": "true",
    # decimals as integers, lists and maps in the standard layout, as Iceberg writes them
    "spark.sql.parquet.writeLegacyFormat": "false",
}
"""The Spark SQL settings of a write job (set for the job only)."""

PARTITION_COLUMN = "__twopc_partition_{}"
"""The hidden copy of an identity partition's source column that Spark partitions by."""

_STRING_MARK = "v"

_SPARK_TYPES: Mapping[type[IcebergType], str] = {
    BooleanType: "BOOLEAN",
    IntegerType: "INT",
    LongType: "BIGINT",
    FloatType: "FLOAT",
    DoubleType: "DOUBLE",
    DateType: "DATE",
    TimestampType: "TIMESTAMP_NTZ",
    TimestamptzType: "TIMESTAMP",
    StringType: "STRING",
    BinaryType: "BINARY",
}

_IDENTITY_TYPES = (BooleanType, IntegerType, LongType, StringType, DateType)
"""Source types of identity partitions whose value a file's footer gives exactly."""

_SPARK_FILE = re.compile(r"^part-(?P<split>\d+)-")


def spark_type(field_type: IcebergType) -> str | None:
    """The Spark SQL type a column of ``field_type`` is cast to, or ``None`` when Spark's
    Parquet writer cannot write it as Iceberg reads it (uuid, fixed, time, nested ...)."""
    if isinstance(field_type, DecimalType):
        return f"DECIMAL({field_type.precision},{field_type.scale})"
    return _SPARK_TYPES.get(type(field_type))


def table_refusals(table: Table) -> list[str]:
    """Why Spark's writer cannot write this table's data files as Iceberg wants them."""
    reasons = []
    for column in table.schema().fields:
        if column.required:
            reasons.append(
                f"column {column.name!r} is required (Spark's writer marks every column optional)"
            )
        elif spark_type(column.field_type) is None:
            reasons.append(f"column {column.name!r} is {column.field_type}")
    schema = table.schema()
    for spec_field in table.spec().fields:
        source = schema.find_field(spec_field.source_id)
        if not isinstance(spec_field.transform, IdentityTransform):
            reasons.append(
                f"partition field {spec_field.name!r} is {spec_field.transform}({source.name}) "
                "(Spark's writer writes identity partitions only)"
            )
        elif not isinstance(source.field_type, _IDENTITY_TYPES):
            reasons.append(
                f"partition field {spec_field.name!r} is an identity of a "
                f"{source.field_type} column"
            )
    return reasons


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def projection(
    table: Table, columns: Sequence[str], name: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ``select`` expressions of a write job (the data's columns cast to the table's
    types, then a hidden copy per identity partition) and the columns to partition by.
    Raises :class:`~twopc.PermanentSinkError` for columns the table does not have."""
    schema = table.schema()
    known = {f.name for f in schema.fields}
    extra = [c for c in columns if c not in known]
    if extra:
        raise PermanentSinkError(
            f"the data has column(s) {extra} that table {name} does not have "
            "(schema_evolution='add_columns' adds them)"
        )
    given = set(columns)
    select = []
    for column in schema.fields:
        if column.name not in given:
            continue  # the table's column stays null: readers fill it
        cast = spark_type(column.field_type)
        select.append(f"CAST({_quoted(column.name)} AS {cast}) AS {_quoted(column.name)}")
    partition_by = []
    for index, spec_field in enumerate(table.spec().fields):
        source = schema.find_field(spec_field.source_id)
        if source.name not in given:
            continue  # every row's value is null: one partition, nothing to split by
        hidden = PARTITION_COLUMN.format(index)
        value = f"CAST({_quoted(source.name)} AS {spark_type(source.field_type)})"
        if isinstance(source.field_type, StringType):
            value = f"concat('{_STRING_MARK}', {value})"
        select.append(f"{value} AS {_quoted(hidden)}")
        partition_by.append(hidden)
    return tuple(select), tuple(partition_by)


def spark_options(properties: Mapping[str, str]) -> dict[str, str]:
    """Options of Spark's Parquet writer from the table's ``write.parquet.*`` properties,
    with Iceberg's defaults (zstd)."""
    codec = properties.get("write.parquet.compression-codec", "zstd").lower()
    options = {
        "compression": "none" if codec == "uncompressed" else codec,
        # a fresh directory of the run's own: no other overwrite semantics apply
        "partitionOverwriteMode": "static",
    }
    sizes = {
        "parquet.block.size": "write.parquet.row-group-size-bytes",
        "parquet.page.size": "write.parquet.page-size-bytes",
        "parquet.dictionary.page.size": "write.parquet.dict-size-bytes",
    }
    for option, key in sizes.items():
        if properties.get(key):
            options[option] = str(int(properties[key]))
    if properties.get("write.parquet.compression-level") and codec == "zstd":
        options["parquet.compression.codec.zstd.level"] = str(
            int(properties["write.parquet.compression-level"])
        )
    return options


@dataclass(frozen=True)
class JobFile:
    """One data file of a write job's output."""

    path: str
    """fsspec path."""
    split: int
    """The Spark partition (task) that wrote it."""


def job_files(fs: Any, job: str) -> Iterator[JobFile]:
    """The data files of a write job's output at ``job`` (an fsspec path), in order. Spark's
    own files (``_SUCCESS``, ``_temporary/``, ``.crc`` checksums) are not data; partition
    directories (``__twopc_partition_0=...``) are."""
    base = job.rstrip("/")
    for path, info in sorted(fs.find(base, detail=True).items()):
        relative = str(path)[len(base) + 1 :]
        *directories, name = relative.split("/")
        hidden = name.startswith(("_", ".")) or any(
            part.startswith(("_", ".")) and "=" not in part for part in directories
        )
        if info.get("type") == "directory" or hidden:
            continue
        match = _SPARK_FILE.match(relative.rsplit("/", 1)[-1])
        if match is None:
            raise SinkError(
                f"Spark's write job left {relative} in {job}, which is not one of its part files"
            )
        yield JobFile(str(path), int(match["split"]))


def partition_key_of(table: Table, metadata: pq.FileMetaData, path: str) -> PartitionKey | None:
    """The partition of a file Spark wrote (``None`` for an unpartitioned table): each
    identity field's value from the footer's statistics, where every row holds the same
    value. Raises :class:`~twopc.SinkError` when the file holds more than one."""
    spec, schema = table.spec(), table.schema()
    if spec.is_unpartitioned():
        return None
    values = [
        PartitionFieldValue(
            spec_field, _single_value(metadata, schema.find_field(spec_field.source_id), path)
        )
        for spec_field in spec.fields
    ]
    return PartitionKey(field_values=values, partition_spec=spec, schema=schema)


def _single_value(metadata: pq.FileMetaData, source: NestedField, path: str) -> Any:
    """The one value ``source``'s column holds in every row of the file (``None``: null,
    or the column is not in the file)."""
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    if source.name not in names:
        return None
    index = names.index(source.name)
    found: set[Any] = set()
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group).column(index)
        stats = chunk.statistics
        rows = metadata.row_group(group).num_rows
        if stats is None or not stats.has_null_count:
            raise SinkError(f"the Parquet file {path} has no statistics for {source.name!r}")
        if stats.null_count == rows:
            found.add(None)
            continue
        if stats.null_count or not stats.has_min_max or stats.min != stats.max:
            raise SinkError(
                f"the Parquet file {path} holds more than one value of partition column "
                f"{source.name!r}"
            )
        found.add(stats.min)
    if len(found) > 1:
        raise SinkError(
            f"the Parquet file {path} holds more than one value of partition column "
            f"{source.name!r}: {sorted(map(repr, found))}"
        )
    return next(iter(found), None)


def statistics_of(table: Table, metadata: pq.FileMetaData) -> dict[str, Any]:
    """What Iceberg's manifest keeps about a file (counts and bounds per field id), from
    its footer, matched to the table's columns by name."""
    schema: Schema = table.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata,
        stats_columns=compute_statistics_plan(schema, dict(table.properties)),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return dict(statistics.to_serialized_dict())


def stage_split(
    table: Table, data: Place, directory: str, paths: Sequence[str]
) -> list[WrittenFile]:
    """One Spark partition's files, moved into ``directory`` (its attempt's) under their
    Iceberg partition paths, synced, and described; empty files (Spark writes one for a
    task without rows) are removed."""
    written = []
    for number, path in enumerate(paths):
        with data.fs.open(path, "rb") as handle:
            metadata = pq.read_metadata(handle)
        if metadata.num_rows == 0:
            data.fs.rm(path)
            continue
        key = partition_key_of(table, metadata, path)
        partition_path = key.to_path() if key is not None else ""
        target_dir = f"{directory}/{partition_path}" if partition_path else directory
        target = f"{target_dir}/part-{number:05d}.parquet"
        data.fs.makedirs(target_dir, exist_ok=True)
        data.fs.mv(path, target)
        if is_local(data.fs):
            # pre_commit's promise: what the committable names survives a crash
            fsync_file(target)
            fsync_directory(target_dir)
        partition: tuple[Any, ...] = ()
        if key is not None:
            record = key.partition
            partition = tuple(record[i] for i in range(len(record)))
        written.append(
            WrittenFile(
                path=f"{data.prefix}{target}",
                spec_id=table.spec().spec_id,
                partition=partition,
                partition_path=partition_path,
                size=int(data.fs.size(target)),
                stats=statistics_of(table, metadata),
                field_ids=False,
            )
        )
    return written
