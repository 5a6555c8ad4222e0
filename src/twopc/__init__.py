"""twopc: exactly-once, two-phase-commit sinks for PySpark Structured Streaming.

One line in a query::

    sink = twopc.create_sink("files", path="/data/orders", format="parquet")
    df.writeStream.foreachBatch(twopc.foreach_batch(sink, sink_id="orders")).start()

The same from a Spark Connect client, through ``df.writeStream.format("twopc")`` (see
:func:`register`), and for plain DataFrames with :func:`write_batch`.

The sink contract for backend authors is in :mod:`twopc.protocol` (the task side,
:class:`Sink`, plus one commit role: :class:`CommitsOnDriver` or :class:`CommitsInTask`);
plugins register through the ``twopc`` entry-point group (:mod:`twopc.plugins`); fault
injection is in :mod:`twopc.faults`; the JVM-free engine is :mod:`twopc.local`; test
helpers and the conformance kit are in :mod:`twopc.testing`.
"""

import sys as _sys
from typing import TYPE_CHECKING as _TYPE_CHECKING

from twopc._contract.retry import RetryPolicy
from twopc._coordination.batch_metrics import BatchMetrics, BatchStatus, TaskMetrics
from twopc._coordination.commit_log import CommitLog
from twopc._engines.batch_write import write_batch
from twopc._engines.registration import register
from twopc._engines.spark import SparkBatchWriter, foreach_batch
from twopc._operations.offsets import starting_offsets
from twopc._operations.recover import RecoveryReport, recover_sink
from twopc._operations.status import (
    Action,
    ItemKind,
    QueryStatus,
    SinkStatus,
    StatusItem,
    WriterStatus,
    sink_status,
)
from twopc._version import __version__
from twopc.errors import (
    BackendNotFoundError,
    BackendNotInstalledError,
    BackendUnavailableError,
    BatchFailedError,
    CheckpointMismatchError,
    CommitError,
    CommitStateUnknownError,
    ConfigurationError,
    ExtraNotInstalledError,
    InjectedFault,
    NoStoredOffsetsError,
    OffsetsMismatchError,
    PermanentSinkError,
    PluginError,
    ReplayMismatchError,
    SinkError,
    StartingOffsetsError,
    TargetLimitError,
    TransientSinkError,
    TwoPCError,
    UnsafeStartError,
    UnsupportedFormatError,
)
from twopc.faults import CrashPoint, FaultPlan
from twopc.groups import Member, SinkGroup
from twopc.plugins import (
    BackendInfo,
    PluginRegistry,
    ProgressSpec,
    SinkSpec,
    create_sink,
    hookimpl,
    list_backends,
)
from twopc.progress import (
    CommitsProgressInTask,
    GroupProgress,
    ProgressInTask,
    ProgressReporter,
    SourceOffsets,
)
from twopc.protocol import (
    CommitOutcome,
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    Footprint,
    Inspection,
    KeepsMarkers,
    KeepsSourceOffsets,
    LastResource,
    Payload,
    PendingWork,
    RecoveryScope,
    Sink,
    SparkOutput,
    SparkWrite,
    StoredBatch,
    TargetMarker,
    TaskContext,
    TracksWriters,
    WorkKind,
    WorkLimit,
    WorkTimeout,
    WriterRecord,
    WritesWithSpark,
)

__all__ = [
    "Action",
    "BackendInfo",
    "BackendNotFoundError",
    "BackendNotInstalledError",
    "BackendUnavailableError",
    "BatchFailedError",
    "BatchMetrics",
    "BatchStatus",
    "CheckpointMismatchError",
    "CommitError",
    "CommitLog",
    "CommitOutcome",
    "CommitStateUnknownError",
    "CommitsInTask",
    "CommitsOnDriver",
    "CommitsProgressInTask",
    "Committable",
    "ConfigurationError",
    "CrashPoint",
    "ExtraNotInstalledError",
    "FaultPlan",
    "Footprint",
    "GroupProgress",
    "InjectedFault",
    "Inspection",
    "ItemKind",
    "KeepsMarkers",
    "KeepsSourceOffsets",
    "LastResource",
    "Member",
    "NoStoredOffsetsError",
    "OffsetsMismatchError",
    "Payload",
    "PendingWork",
    "PermanentSinkError",
    "PluginError",
    "PluginRegistry",
    "ProgressInTask",
    "ProgressReporter",
    "ProgressSpec",
    "QueryStatus",
    "RecoveryReport",
    "RecoveryScope",
    "ReplayMismatchError",
    "RetryPolicy",
    "Sink",
    "SinkError",
    "SinkGroup",
    "SinkSpec",
    "SinkStatus",
    "SourceOffsets",
    "SparkBatchWriter",
    "SparkOutput",
    "SparkWrite",
    "StartingOffsetsError",
    "StatusItem",
    "StoredBatch",
    "TargetLimitError",
    "TargetMarker",
    "TaskContext",
    "TaskMetrics",
    "TracksWriters",
    "TransientSinkError",
    "TwoPCError",
    "UnsafeStartError",
    "UnsupportedFormatError",
    "WorkKind",
    "WorkLimit",
    "WorkTimeout",
    "WriterRecord",
    "WriterStatus",
    "WritesWithSpark",
    "__version__",
    "create_sink",
    "foreach_batch",
    "hookimpl",
    "list_backends",
    "recover_sink",
    "register",
    "sink_status",
    "starting_offsets",
    "write_batch",
]

