"""The whole conformance kit in one class, for a plugin author who wants everything."""

from __future__ import annotations

from twopc.testing._checks import DriverCommitChecks, TaskCommitChecks
from twopc.testing._crash_checks import CrashChecks
from twopc.testing._entry_point_checks import EntryPointChecks
from twopc.testing._offset_checks import SourceOffsetChecks
from twopc.testing._spark_checks import SparkChecks
from twopc.testing._task_side_checks import TaskSideChecks

__all__ = ["SinkConformanceSuite"]


class SinkConformanceSuite(
    TaskSideChecks,
    DriverCommitChecks,
    TaskCommitChecks,
    SourceOffsetChecks,
    SparkChecks,
    EntryPointChecks,
    CrashChecks,
):
    """Every check of the kit. The checks of the commit role the sink does not have are
    skipped with that reason; compose the check classes yourself to run fewer, e.g.
    ``class TestMySink(TaskSideChecks, TaskCommitChecks, CrashChecks)``."""
