"""twopc: exactly-once, two-phase-commit sinks for PySpark Structured Streaming.

One line in a query::

    sink = twopc.create_sink("files", path="/data/orders", format="parquet")
    df.writeStream.foreachBatch(twopc.foreach_batch(sink, sink_id="orders")).start()

The sink contract for backend authors is in :mod:`twopc.protocol`; plugins register through
the ``twopc`` entry-point group (:mod:`twopc.plugins`); fault injection is in
:mod:`twopc.faults`; the JVM-free engine is :mod:`twopc.local`.
"""

from twopc._commit_log import CommitLog, Decision
from twopc._coordinator import Coordinator, Phase1Task, RetryPolicy, TaskReport
from twopc._liveness import Heartbeat, Liveness
from twopc._metrics import BatchMetrics, TaskMetrics
from twopc._spark import SparkBatchWriter, foreach_batch
from twopc._status import (
    QueryStatus,
    RecoveryReport,
    SinkStatus,
    StatusItem,
    WriterStatus,
    recover_sink,
    sink_status,
)
from twopc._version import __version__
from twopc._writer import BatchWriter
from twopc.errors import (
    BackendNotFoundError,
    BackendNotInstalledError,
    BackendUnavailableError,
    BatchFailedError,
    CheckpointMismatchError,
    CommitError,
    CommitStateUnknownError,
    ConfigurationError,
    InjectedFault,
    PermanentSinkError,
    PluginError,
    ReplayMismatchError,
    SinkError,
    TransientSinkError,
    TwoPCError,
)
from twopc.faults import CrashPoint, Fault, FaultAction, FaultPlan
from twopc.plugins import (
    BackendInfo,
    PluginRegistry,
    SinkSpec,
    create_sink,
    hookimpl,
    list_backends,
)
from twopc.protocol import (
    Capabilities,
    CommitOutcome,
    Committable,
    Footprint,
    Inspection,
    PendingWork,
    RecoveryScope,
    Sink,
    TargetMarker,
    TaskContext,
)

__all__ = [
    "BackendInfo",
    "BackendNotFoundError",
    "BackendNotInstalledError",
    "BackendUnavailableError",
    "BatchFailedError",
    "BatchMetrics",
    "BatchWriter",
    "Capabilities",
    "CheckpointMismatchError",
    "CommitError",
    "CommitLog",
    "CommitOutcome",
    "CommitStateUnknownError",
    "Committable",
    "ConfigurationError",
    "Coordinator",
    "CrashPoint",
    "Decision",
    "Fault",
    "FaultAction",
    "FaultPlan",
    "Footprint",
    "Heartbeat",
    "InjectedFault",
    "Inspection",
    "Liveness",
    "PendingWork",
    "PermanentSinkError",
    "Phase1Task",
    "PluginError",
    "PluginRegistry",
    "QueryStatus",
    "RecoveryReport",
    "RecoveryScope",
    "ReplayMismatchError",
    "RetryPolicy",
    "Sink",
    "SinkError",
    "SinkSpec",
    "SinkStatus",
    "SparkBatchWriter",
    "StatusItem",
    "TargetMarker",
    "TaskContext",
    "TaskMetrics",
    "TaskReport",
    "TransientSinkError",
    "TwoPCError",
    "WriterStatus",
    "__version__",
    "create_sink",
    "foreach_batch",
    "hookimpl",
    "list_backends",
    "recover_sink",
    "sink_status",
]

# Show public names as twopc.X in reprs and docs, as httpx does.
for _name in __all__:
    if not _name.startswith("_"):
        _obj = globals()[_name]
        if getattr(_obj, "__module__", "").startswith("twopc._"):
            _obj.__module__ = "twopc"
del _name, _obj
