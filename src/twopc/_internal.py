"""The one door into the core's internals for twopc's own benchmarks (``benchmarks/``),
which measure the coordinator below the public API: a coordinator driven by hand, phase 1's
task, the commit log's records and its directory listings, the Spark engine whose action
the coordination benchmark times apart.

Not an API: anything here may change with any release. It exists so that a reorganisation
of the core's private modules changes this file, not every benchmark."""

from __future__ import annotations

from types import ModuleType

from twopc._contract.paths import CommitPath
from twopc._coordination import commit_log as _commit_log
from twopc._coordination.coordinator import Coordinator
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.records import BatchRun, Decision
from twopc._coordination.reported import ReportedBatches
from twopc._engines.spark_engine import SparkEngine

__all__ = [
    "BatchRun",
    "CommitPath",
    "Coordinator",
    "Decision",
    "Phase1Task",
    "ReportedBatches",
    "SparkEngine",
    "commit_log_module",
]


def commit_log_module() -> ModuleType:
    """The commit log's module, whose ``_list_names`` the coordination benchmark wraps to
    count a local log's directory listings (they bypass fsspec)."""
    return _commit_log
