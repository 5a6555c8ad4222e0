"""The public namespace: ``__all__`` lists exactly what the package exports (httpx style)."""

from __future__ import annotations

import importlib
import pickle
import types

import pytest

import twopc
import twopc_files
import twopc_iceberg
import twopc_jdbc
import twopc_kafka

pytestmark = pytest.mark.unit

INCLUDED_PRIVATE_MEMBERS = {"__version__"}


def _public_members(module: types.ModuleType) -> list[str]:
    return [
        name
        for name, value in vars(module).items()
        if (not name.startswith("_") or name in INCLUDED_PRIVATE_MEMBERS)
        and not isinstance(value, types.ModuleType)  # submodules imported on the way
    ]


@pytest.mark.parametrize("module", [twopc, twopc_files], ids=lambda m: m.__name__)
def test_all_is_sorted_and_complete(module: types.ModuleType) -> None:
    assert module.__all__ == sorted(module.__all__)
    assert len(set(module.__all__)) == len(module.__all__)
    assert sorted(module.__all__) == sorted(_public_members(module))


@pytest.mark.parametrize("module", [twopc, twopc_files], ids=lambda m: m.__name__)
def test_star_import_gives_exactly_all(module: types.ModuleType) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {module.__name__} import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(module.__all__)


@pytest.mark.parametrize("name", twopc.__all__)
def test_every_name_resolves(name: str) -> None:
    value = getattr(twopc, name)
    assert value is not None
    if not isinstance(value, type | types.FunctionType):
        return  # constants and marker instances (hookimpl) have no home module of their own
    module = value.__module__
    if module == "twopc":  # re-homed from a private module: twopc.X must be the object
        assert getattr(twopc, value.__qualname__) is value
    else:  # shown under a public module
        assert not any(part.startswith("_") for part in module.split("."))
        assert getattr(importlib.import_module(module), value.__qualname__) is value


@pytest.mark.parametrize("name", [n for n in twopc.__all__ if isinstance(getattr(twopc, n), type)])
def test_exported_classes_pickle_by_reference(name: str) -> None:
    cls = getattr(twopc, name)
    assert pickle.loads(pickle.dumps(cls)) is cls


def test_version_is_a_string() -> None:
    assert isinstance(twopc.__version__, str)
    assert twopc.__version__.count(".") >= 1


# What users and plugin authors get: a change here is an API change, and needs a line in the
# CHANGELOG.
PUBLIC = {
    twopc: [
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
    ],
    twopc_files: ["FORMATS", "FilesPayload", "FilesSink", "StagedFile"],
    # the backends that import their client libraries lazily (module __getattr__)
    twopc_jdbc: ["MySQLSink", "PostgresSink"],
    twopc_kafka: ["ConsumerGroup", "KafkaSink"],
    twopc_iceberg: ["IcebergPayload", "IcebergSink"],
}
LAZY = (twopc_jdbc, twopc_kafka, twopc_iceberg)


@pytest.mark.parametrize("module", list(PUBLIC), ids=lambda m: m.__name__)
def test_the_public_names_are_pinned(module: types.ModuleType) -> None:
    assert module.__all__ == PUBLIC[module]


def test_the_testing_helpers_are_pinned() -> None:
    import twopc.testing

    assert twopc.testing.__all__ == [
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


def test_the_metrics_exporters_are_pinned() -> None:
    import twopc.metrics

    assert twopc.metrics.__all__ == [
        "CATALOG",
        "OBSERVED_NAME",
        "Instrument",
        "Kind",
        "OpenTelemetryExporter",
        "PrometheusExporter",
        "PrometheusServer",
        "combine",
        "observe",
        "prometheus_name",
        "start_prometheus_server",
    ]
    namespace: dict[str, object] = {}
    exec("from twopc.metrics import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(twopc.metrics.__all__)


@pytest.mark.parametrize("module", LAZY, ids=lambda m: m.__name__)
def test_lazy_backends_export_exactly_all(module: types.ModuleType) -> None:
    """Their names resolve on first use (the client libraries are installed here), star
    import gives exactly ``__all__``, and any other name is an AttributeError."""
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        value = getattr(module, name)
        assert isinstance(value, type) and value.__name__ == name
    namespace: dict[str, object] = {}
    exec(f"from {module.__name__} import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == module.__all__
    with pytest.raises(AttributeError):
        module.NoSuchName  # noqa: B018


# Public names of twopc 0.1.0 that the sink contract v2 removed (CHANGELOG): each says what
# replaces it, and where the migration table is.
REMOVED = [
    "BatchWriter",
    "Capabilities",
    "Coordinator",
    "Decision",
    "Heartbeat",
    "Liveness",
    "Phase1Task",
    "TaskReport",
]
MOVED = {"Fault": "twopc.faults", "FaultAction": "twopc.faults"}


@pytest.mark.parametrize("name", REMOVED)
def test_a_removed_name_says_what_replaces_it(name: str) -> None:
    words = rf"twopc\.{name} was removed with the sink contract v2: .+ 'Migrating a v1 plugin'"
    with pytest.raises(ImportError, match=words):
        exec(f"from twopc import {name}", {})
    with pytest.raises(AttributeError, match=words):
        getattr(twopc, name)
    assert not hasattr(twopc, name)
    assert getattr(twopc, name, None) is None
    assert name not in twopc.__all__


def test_a_removed_name_inside_a_function_keeps_its_message() -> None:
    def load() -> object:
        from twopc import Coordinator

        return Coordinator

    with pytest.raises(ImportError, match=r"twopc\.Coordinator was removed"):
        load()
    with pytest.raises(AttributeError, match=r"twopc\.Coordinator was removed"):
        twopc.Coordinator  # noqa: B018


def test_capabilities_names_the_commit_roles() -> None:
    with pytest.raises(ImportError) as removed:
        exec("from twopc import Capabilities", {})
    for replacement in ("twopc.CommitsOnDriver", "twopc.CommitsInTask", "single_task"):
        assert replacement in str(removed.value)


@pytest.mark.parametrize("name", list(MOVED))
def test_a_moved_name_still_imports_with_a_deprecation_warning(name: str) -> None:
    home = importlib.import_module(MOVED[name])
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match=rf"twopc\.{name} moved to {MOVED[name]}"):
        exec(f"from twopc import {name}", namespace)
    assert namespace[name] is getattr(home, name)


def test_other_unknown_names_are_attribute_errors() -> None:
    assert not hasattr(twopc, "NoSuchName")
    with pytest.raises(ImportError, match="cannot import name 'NoSuchName'"):
        exec("from twopc import NoSuchName", {})


def test_the_migration_table_covers_every_removed_name() -> None:
    from tests.harness.processes import REPO

    guide = (REPO / "docs" / "plugins.md").read_text()
    start = guide.index("## Migrating a v1 plugin")
    section = guide[start : guide.index("\n## ", start + 1)]
    assert sorted([*REMOVED, *MOVED]) == sorted([*twopc._REMOVED, *twopc._MOVED])
    for name in [*REMOVED, *MOVED]:
        assert f"`{name}`" in section, name
