"""Phase 1 by Spark's own Parquet writer (the JVM path): which tables it can serve, the
projection and options its job gets, and how its output becomes the table's data files.

Spark's files carry no Iceberg field ids (Spark sets them only from column metadata,
which a write plan cannot give): readers find their columns by name, through the table's
``schema.name-mapping.default``, which the commit sets when it is missing (as pyiceberg's
``add_files`` does; schema changes keep it up to date). Everything else the files hold is
what the Python path writes: the table's types (the projection casts to them, with ANSI
casts, so a value that does not fit fails the batch instead of becoming null), timestamps
as microseconds, one partition per file.

Partitions are written by ``partitionBy`` on hidden columns, so the real columns stay in
the files. For an identity partition the hidden column is a copy of the source column and
a file's partition value is read back from its footer (every row of the file holds it),
never parsed from Spark's directory names; string copies are prefixed so that an empty
string and a null land in different directories (Spark writes both as its default
partition). For ``year``, ``month``, ``day`` and ``hour`` the hidden column is the
transform's integer, computed in Spark SQL without the session's time zone, and read back
from the directory name; so is ``truncate`` of an int or long column (the value minus its
non-negative remainder by the width, as Iceberg defines it). ``bucket`` and the other
``truncate`` sources stay with the Python path (Spark has no function for Iceberg's bucket
hash).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
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
from twopc.spark_output import JobFile
from twopc.storage import fsync_files, is_local, syncing_files
from twopc_iceberg._datafiles import WrittenFile
from twopc_iceberg._tables import Place

__all__ = [
    "SESSION_CONF",
    "WRITE_PATHS",
    "identity_dtypes",
    "partition_key_of",
    "projection",
    "spark_options",
    "stage_split",
    "staging_synced",
    "statistics_of",
    "sync_directories",
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

_TIME_TRANSFORMS = (YearTransform, MonthTransform, DayTransform, HourTransform)
_TIME_TYPES = (DateType, TimestampType, TimestamptzType)
_TRUNCATE_TYPES = (IntegerType, LongType)
"""Source types of ``truncate`` partitions that Spark SQL computes as Iceberg does."""
_INTEGER_TRANSFORMS = (*_TIME_TRANSFORMS, TruncateTransform)
"""Transforms whose value the hidden column's directory name gives as an integer."""


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
        if isinstance(spec_field.transform, _TIME_TRANSFORMS):
            if not isinstance(source.field_type, _TIME_TYPES):
                reasons.append(f"partition field {spec_field.name!r} reads a {source.field_type}")
        elif isinstance(spec_field.transform, TruncateTransform):
            if not isinstance(source.field_type, _TRUNCATE_TYPES):
                reasons.append(
                    f"partition field {spec_field.name!r} is {spec_field.transform}"
                    f"({source.name}) of a {source.field_type} column (Spark's writer "
                    "truncates int and long columns)"
                )
        elif not isinstance(spec_field.transform, IdentityTransform):
            reasons.append(
                f"partition field {spec_field.name!r} is {spec_field.transform}({source.name}) "
                "(Spark's writer writes identity, year, month, day, hour and truncate "
                "partitions)"
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
    types, then a hidden column per partition field) and the columns to partition by.
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
        if isinstance(spec_field.transform, _TIME_TRANSFORMS):
            value = time_transform(spec_field.transform, source.field_type, value)
        elif isinstance(spec_field.transform, TruncateTransform):
            value = truncate_expression(spec_field.transform.width, source.field_type, value)
        elif isinstance(source.field_type, StringType):
            value = f"concat('{_STRING_MARK}', {value})"
        select.append(f"{value} AS {_quoted(hidden)}")
        partition_by.append(hidden)
    return tuple(select), tuple(partition_by)


_MICROS_PER_DAY = 86_400_000_000
_MICROS_PER_HOUR = 3_600_000_000


def identity_dtypes(
    schema: Schema, spec: PartitionSpec, columns: Sequence[str]
) -> tuple[tuple[str, str], ...]:
    """The Spark columns and types (``df.dtypes``) for which :func:`projection` changes
    nothing: every column of the table, in its order, of the type it is cast to, and no
    partition column to add (empty when the projection always changes the batch)."""
    if spec.fields:
        return ()
    fields = schema.fields
    if tuple(columns) != tuple(f.name for f in fields):
        return ()
    dtypes = []
    for column in fields:
        cast = spark_type(column.field_type)
        if cast is None:
            return ()
        dtypes.append((column.name, cast.lower()))
    return tuple(dtypes)


def _round_down(value: str, divisor: int) -> str:
    """``value`` rounded down to a multiple of ``divisor`` in Spark SQL (the remainder
    taken non-negative, ``pmod``, so -1 rounds to -divisor)."""
    return f"({value}) - pmod({value}, {divisor})"


def _floor_div(value: str, divisor: int) -> str:
    """Integer floor division in Spark SQL (``div`` truncates toward zero)."""
    return f"({_round_down(value, divisor)}) div {divisor}"


