"""Plugin discovery through the ``twopc`` entry-point group, and failure isolation."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Sequence
from typing import Any

import pytest

import twopc
from twopc import (
    BackendNotFoundError,
    BackendNotInstalledError,
    BackendUnavailableError,
    CommitOutcome,
    Committable,
    PluginError,
    PluginRegistry,
    Sink,
    SinkSpec,
    TaskContext,
)
from twopc.cli import main
from twopc.plugins import DISABLE_ENV_VAR
from twopc_files import FilesSink

pytestmark = pytest.mark.unit

USABLE = ("files", "kafka", "postgres", "mysql")  # their extras are installed for the tests


class _NullSink(Sink[list[Any]]):
    backend_name = "null"

    def __init__(self, **options: Any) -> None:
        self.options = options

    def begin_transaction(self, ctx: TaskContext) -> list[Any]:
        return []

    def invoke(self, txn: list[Any], batch: Any) -> None:
        txn.append(batch)

    def pre_commit(self, txn: list[Any]) -> Committable:
        return Committable("s", "q", 0, 0, 0)

    def abort(self, txn: list[Any]) -> None:
        txn.clear()

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        return [CommitOutcome.COMMITTED for _ in committables]

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        return None

    def recover(self, sink_id: str) -> list[Committable]:
        return []


def make_null_sink(**options: Any) -> _NullSink:
    return _NullSink(**options)


def make_not_a_sink(**options: Any) -> object:
    return object()


NOT_CALLABLE = 42


def _spec(name: str, factory: str, **kwargs: Any) -> SinkSpec:
    return SinkSpec(name=name, factory=f"{__name__}:{factory}", **kwargs)


class GoodPlugin:
    @twopc.hookimpl
    def twopc_sinks(self) -> list[SinkSpec]:
        return [
            _spec("null", "make_null_sink", description="discards rows"),
            _spec("broken-factory", "make_not_a_sink"),
            _spec("not-callable", "NOT_CALLABLE"),
            _spec(
                "needs-driver",
                "make_null_sink",
                requires=("module_that_does_not_exist",),
                install_hint='pip install "twopc-nothing"',
            ),
            _spec("retired", "make_null_sink", unavailable="retired in 2.0, use null"),
            SinkSpec(
                "missing-module",
                "twopc_module_that_does_not_exist.sink:Sink",
                install_hint='pip install "twopc-missing"',
            ),
        ]


class RaisingPlugin:
    @twopc.hookimpl
    def twopc_sinks(self) -> list[SinkSpec]:
        raise RuntimeError("plugin exploded")


class WrongTypePlugin:
    @twopc.hookimpl
    def twopc_sinks(self) -> list[object]:
        return [{"name": "dict-instead-of-spec"}, _spec("after-bad-item", "make_null_sink")]


class DuplicateFilesPlugin:
    @twopc.hookimpl
    def twopc_sinks(self) -> list[SinkSpec]:
        return [_spec("files", "make_null_sink")]


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> PluginRegistry:
    monkeypatch.delenv(DISABLE_ENV_VAR, raising=False)
    return PluginRegistry(
        plugins=[RaisingPlugin(), GoodPlugin(), WrongTypePlugin(), DuplicateFilesPlugin()]
    )


def _by_name(registry: PluginRegistry) -> dict[str, Any]:
    return {info.name: info for info in registry.backends()}


# -- installed entry points ------------------------------------------------------------------


def test_entry_points_provide_the_first_party_backends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(DISABLE_ENV_VAR, raising=False)
    registry = PluginRegistry()
    infos = _by_name(registry)

    assert registry.failures() == []
    assert infos["files"].usable
    assert infos["files"].reason == "ok"
    assert infos["files"].plugin == "files"
    assert infos["files"].distribution == "twopc"
    assert infos["files"].version == twopc.__version__
    for name in USABLE:
        assert infos[name].usable, (name, infos[name].reason)
        assert infos[name].distribution == "twopc"


class _UnavailablePlugin:
    @twopc.hookimpl
    def twopc_sinks(self) -> list[SinkSpec]:
        return [SinkSpec("someday", "nowhere:Sink", unavailable="not implemented yet")]


def test_an_unavailable_backend_is_listed_with_its_reason_and_refuses_creation() -> None:
    registry = PluginRegistry([_UnavailablePlugin()], entry_points=False)
    (info,) = registry.backends()
    assert (info.name, info.usable, info.reason) == ("someday", False, "not implemented yet")
    with pytest.raises(BackendUnavailableError, match=r"someday.*not implemented yet"):
        registry.create_sink("someday")


def test_create_files_sink_by_name(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLE_ENV_VAR, raising=False)
    sink = PluginRegistry().create_sink("files", path=str(tmp_path), format="csv")
    assert isinstance(sink, FilesSink)
    assert sink.format == "csv"
    assert isinstance(twopc.create_sink("files", path=str(tmp_path)), FilesSink)


def test_disable_plugins_hides_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV_VAR, "files")
    registry = PluginRegistry()
    assert "files" not in registry.names()
    assert "kafka" in registry.names()
    with pytest.raises(BackendNotFoundError, match="files"):
        registry.create_sink("files", path="/tmp/x")

    monkeypatch.setenv(DISABLE_ENV_VAR, " files , jdbc , iceberg , delta ")
    assert PluginRegistry().names() == ["kafka"]


def test_a_plugin_that_fails_to_import_hides_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLE_ENV_VAR, raising=False)
    real = importlib.metadata.entry_points
    broken = importlib.metadata.EntryPoint(
        name="broken", value="twopc_module_that_does_not_exist.plugin", group="twopc"
    )

    def entry_points(**params: Any) -> list[Any]:
        return [broken, *real(**params)]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    registry = PluginRegistry()

    (failure,) = registry.failures()
    assert failure.plugin == "broken"
    assert "twopc_module_that_does_not_exist" in failure.error
    assert _by_name(registry)["files"].usable


# -- plugins registered in code --------------------------------------------------------------


def test_failures_are_reported_and_hide_nothing(registry: PluginRegistry) -> None:
    errors = [f.error for f in registry.failures()]
    assert len(errors) == 3
    assert any("RuntimeError" in e and "plugin exploded" in e for e in errors)
    assert any("dict" in e and "SinkSpec" in e for e in errors)
    assert any("'files'" in e and "already provided" in e for e in errors)
    assert all(f.distribution == "(registered in code)" for f in registry.failures())

    names = registry.names()
    for name in ("files", "null", "needs-driver", "after-bad-item", "kafka"):
        assert name in names
    assert "dict-instead-of-spec" not in names
    # the first provider of "files" keeps it
    assert isinstance(registry.create_sink("files", path="/tmp/x"), FilesSink)
    assert _by_name(registry)["files"].plugin == "files"


def test_good_plugin_creates_sinks(registry: PluginRegistry) -> None:
    info = _by_name(registry)["null"]
    assert info.usable
    assert info.description == "discards rows"
    sink = registry.create_sink("null", answer=42)
    assert isinstance(sink, _NullSink)
    assert sink.options == {"answer": 42}
    assert isinstance(registry.create_sink("after-bad-item"), _NullSink)


def test_missing_requirement_is_listed_with_the_install_hint(registry: PluginRegistry) -> None:
    info = _by_name(registry)["needs-driver"]
    assert not info.usable
    assert "module_that_does_not_exist" in info.reason
    assert 'pip install "twopc-nothing"' in info.reason

    with pytest.raises(BackendNotInstalledError) as error:
        registry.create_sink("needs-driver")
    assert 'pip install "twopc-nothing"' in str(error.value)
    assert "module_that_does_not_exist" in str(error.value)


def test_unimportable_factory_module_gives_the_install_hint(registry: PluginRegistry) -> None:
    with pytest.raises(BackendNotInstalledError, match='pip install "twopc-missing"'):
        registry.create_sink("missing-module")


def test_unavailable_backend(registry: PluginRegistry) -> None:
    info = _by_name(registry)["retired"]
    assert (info.usable, info.reason) == (False, "retired in 2.0, use null")
    with pytest.raises(BackendUnavailableError, match=r"retired in 2\.0"):
        registry.create_sink("retired")


def test_factories_that_are_not_sinks_are_plugin_errors(registry: PluginRegistry) -> None:
    with pytest.raises(PluginError, match=r"not a twopc\.Sink"):
        registry.create_sink("broken-factory")
    with pytest.raises(PluginError, match="not callable"):
        registry.create_sink("not-callable")


def test_unknown_backend_lists_the_known_names(registry: PluginRegistry) -> None:
    with pytest.raises(BackendNotFoundError) as error:
        registry.create_sink("nosuch")
    message = str(error.value)
    assert "'nosuch'" in message
    for name in ("files", "null", "kafka"):
        assert name in message


def test_registry_without_entry_points_has_only_code_plugins() -> None:
    registry = PluginRegistry(plugins=[DuplicateFilesPlugin()], entry_points=False)
    assert registry.names() == ["files"]
    assert registry.failures() == []
    assert isinstance(registry.create_sink("files"), _NullSink)


# -- the command line ------------------------------------------------------------------------


def test_cli_plugins_table(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DISABLE_ENV_VAR, raising=False)
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:] if line.strip()}
    assert out.splitlines()[0].split()[:4] == ["BACKEND", "PLUGIN", "VERSION", "USABLE"]
    for name in USABLE:
        assert "yes" in rows[name]


def test_cli_plugins_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DISABLE_ENV_VAR, raising=False)
    assert main(["plugins", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    backends = {b["name"]: b for b in body["backends"]}
    assert all(backends[name]["usable"] is True for name in USABLE)
    assert backends["files"]["distribution"] == "twopc"
    assert body["failures"] == []


def test_cli_reports_a_broken_plugin_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DISABLE_ENV_VAR, raising=False)
    real = importlib.metadata.entry_points
    broken = importlib.metadata.EntryPoint(
        name="broken", value="twopc_module_that_does_not_exist.plugin", group="twopc"
    )
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda **params: [broken, *real(**params)]
    )
    assert main(["plugins"]) == 0
    captured = capsys.readouterr()
    assert "broken" in captured.err
    assert any(line.split()[:1] == ["files"] for line in captured.out.splitlines())


# -- progress reporters ----------------------------------------------------------------------


class _Reporter(twopc.ProgressReporter):
    """Publishes nowhere; remembers how it was built."""

    def __init__(self, described: Any, config: Any) -> None:
        self.group_id = str(described.get("group", "g"))
        self.built = (dict(described), dict(config))

    @classmethod
    def build(cls, described: Any, config: Any) -> _Reporter:
        return cls(described, config)

    def check(self, sink_id: str) -> None:
        return None

    def publish(self, offsets: twopc.SourceOffsets, sink_id: str, query_id: str) -> None:
        return None

    def progress(self, offsets: twopc.SourceOffsets) -> twopc.GroupProgress:
        return twopc.GroupProgress(self.group_id, {}, {})

    def describe(self) -> dict[str, Any]:
        return {"kind": "test-reporter", "group": self.group_id}


def make_not_a_reporter(described: Any, config: Any) -> object:
    return object()


class ProgressPlugin:
    @twopc.hookimpl
    def twopc_progress_reporters(self) -> list[object]:
        return [
            twopc.ProgressSpec("test-reporter", f"{__name__}:_Reporter.build"),
            twopc.ProgressSpec("not-a-reporter", f"{__name__}:make_not_a_reporter"),
            twopc.ProgressSpec(
                "needs-client",
                f"{__name__}:_Reporter",
                requires=("module_that_does_not_exist",),
                install_hint='pip install "twopc-nothing"',
            ),
            SinkSpec("wrong-type", f"{__name__}:make_null_sink"),
        ]


class SecondProgressPlugin:
    @twopc.hookimpl
    def twopc_progress_reporters(self) -> list[twopc.ProgressSpec]:
        return [twopc.ProgressSpec("test-reporter", f"{__name__}:make_not_a_sink")]


def test_progress_reporters_are_built_from_what_they_recorded() -> None:
    registry = PluginRegistry([ProgressPlugin(), SecondProgressPlugin()], entry_points=False)
    assert registry.progress_kinds() == ["needs-client", "not-a-reporter", "test-reporter"]
    errors = [f.error for f in registry.failures()]
    assert any("SinkSpec, not ProgressSpec" in e for e in errors)
    assert any("'test-reporter' is already provided" in e for e in errors)

    reporter = registry.create_progress_reporter(
        {"kind": "test-reporter", "group": "lag"}, {"secret": "s"}
    )
    assert isinstance(reporter, _Reporter)
    assert reporter.built == ({"kind": "test-reporter", "group": "lag"}, {"secret": "s"})
    # what a reporter recorded of itself rebuilds it (``twopc status``)
    again = registry.create_progress_reporter(reporter.describe())
    assert isinstance(again, _Reporter) and again.group_id == "lag"

    with pytest.raises(BackendNotFoundError, match="installed kinds: needs-client"):
        registry.create_progress_reporter({"kind": "nosuch"})
    with pytest.raises(twopc.ConfigurationError, match="names no kind"):
        registry.create_progress_reporter({"group": "lag"})
    with pytest.raises(PluginError, match=r"not a twopc\.ProgressReporter"):
        registry.create_progress_reporter({"kind": "not-a-reporter"})
    with pytest.raises(BackendNotInstalledError, match='pip install "twopc-nothing"'):
        registry.create_progress_reporter({"kind": "needs-client"})


def test_the_kafka_plugin_provides_the_consumer_group() -> None:
    registry = PluginRegistry()
    assert "kafka-consumer-group" in registry.progress_kinds()
    described = {"kind": "kafka-consumer-group", "group": "g", "bootstrap_servers": "b:9092"}
    group = registry.create_progress_reporter(described, {"sasl.password": "s3cret"})
    assert group.describe() == described
    assert "s3cret" not in repr(group)
    with pytest.raises(twopc.ConfigurationError, match="'bootstrap_servers'"):
        registry.create_progress_reporter({"kind": "kafka-consumer-group", "group": "g"})
