"""Phase 1 of the Delta sink as one Spark write job (``WritesWithSpark``): whether Spark's
own Parquet writer can write the table, the job's plan, and the job's output made prepared
work, one committable per Spark partition, as its Python task would have made it.

The job writes the table's columns (the data's, cast to the table's types with ANSI casts,
so a value that does not fit fails the batch instead of becoming null; a column the data
lacks as nulls), partitioned by the table's partition columns: Spark leaves those out of
the files and names their values in its directories, which is what a Delta add action's
``partitionValues`` holds (an empty string and a null both land in Spark's default
partition; Delta reads an empty partition value as null too). Timestamps are written as
microseconds, decimals as integers, as Delta's writers do.

The job writes into ``_spark_job/`` inside the directory of the run's partition 0, whose
``.started`` record exists before the job: a driver that dies during the job leaves
nothing the sweep does not find. Each Spark partition's files then move into the
directory of its own attempt (after its ``.started`` record), are described from their
footers (:func:`~twopc_delta._datafiles.footer_stats`), and every partition is recorded
as prepared once the files and the moves are durable.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import Schema as DeltaSchema

from twopc import (
    Committable,
    ConfigurationError,
    PermanentSinkError,
    SparkOutput,
    SparkWrite,
    TaskContext,
)
from twopc.spark_output import JobFile, job_files
from twopc.storage import fsync_files, is_local, syncing_files
from twopc.table_formats import AttemptId
from twopc_delta._datafiles import WrittenFile, footer_stats, modified_ms
from twopc_delta._layout import attempt_data_dir
from twopc_delta._log import TableInfo, read_log
from twopc_delta._payload import DeltaPayload
from twopc_delta._records import records_of
from twopc_delta._table import TableAccess, unsupported_features

__all__ = ["SESSION_CONF", "SparkPhase1", "identity_dtypes", "projection", "spark_type"]

SESSION_CONF = {
    # Spark writes TIMESTAMP columns as INT96 by default; Delta's are microseconds
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # a cast to the table's type that does not fit fails the batch (not a silent null)
    "spark.sql.ansi.enabled": "true",
    # decimals as integers, as Delta's writers store them
    "spark.sql.parquet.writeLegacyFormat": "false",
}
"""The Spark SQL settings of a write job (set for the job only)."""

_OPTIONS = {
    "compression": "snappy",  # what the Python path and Delta's writers use
    # a fresh directory of the run's own: no other overwrite semantics apply
    "partitionOverwriteMode": "static",
}

_PARTITION_TYPES = ("STRING", "TINYINT", "SMALLINT", "INT", "BIGINT", "BOOLEAN", "DATE")
"""Partition column types whose values Spark's directory names give as Delta writes them."""


def spark_type(kind: pa.DataType) -> str | None:
    """The Spark SQL type a Delta column of Arrow type ``kind`` is cast to, or ``None``
    when Spark's Parquet writer cannot write it as Delta reads it (nested types, ...)."""
    if pa.types.is_decimal128(kind):
        return f"DECIMAL({kind.precision},{kind.scale})"
    if pa.types.is_timestamp(kind):
        return "TIMESTAMP" if kind.tz else "TIMESTAMP_NTZ"
    simple = (
        (pa.types.is_boolean, "BOOLEAN"),
        (pa.types.is_int8, "TINYINT"),
        (pa.types.is_int16, "SMALLINT"),
        (pa.types.is_int32, "INT"),
        (pa.types.is_int64, "BIGINT"),
        (pa.types.is_float32, "FLOAT"),
        (pa.types.is_float64, "DOUBLE"),
        (pa.types.is_date32, "DATE"),
        (pa.types.is_string, "STRING"),
        (pa.types.is_large_string, "STRING"),
        (pa.types.is_string_view, "STRING"),
        (pa.types.is_binary, "BINARY"),
        (pa.types.is_large_binary, "BINARY"),
        (pa.types.is_binary_view, "BINARY"),
    )
    return next((name for test, name in simple if test(kind)), None)


def table_refusals(info: TableInfo) -> list[str]:
    """Why Spark's writer cannot write this table's data files as Delta wants them."""
    reasons = list(unsupported_features(info, upsert=False))
    schema = info.arrow_schema()
    for column in schema:
        cast = spark_type(column.type)
        if not column.nullable:
            reasons.append(
                f"column {column.name!r} is not null (Spark's writer marks every column optional)"
            )
        elif cast is None:
            reasons.append(f"column {column.name!r} is {column.type}")
        elif column.name in info.partition_columns and cast not in _PARTITION_TYPES:
            reasons.append(f"partition column {column.name!r} is {column.type}")
    return reasons


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def projection(schema: pa.Schema, columns: Sequence[str], table: str) -> tuple[str, ...]:
    """The ``select`` expressions of a write job: every column of the table, in its order,
    the data's cast to the table's type and the others null. Raises
    :class:`~twopc.PermanentSinkError` for columns the table does not have."""
    extra = [c for c in columns if c not in set(schema.names)]
    if extra:
        raise PermanentSinkError(
            f"the data has column(s) {', '.join(map(repr, extra))} that Delta table {table} "
            "does not have (schema_evolution='add_columns' adds them, in Python tasks)"
        )
    given = set(columns)
    select = []
    for column in schema:
        value = _quoted(column.name) if column.name in given else "NULL"
        select.append(f"CAST({value} AS {spark_type(column.type)}) AS {_quoted(column.name)}")
    return tuple(select)