def truncate_expression(width: int, source: IcebergType, value: str) -> str:
    """A Spark SQL expression of Iceberg's ``truncate(width)`` of an int or long ``value``:
    the value minus its remainder by ``width`` taken non-negative (``pmod``), so that -1
    truncates to -width, as Iceberg defines it. A value within ``width`` of the type's
    least value has no truncation in the type: the ANSI arithmetic fails the batch."""
    return f"CAST({_round_down(value, width)} AS {spark_type(source)})"


def time_transform(transform: Transform[Any, Any], source: IcebergType, value: str) -> str:
    """A Spark SQL expression of ``transform`` applied to ``value`` (a column cast to the
    table's type), with Iceberg's result: years, months, days or hours since 1970-01-01
    00:00 UTC, as an integer. Never through the session's time zone: a ``TIMESTAMP`` is
    taken as its instant (``unix_micros``), a ``TIMESTAMP_NTZ`` as its wall clock."""
    if isinstance(source, TimestamptzType):
        micros = f"unix_micros({value})"
        days = _floor_div(micros, _MICROS_PER_DAY)
        hours = _floor_div(micros, _MICROS_PER_HOUR)
        date = f"date_from_unix_date(CAST({days} AS INT))"
    elif isinstance(source, TimestampType):
        date = f"CAST({value} AS DATE)"
        days = f"unix_date({date})"
        hours = f"({days}) * 24 + hour({value})"
    else:
        date, days, hours = value, f"unix_date({value})", ""
    expression = {
        YearTransform: f"year({date}) - 1970",
        MonthTransform: f"(year({date}) - 1970) * 12 + month({date}) - 1",
        DayTransform: days,
        HourTransform: hours,
    }[type(transform)]
    return f"CAST({expression} AS INT)"


def spark_options(properties: Mapping[str, str]) -> dict[str, str]:
    """Options of Spark's Parquet writer from the table's ``write.parquet.*`` properties,
    with Iceberg's defaults (zstd). The engine adds the committer's and the local
    filesystem's settings for a run's own location (``twopc._engines.run_location``)."""
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


def partition_key_of(
    table: Table, metadata: pq.FileMetaData, job_file: JobFile
) -> PartitionKey | None:
    """The partition of a file Spark wrote (``None`` for an unpartitioned table): an
    identity field's value from the footer's statistics, where every row holds the same
    value (raises :class:`~twopc.SinkError` when the file holds more than one); a time
    field's or an integer ``truncate``'s from the directory of its hidden column (an
    integer)."""
    spec, schema = table.spec(), table.schema()
    if spec.is_unpartitioned():
        return None
    values = []
    for index, spec_field in enumerate(spec.fields):
        source = schema.find_field(spec_field.source_id)
        if isinstance(spec_field.transform, _INTEGER_TRANSFORMS):
            found = job_file.directories.get(PARTITION_COLUMN.format(index))
            value: Any = None if found is None else int(found)
        else:
            value = _single_value(metadata, source, job_file.path)
        values.append(PartitionFieldValue(spec_field, value))
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
    table: Table, data: Place, directory: str, files: Sequence[JobFile]
) -> list[WrittenFile]:
    """One Spark partition's files, moved into ``directory`` (its attempt's) under their
    Iceberg partition paths and described; empty files (Spark writes one for a task
    without rows) are removed. Not synced: the caller syncs every split's files at once
    (:func:`staging_synced`, :func:`sync_directories`) before anything names them."""
    written = []
    for number, job_file in enumerate(files):
        path = job_file.path
        with data.fs.open(path, "rb") as handle:
            metadata = pq.read_metadata(handle)
        if metadata.num_rows == 0:
            data.fs.rm(path)
            continue
        key = partition_key_of(table, metadata, job_file)
        partition_path = key.to_path() if key is not None else ""
        target_dir = f"{directory}/{partition_path}" if partition_path else directory
        target = f"{target_dir}/part-{number:05d}.parquet"
        data.fs.makedirs(target_dir, exist_ok=True)
        data.fs.mv(path, target)
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


@contextlib.contextmanager
def staging_synced(data: Place, job: Sequence[JobFile]) -> Iterator[None]:
    """pre_commit's promise for the job's files on the local filesystem: what a
    committable names survives a crash (object stores' files are durable once written).
    Each file is synced in a thread while the block stages it (describes and moves it
    within the filesystem); leaving the block waits for all. Records may name the files
    only after the block, and after :func:`sync_directories` made their moves durable."""
    if not is_local(data.fs):
        yield
        return
    with syncing_files(found.path for found in job):
        yield


def sync_directories(data: Place, files: Sequence[WrittenFile]) -> None:
    """Sync the directories that name staged ``files`` (local filesystem only): their
    moves into the attempt's directories survive a crash."""
    if is_local(data.fs):
        fsync_files((), (data.path_of(f.path).rsplit("/", 1)[0] for f in files))
