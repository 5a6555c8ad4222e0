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

from twopc._batch_write import write_batch
from twopc._commit_log import CommitLog
from twopc._entry_points import register
from twopc._metrics import BatchMetrics, BatchStatus, TaskMetrics
from twopc._retry import RetryPolicy
from twopc._spark import SparkBatchWriter, foreach_batch
from twopc._status import (
    Action,
    ItemKind,
    QueryStatus,
    RecoveryReport,
    SinkStatus,
    StatusItem,
    WriterStatus,
    recover_sink,
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
    PermanentSinkError,
    PluginError,
    ReplayMismatchError,
    SinkError,
    TransientSinkError,
    TwoPCError,
    UnsupportedFormatError,
)
from twopc.faults import CrashPoint, FaultPlan
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
    Payload,
    PendingWork,
    RecoveryScope,
    Sink,
    SparkOutput,
    SparkWrite,
    TargetMarker,
    TaskContext,
    WorkKind,
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
    "SinkSpec",
    "SinkStatus",
    "SourceOffsets",
    "SparkBatchWriter",
    "SparkOutput",
    "SparkWrite",
    "StatusItem",
    "TargetMarker",
    "TaskContext",
    "TaskMetrics",
    "TransientSinkError",
    "TwoPCError",
    "UnsupportedFormatError",
    "WorkKind",
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
    "write_batch",
]

# Show public names as twopc.X in reprs and docs, as httpx does.
for _name in __all__:
    if not _name.startswith("_"):
        _obj = globals()[_name]
        if getattr(_obj, "__module__", "").startswith("twopc._"):
            _obj.__module__ = "twopc"
del _name, _obj