# Show public names as twopc.X in reprs and docs, as httpx does.
for _name in __all__:
    if not _name.startswith("_"):
        _obj = globals()[_name]
        if getattr(_obj, "__module__", "").startswith("twopc._"):
            _obj.__module__ = "twopc"
del _name, _obj

# -- names removed with the sink contract v2 ------------------------------------------------

_MIGRATION = (
    "Every change a plugin written for contract v1 needs is in the migration table of the "
    "plugin guide, docs/plugins.md, 'Migrating a v1 plugin'"
)
_INTERNAL = "internal now (twopc's own tests import it from its private module)"
_REMOVED = {
    "Capabilities": (
        "a sink no longer declares capabilities, it inherits one commit role: "
        "twopc.CommitsOnDriver for Capabilities(global_commit=True), twopc.CommitsInTask "
        "for Capabilities(commit_in_task=True); single_transaction is the sink's attribute "
        "single_task, and the other capabilities are gone"
    ),
    "BatchWriter": (
        f"{_INTERNAL}: twopc.foreach_batch(sink, sink_id, ...) returns the writer (a "
        "twopc.SparkBatchWriter); twopc.local.foreach_batch runs one without Spark"
    ),
    "Coordinator": (
        f"{_INTERNAL}: write through twopc.foreach_batch or twopc.write_batch "
        "(twopc.local.foreach_batch without Spark), recover with twopc.recover_sink"
    ),
    "Decision": f"{_INTERNAL}: twopc.sink_status(...) shows the commit log's decisions",
    "Heartbeat": (
        f"{_INTERNAL}: twopc.sink_status(...).writers shows each writer's liveness record "
        "(WriterStatus.heartbeat)"
    ),
    "Liveness": (
        f"{_INTERNAL}: twopc.sink_status(...).writers shows each writer's liveness record "
        "(WriterStatus.running, .reason)"
    ),
    "Phase1Task": (
        f"{_INTERNAL}: phase 1 runs through twopc.foreach_batch, twopc.write_batch or twopc.local"
    ),
    "TaskReport": (
        f"{_INTERNAL}: twopc.BatchMetrics.tasks (twopc.TaskMetrics) say what each task did"
    ),
}
"""Public names of twopc 0.1.0 that are gone, with what replaces each."""
_MOVED = {"Fault": "twopc.faults", "FaultAction": "twopc.faults"}
"""Public names of twopc 0.1.0 that live on in another module."""


def _imported_by_name() -> bool:
    """Whether ``__getattr__`` runs for a ``from twopc import name`` statement: Python
    turns an AttributeError there into its own "cannot import name" ImportError and drops
    the message, so that statement gets an ImportError instead."""
    import dis

    caller = _sys._getframe(2)  # 0: here, 1: __getattr__, 2: the code that asked
    code, at = caller.f_code.co_code, caller.f_lasti
    return 0 <= at < len(code) and code[at] == dis.opmap.get("IMPORT_FROM", -1)


if not _TYPE_CHECKING:  # type checkers keep reporting unknown names of twopc

    def __getattr__(name: str) -> object:
        """Names removed since twopc 0.1.0: an error that names the replacement and the
        migration table, an :class:`AttributeError` (so ``hasattr`` says ``False``), and
        for ``from twopc import ...`` an :class:`ImportError` (Python would replace an
        AttributeError there with its own message). A name that moved to another module
        still works, with a :class:`DeprecationWarning`."""
        if name in _MOVED:
            import importlib
            import warnings

            home = _MOVED[name]
            warnings.warn(
                f"twopc.{name} moved to {home}.{name}: import it from there. {_MIGRATION}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(home), name)
        if name in _REMOVED:
            message = f"twopc.{name} was removed with the sink contract v2: {_REMOVED[name]}. "
            if _imported_by_name():
                raise ImportError(message + _MIGRATION, name=__name__, path=__file__)
            raise AttributeError(message + _MIGRATION, name=name, obj=_sys.modules[__name__])
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
