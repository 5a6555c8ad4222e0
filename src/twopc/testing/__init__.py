"""Test helpers for sink authors: the conformance kit and in-memory reference sinks.

Install with ``pip install "twopc[testing]"`` and write a test module::

    # conftest.py
    pytest_plugins = ["twopc.testing.plugin"]   # the closing summary of guarantees

    # test_conformance.py
    from twopc.testing import SinkConformanceSuite

    class TestMySink(SinkConformanceSuite):
        sink_factory = "my_plugin.testing:make_sink"   # make_sink(target) -> Sink

        def read_committed(self, target):
            return [...]   # the ids a reader of the target sees now

:class:`SinkConformanceSuite` runs every check and skips those of the commit role the sink
does not have. The checks also come as one class per part of the contract, to compose:
:class:`TaskSideChecks` (every sink), :class:`DriverCommitChecks`
(:class:`~twopc.CommitsOnDriver`), :class:`TaskCommitChecks` (:class:`~twopc.CommitsInTask`),
:class:`SourceOffsetChecks` (:class:`~twopc.KeepsSourceOffsets`), :class:`SparkChecks` (real
``foreachBatch`` queries), :class:`EntryPointChecks` (batch
writes and ``format("twopc")`` queries; provide ``format_options(target)``, or set
``format_opt_out`` to the reason the sink cannot be given as options) and
:class:`CrashChecks` (SIGKILL at every crash point, then a restart). Each test gets a fresh
target from the ``target`` fixture, which :meth:`~SinkChecks.drop_target` removes afterwards.

:class:`MemoryDriverSink` and :class:`MemoryTaskSink` are complete sinks of each role
(:class:`MemoryLastResource`: an in-task sink that can be a group's last resource) that
keep their target in memory (in one process, in a store named by :func:`memory_store` and
dropped by :func:`forget_store`), for reading and for tests of code around a sink. Minor
releases of twopc may add checks.
"""

from twopc.testing._base import GUARANTEES, SinkChecks, guarantee
from twopc.testing._checks import DriverCommitChecks, TaskCommitChecks
from twopc.testing._crash_checks import CrashChecks, crash_points
from twopc.testing._entry_point_checks import EntryPointChecks
from twopc.testing._group_checks import GroupMemberChecks
from twopc.testing._memory import (
    MemoryDriverSink,
    MemoryLastResource,
    MemoryPayload,
    MemoryStore,
    MemoryTaskSink,
    forget_store,
    memory_store,
)
from twopc.testing._offset_checks import SourceOffsetChecks
from twopc.testing._runner import batch_ids, default_batch
from twopc.testing._spark_checks import SparkChecks
from twopc.testing._suite import SinkConformanceSuite
from twopc.testing._task_side_checks import TaskSideChecks

__all__ = [
    "GUARANTEES",
    "CrashChecks",
    "DriverCommitChecks",
    "EntryPointChecks",
    "GroupMemberChecks",
    "MemoryDriverSink",
    "MemoryLastResource",
    "MemoryPayload",
    "MemoryStore",
    "MemoryTaskSink",
    "SinkChecks",
    "SinkConformanceSuite",
    "SourceOffsetChecks",
    "SparkChecks",
    "TaskCommitChecks",
    "TaskSideChecks",
    "batch_ids",
    "crash_points",
    "default_batch",
    "forget_store",
    "guarantee",
    "memory_store",
]
