"""twopc's conformance kit, run against the sqlite sink.

``pytest tests`` runs everything; ``pytest tests -k "not spark"`` skips the Spark tests
(they also skip themselves when pyspark is not installed) and ``-k "not spark and not
sigkill"`` keeps only the fast protocol checks.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from twopc.testing import (
    CrashChecks,
    DriverCommitChecks,
    EntryPointChecks,
    SparkChecks,
    TaskCommitChecks,
    TaskSideChecks,
)

from twopc_sqlite.testing import read_ids


class _SqliteFile:
    """The target of both sinks: a database file per test, read back with SELECT."""

    large_rows = 100_000

    def new_target(self, tmp_path: Path) -> str:
        return str(tmp_path / "target.sqlite3")

    def read_committed(self, target: str) -> list[int]:
        return read_ids(target)

    def bad_batch(self) -> pa.RecordBatch:
        # ids that are not integers: the sinks reject the batch before anything is written
        return pa.record_batch({"id": pa.array(["not-a-number"]), "payload": pa.array(["x"])})


class TestSqliteConformance(
    _SqliteFile, TaskSideChecks, DriverCommitChecks, SparkChecks, EntryPointChecks, CrashChecks
):
    """Every check that applies to a sink that commits on the driver (``SqliteSink`` is a
    ``twopc.CommitsOnDriver``); ``SinkConformanceSuite`` would run the same and skip the
    in-task checks."""

    # importable in the kit's fresh processes: it lives in the installed package
    sink_factory = "twopc_sqlite.testing:make_sink"

    def format_options(self, target: str) -> dict[str, str]:
        # format("twopc") and its batch writes take create_sink's options as strings
        return {"sink": "sqlite", "path": target, "table": "rows"}


class TestSqliteTaskConformance(
    _SqliteFile, TaskSideChecks, TaskCommitChecks, SparkChecks, EntryPointChecks, CrashChecks
):
    """Every check that applies to a sink that commits in the task (``SqliteTaskSink`` is a
    ``twopc.CommitsInTask``)."""

    sink_factory = "twopc_sqlite.testing:make_task_sink"

    def format_options(self, target: str) -> dict[str, str]:
        return {"sink": "sqlite-task", "path": target, "table": "rows"}
