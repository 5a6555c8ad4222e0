"""Phase 1 of the Iceberg sink as one Spark write job (``WritesWithSpark``): whether
Spark's writer can write the table, the job's plan, and the job's output made prepared
work, one committable per Spark partition, as its task would have made it.

The job writes into ``_spark_job/`` inside the directory of the run's partition 0, whose
``.started`` record exists before the job: a driver that dies during the job leaves
nothing the sweep does not find. Each partition's files are then moved into the directory
of its own attempt (after its ``.started`` record), the job's directory removed, and every
partition recorded as prepared. :mod:`twopc_iceberg._spark_write` holds the parts that
know Spark's writer and Iceberg's files.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pyiceberg.table import Table

from twopc import (
    Committable,
    ConfigurationError,
    SparkOutput,
    SparkWrite,
    TaskContext,
)
from twopc.spark_output import JobFile, job_files
from twopc.storage import is_local
from twopc.table_formats import AttemptId
from twopc_iceberg._datafiles import WrittenFile
from twopc_iceberg._layout import attempt_data_dir
from twopc_iceberg._payload import IcebergPayload
from twopc_iceberg._records import records_of
from twopc_iceberg._spark_write import (
    SESSION_CONF,
    identity_dtypes,
    projection,
    spark_options,
    stage_split,
    staging_synced,
    sync_directories,
    table_refusals,
)
from twopc_iceberg._tables import TableAccess

__all__ = ["SparkPhase1"]


@dataclass(frozen=True)
class SparkPhase1:
    """One Iceberg sink's phase 1 through Spark's own Parquet writer."""

    access: TableAccess
    table: str
    """The table's identifier, for messages and payloads."""
    mode: str
    target_file_size: int | None

    def refusals(self) -> list[str]:
        """Why Spark's writer cannot write this sink's batches (empty: it can)."""
        reasons = []
        if self.mode == "upsert":
            reasons.append("mode='upsert' keeps each key's last row of a task in Python")
        if self.access.add_columns:
            reasons.append(
                "schema_evolution='add_columns' needs the types of new columns before the "
                "write, which Spark's write plan does not give"
            )
        if self.target_file_size is not None:
            reasons.append("target_file_size: Spark's writer does not roll files by size")
        if reasons:
            return reasons
        table = self.access.load()
        if table is None:
            return [
                f"table {self.table} does not exist yet: the first batch creates it from "
                "its column types in Python tasks (a writer started later uses Spark's)"
            ]
        data = self.access.data(table)
        if not is_local(data.fs):
            reasons.append(
                f"the table's data path {data.prefix}{data.path} is not on the local "
                "filesystem: Spark's committer and the staging would copy every file"
            )
        return reasons + table_refusals(table)

    @staticmethod
    def _job(data_path: str, ctx: TaskContext) -> str:
        """The write job's output: inside the directory of the run's partition 0, so that
        whatever removes that attempt removes the job's leftovers too."""
        return f"{attempt_data_dir(data_path, ctx.sink_id, AttemptId.of(ctx))}/_spark_job"

    def plan(self, ctx: TaskContext, columns: Sequence[str], table: Table) -> SparkWrite:
        """Where and how Spark writes this run of the batch (:meth:`WritesWithSpark.
        plan_spark_write`) into ``table`` as the catalog holds it now."""
        refusals = table_refusals(table)
        if refusals:
            raise ConfigurationError(
                f"iceberg sink: table {self.table} changed since this query started, and "
                f"Spark's writer cannot write it now: {'; '.join(refusals)}; restart the "
                "query (it then writes in Python tasks)"
            )
        select, partition_by = projection(table, columns, self.table)
        data = self.access.data(table)
        records_of(self.access.home(table), ctx.sink_id).mark_started(AttemptId.of(ctx))
        job = self._job(data.path, ctx)
        if data.fs.exists(job):
            data.fs.rm(job, recursive=True)  # a run of this very name that died
        return SparkWrite(
            "parquet",
            f"{data.prefix or 'file://'}{job}",
            spark_options(table.properties),
            partition_by,
            select=select,
            session_conf=dict(SESSION_CONF),
            identity_dtypes=identity_dtypes(table.schema(), table.spec(), columns),
        )

    def written(self, ctx: TaskContext, write: SparkWrite, table: Table) -> list[SparkOutput]:
        """Move each Spark partition's files into the directory of its own attempt,
        describe them from their footers (against ``table`` as :meth:`plan` saw it, whose
        columns and spec the job wrote), then record each partition as prepared."""
        data = self.access.data(table)
        records = records_of(self.access.home(table), ctx.sink_id)
        job = self._job(data.path, ctx)
        with contextlib.suppress(AttributeError):
            data.fs.invalidate_cache()
        found = list(job_files(data.fs, job))
        by_split: dict[int, list[JobFile]] = {}
        for job_file in found:
            by_split.setdefault(job_file.split, []).append(job_file)
        outputs: list[tuple[AttemptId, Committable, int]] = []
        staged: list[WrittenFile] = []
        with staging_synced(data, found):  # the files reach the disk while they are staged
            for split in range(max(by_split, default=0) + 1):
                split_ctx = replace(ctx, partition=split)
                attempt = AttemptId.of(split_ctx)
                if split:
                    records.mark_started(attempt)
                directory = attempt_data_dir(data.path, ctx.sink_id, attempt)
                files = stage_split(table, data, directory, by_split.get(split, []))
                staged += files
                payload = IcebergPayload(self.table, tuple(files))
                outputs.append(
                    (attempt, Committable.for_task(split_ctx, payload), sum(f.size for f in files))
                )
            data.fs.rm(job, recursive=True)  # Spark's _SUCCESS and what its committer left
        sync_directories(data, staged)
        result = []
        for attempt, committable, size in outputs:
            records.mark_prepared(attempt, committable)
            payload = IcebergPayload.of(committable)
            result.append(SparkOutput(committable, sum(f.rows for f in payload.files), size))
        return result