def identity_dtypes(schema: pa.Schema, columns: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The Spark columns and types (``df.dtypes``) for which :func:`projection` changes
    nothing: the table's columns, in its order, each of the type it is cast to."""
    if tuple(columns) != tuple(schema.names):
        return ()
    dtypes = []
    for column in schema:
        cast = spark_type(column.type)
        if cast is None:
            return ()
        dtypes.append((column.name, cast.lower()))
    return tuple(dtypes)


@dataclass(frozen=True)
class SparkPhase1:
    """One Delta sink's phase 1 through Spark's own Parquet writer."""

    access: TableAccess
    mode: str
    add_columns: bool

    def refusals(self) -> list[str]:
        """Why Spark's writer cannot write this sink's batches (empty: it can)."""
        reasons = []
        if self.mode == "upsert":
            reasons.append("mode='upsert' keeps each key's last row of a task in Python")
        if self.add_columns:
            reasons.append(
                "schema_evolution='add_columns' needs the types of new columns before the "
                "write, which Spark's write plan does not give"
            )
        if reasons:
            return reasons
        place = self.access.place
        if not is_local(place.fs):
            return [
                f"the table {self.access.uri} is not on the local filesystem: Spark's "
                "committer and the staging would copy every file"
            ]
        info = read_log(place)
        if info is None:
            return [
                f"table {self.access.uri} does not exist yet: the first batch creates it from "
                "its column types in Python tasks (a writer started later uses Spark's)"
            ]
        return table_refusals(info)

    def _job(self, ctx: TaskContext) -> str:
        """The write job's output: inside the directory of the run's partition 0, so that
        whatever removes that attempt removes the job's leftovers too."""
        root = os.path.abspath(self.access.place.path)
        return f"{attempt_data_dir(root, ctx.sink_id, AttemptId.of(ctx))}/_spark_job"

    def plan(self, ctx: TaskContext, columns: Sequence[str]) -> tuple[SparkWrite, TableInfo]:
        """Where and how Spark writes this run of the batch (:meth:`WritesWithSpark.
        plan_spark_write`), and the table as the plan saw it."""
        info = read_log(self.access.place)
        if info is None:
            self.access.require_log()
        assert info is not None
        self.access.check_writable(info, upsert=False)
        refusals = table_refusals(info)
        if refusals:
            raise ConfigurationError(
                f"delta sink: table {self.access.uri} changed since this query started, and "
                f"Spark's writer cannot write it now: {'; '.join(refusals)}; restart the "
                "query (it then writes in Python tasks)"
            )
        schema = info.arrow_schema()
        select = projection(schema, columns, self.access.uri)
        records_of(self.access.place, ctx.sink_id).mark_started(AttemptId.of(ctx))
        job = self._job(ctx)
        fs = self.access.place.fs
        if fs.exists(job):
            fs.rm(job, recursive=True)  # a run of this very name that died
        write = SparkWrite(
            "parquet",
            f"file://{job}",
            dict(_OPTIONS),
            info.partition_columns,
            select=select,
            session_conf=dict(SESSION_CONF),
            identity_dtypes=identity_dtypes(schema, columns),
        )
        return write, info

    def written(self, ctx: TaskContext, info: TableInfo) -> list[SparkOutput]:
        """Move each Spark partition's files into the directory of its own attempt,
        describe them from their footers, then record each partition as prepared."""
        place = self.access.place
        fs = place.fs
        records = records_of(place, ctx.sink_id)
        job = self._job(ctx)
        with contextlib.suppress(AttributeError):
            fs.invalidate_cache()
        found = list(job_files(fs, job))
        by_split: dict[int, list[JobFile]] = {}
        for job_file in found:
            by_split.setdefault(job_file.split, []).append(job_file)
        schema = DeltaSchema.from_arrow(info.arrow_schema()).to_json()
        outputs: list[tuple[AttemptId, Committable]] = []
        directories: list[str] = []
        with syncing_files(f.path for f in found):  # durable while they are staged
            for split in range(max(by_split, default=0) + 1):
                split_ctx = replace(ctx, partition=split)
                attempt = AttemptId.of(split_ctx)
                if split:
                    records.mark_started(attempt)
                directory = attempt_data_dir(os.path.abspath(place.path), ctx.sink_id, attempt)
                relative = attempt_data_dir("", ctx.sink_id, attempt)
                files = list(self._stage(info, directory, relative, by_split.get(split, [])))
                if files:
                    directories.append(directory)
                payload = DeltaPayload(self.access.uri, tuple(files), schema if files else "")
                outputs.append((attempt, Committable.for_task(split_ctx, payload)))
            fs.rm(job, recursive=True)  # Spark's _SUCCESS and what its committer left
        fsync_files((), directories)
        result = []
        for attempt, committable in outputs:
            records.mark_prepared(attempt, committable)
            staged = DeltaPayload.of(committable).files
            result.append(
                SparkOutput(committable, sum(f.rows for f in staged), sum(f.size for f in staged))
            )
        return result

    def _stage(
        self, info: TableInfo, directory: str, relative: str, files: Sequence[JobFile]
    ) -> Iterator[WrittenFile]:
        """One Spark partition's files, moved into ``directory`` and described; empty
        files (Spark writes one for a task without rows) are removed."""
        fs = self.access.place.fs
        for number, job_file in enumerate(files):
            with fs.open(job_file.path, "rb") as handle:
                metadata = pq.read_metadata(handle)
            if metadata.num_rows == 0:
                fs.rm(job_file.path)
                continue
            name = f"part-{number:05d}.parquet"
            fs.makedirs(directory, exist_ok=True)
            fs.mv(job_file.path, f"{directory}/{name}")
            details = fs.info(f"{directory}/{name}")
            yield WrittenFile(
                path=f"{relative}/{name}",
                size=int(details["size"]),
                rows=metadata.num_rows,
                partition_values={
                    column: job_file.directories.get(column) for column in info.partition_columns
                },
                stats=footer_stats(metadata),
                modified_ms=modified_ms(details),
            )
