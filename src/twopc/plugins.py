"""Plugin discovery: backends are pluggy plugins found through the ``twopc`` entry-point group.

A plugin package declares an entry point and implements one hook or both: ``twopc_sinks``
(sink backends, :class:`SinkSpec`) and ``twopc_progress_reporters`` (where a query's source
progress is published, :class:`ProgressSpec`)::

    # pyproject.toml
    [project.entry-points.twopc]
    mysink = "mysink_twopc.plugin"

    # mysink_twopc/plugin.py -- must import without the backend's optional dependencies
    import twopc

    @twopc.hookimpl
    def twopc_sinks():
        return [twopc.SinkSpec(name="mysink", factory="mysink_twopc.sink:MySink",
                               requires=("mysink_driver",),
                               install_hint='pip install "mysink-twopc"')]

The core names no backend: it creates sinks and progress reporters through these specs.
Loading isolates failures: a plugin that fails to import or whose hook raises is reported
(:meth:`PluginRegistry.failures`, ``twopc plugins``) and skipped; it never hides the others.
The first-party backends are registered exactly this way. Set ``TWOPC_DISABLE_PLUGINS`` to
a comma-separated list of entry-point names to skip them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pluggy

from twopc._contract.signature import check_options
from twopc.errors import (
    BackendNotFoundError,
    BackendNotInstalledError,
    BackendUnavailableError,
    ConfigurationError,
    PluginError,
)
from twopc.progress import ProgressReporter
from twopc.protocol import Sink

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendInfo",
    "PluginFailure",
    "PluginRegistry",
    "ProgressSpec",
    "SinkSpec",
    "create_sink",
    "hookimpl",
    "hookspec",
    "list_backends",
    "registry",
]

ENTRY_POINT_GROUP = "twopc"
DISABLE_ENV_VAR = "TWOPC_DISABLE_PLUGINS"

hookspec = pluggy.HookspecMarker("twopc")
hookimpl = pluggy.HookimplMarker("twopc")

_log = logging.getLogger("twopc.plugins")


@dataclass(frozen=True)
class SinkSpec:
    """A backend a plugin provides. Imports nothing until the backend is used.

    Attributes:
        name: the backend name users pass to :func:`twopc.create_sink`.
        factory: ``"module:callable"`` returning a :class:`~twopc.Sink` from keyword options.
        description: one line for ``twopc plugins``.
        requires: importable module names the backend needs (checked without importing).
        install_hint: how to install them, e.g. ``pip install "twopc[kafka]"``.
        unavailable: set when the backend cannot be used for another reason; says why.
    """

    name: str
    factory: str
    description: str = ""
    requires: tuple[str, ...] = ()
    install_hint: str | None = None
    unavailable: str | None = None

    def missing_requirements(self) -> list[str]:
        return [module for module in self.requires if not _importable(module)]

    def load(self) -> Callable[..., Sink[Any]]:
        """Import and return the factory, with an install hint if dependencies are missing."""
        if self.unavailable:
            raise BackendUnavailableError(
                f"the {self.name} backend is unavailable: {self.unavailable}"
            )
        missing = self.missing_requirements()
        if missing:
            raise BackendNotInstalledError(_missing_message(self, missing))
        return _import_factory(f"the {self.name} backend", self.factory, self.install_hint)


@dataclass(frozen=True)
class ProgressSpec:
    """A progress reporter a plugin provides (:class:`~twopc.ProgressReporter`): where a
    streaming query's source offsets are published. Imports nothing until it is used.

    The core builds reporters from what a reporter recorded of itself, so it never names a
    backend: ``twopc status`` from :meth:`~twopc.ProgressReporter.describe` as the commit
    log kept it, ``format("twopc")`` from its ``progress_*`` options.

    Attributes:
        kind: the reporter's kind, as its ``describe()["kind"]`` says, e.g.
            ``"kafka-consumer-group"``.
        factory: ``"module:callable"`` (the callable may be a class attribute,
            ``"module:Class.method"``), called as ``factory(described, config)``:
            ``described`` is a ``describe()`` mapping (``format("twopc")``: the
            ``progress_<key>`` options as ``<key>``), ``config`` the client settings given
            apart from it (credentials, never recorded). Returns a ``ProgressReporter``;
            raises :class:`~twopc.ConfigurationError` for what is missing.
        description: one line for people.
        requires: importable module names the reporter needs (checked without importing).
        install_hint: how to install them.
    """

    kind: str
    factory: str
    description: str = ""
    requires: tuple[str, ...] = ()
    install_hint: str | None = None

    def load(self) -> Callable[[Mapping[str, Any], Mapping[str, Any]], ProgressReporter]:
        """Import and return the factory, with an install hint if dependencies are missing."""
        missing = [module for module in self.requires if not _importable(module)]
        if missing:
            text = f"the {self.kind} progress reporter needs {', '.join(missing)}"
            raise BackendNotInstalledError(
                f"{text}: {self.install_hint}" if self.install_hint else text
            )
        return _import_factory(
            f"the {self.kind} progress reporter", self.factory, self.install_hint
        )


@dataclass(frozen=True)
class BackendInfo:
    """One backend as ``twopc plugins`` shows it."""

    name: str
    plugin: str
    distribution: str
    version: str
    usable: bool
    reason: str
    description: str


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded or whose hook failed."""

    plugin: str
    distribution: str
    version: str
    error: str


class _HookSpecs:
    """The hooks a twopc plugin can implement."""

    @hookspec
    def twopc_sinks(self) -> Iterable[SinkSpec]:  # type: ignore[empty-body]
        """Return the sink backends this plugin provides."""

    @hookspec
    def twopc_progress_reporters(self) -> Iterable[ProgressSpec]:  # type: ignore[empty-body]
        """Return the progress reporters this plugin provides."""


@dataclass(frozen=True)
class _Origin:
    plugin: str
    distribution: str
    version: str


class PluginRegistry:
    """Discovers plugins and creates sinks by backend name; a typed facade over pluggy.

    Args:
        plugins: extra plugin objects or modules to register (tests, applications).
        entry_points: discover installed plugins through the ``twopc`` entry-point group.
    """

    def __init__(self, plugins: Sequence[object] = (), *, entry_points: bool = True) -> None:
        self._manager = pluggy.PluginManager("twopc")
        self._manager.add_hookspecs(_HookSpecs)
        self._origins: dict[str, _Origin] = {}
        self._failures: list[PluginFailure] = []
        self._specs: dict[str, tuple[SinkSpec, _Origin]] = {}
        self._progress: dict[str, tuple[ProgressSpec, _Origin]] = {}
        if entry_points:
            self._load_entry_points()
        for index, plugin in enumerate(plugins):
            name = getattr(plugin, "__name__", None) or f"plugin-{index}"
            self._register(plugin, _Origin(name, "(registered in code)", ""))
        self._collect_specs()

    def _load_entry_points(self) -> None:
        disabled = {n.strip() for n in os.environ.get(DISABLE_ENV_VAR, "").split(",") if n.strip()}
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = entry_point.dist
            origin = _Origin(
                entry_point.name,
                dist.name if dist is not None else "?",
                dist.version if dist is not None else "?",
            )
            if entry_point.name in disabled:
                _log.info("plugin %s disabled by %s", entry_point.name, DISABLE_ENV_VAR)
                continue
            try:
                plugin = entry_point.load()
            except Exception as exc:
                self._fail(
                    origin, f"import of {entry_point.value!r} failed: {type(exc).__name__}: {exc}"
                )
                continue
            self._register(plugin, origin)

    def _register(self, plugin: object, origin: _Origin) -> None:
        try:
            self._manager.register(plugin, name=origin.plugin)
        except Exception as exc:
            self._fail(origin, f"registration failed: {exc}")
            return
        self._origins[origin.plugin] = origin

    def _collect_specs(self) -> None:
        for spec, origin in self._hook_results("twopc_sinks", SinkSpec):
            assert isinstance(spec, SinkSpec)
            self._add(self._specs, spec.name, spec, origin, "backend name")
        for spec, origin in self._hook_results("twopc_progress_reporters", ProgressSpec):
            assert isinstance(spec, ProgressSpec)
            self._add(self._progress, spec.kind, spec, origin, "progress reporter kind")

    def _hook_results(self, hook: str, expected: type) -> Iterable[tuple[object, _Origin]]:
        # Call each implementation on its own: pluggy stops at the first exception, and one
        # broken plugin must not hide the others.
        for impl in getattr(self._manager.hook, hook).get_hookimpls():
            origin = self._origins.get(impl.plugin_name, _Origin(impl.plugin_name, "?", "?"))
            try:
                specs = list(cast("Iterable[object] | None", impl.function()) or ())
            except Exception as exc:
                self._fail(origin, f"{hook}() raised {type(exc).__name__}: {exc}")
                continue
            for spec in specs:
                if isinstance(spec, expected):
                    yield spec, origin
                else:
                    self._fail(
                        origin,
                        f"{hook}() returned {type(spec).__name__}, not {expected.__name__}",
                    )

    def _add(
        self,
        found: dict[str, tuple[Any, _Origin]],
        key: str,
        spec: object,
        origin: _Origin,
        what: str,
    ) -> None:
        if key in found:
            other = found[key][1]
            self._fail(
                origin,
                f"{what} {key!r} is already provided by plugin {other.plugin!r} "
                f"({other.distribution}); ignored",
            )
            return
        found[key] = (spec, origin)

    def _fail(self, origin: _Origin, error: str) -> None:
        _log.warning("twopc plugin %s (%s) skipped: %s", origin.plugin, origin.distribution, error)
        self._failures.append(
            PluginFailure(origin.plugin, origin.distribution, origin.version, error)
        )

    def failures(self) -> list[PluginFailure]:
        return list(self._failures)

    def names(self) -> list[str]:
        return sorted(self._specs)

    def spec(self, name: str) -> SinkSpec:
        try:
            return self._specs[name][0]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise BackendNotFoundError(
                f"no twopc backend named {name!r}; installed backends: {known}. "
                "Run `twopc plugins` to see every backend and why one may be unusable"
            ) from None

    def backends(self) -> list[BackendInfo]:
        infos = []
        for name in self.names():
            spec, origin = self._specs[name]
            missing = spec.missing_requirements()
            if spec.unavailable:
                usable, reason = False, spec.unavailable
            elif missing:
                usable, reason = False, _missing_message(spec, missing)
            else:
                usable, reason = True, "ok"
            infos.append(
                BackendInfo(
                    name,
                    origin.plugin,
                    origin.distribution,
                    origin.version,
                    usable,
                    reason,
                    spec.description,
                )
            )
        return infos

    def progress_kinds(self) -> list[str]:
        """The kinds of the progress reporters installed, sorted."""
        return sorted(self._progress)

    def progress_spec(self, kind: str) -> ProgressSpec:
        try:
            return self._progress[kind][0]
        except KeyError:
            known = ", ".join(self.progress_kinds()) or "none"
            raise BackendNotFoundError(
                f"no twopc progress reporter of kind {kind!r}; installed kinds: {known}"
            ) from None

    def create_progress_reporter(
        self, described: Mapping[str, Any], config: Mapping[str, Any] | None = None
    ) -> ProgressReporter:
        """The reporter ``described`` names by its ``kind`` (what its ``describe()``
        recorded), with the client settings ``config``."""
        kind = described.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ConfigurationError(
                f"a progress reporter's description names no kind: {dict(described)!r}"
            )
        reporter = self.progress_spec(kind).load()(described, dict(config or {}))
        if not isinstance(reporter, ProgressReporter):
            raise PluginError(
                f"the {kind} progress reporter's factory returned {type(reporter).__name__}, "
                "not a twopc.ProgressReporter"
            )
        return reporter

    def create_sink(self, backend: str, /, **options: Any) -> Sink[Any]:
        factory = self.spec(backend).load()
        check_options(backend, factory, options)
        sink = factory(**options)
        if not isinstance(sink, Sink):
            raise PluginError(
                f"the {backend} backend's factory returned {type(sink).__name__}, not a twopc.Sink"
            )
        return sink


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _import_factory(label: str, factory: str, install_hint: str | None) -> Callable[..., Any]:
    """The callable ``"module:attribute[.attribute]"`` names."""
    module_name, _, attribute = factory.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendNotInstalledError(
            f"{label} failed to import ({exc})" + (f"; {install_hint}" if install_hint else "")
        ) from exc
    found: Any = module
    for part in attribute.split("."):
        found = getattr(found, part, None)
    if not callable(found):
        raise PluginError(f"{label}'s factory {factory!r} is not callable")
    return cast("Callable[..., Any]", found)


def _missing_message(spec: SinkSpec, missing: Sequence[str]) -> str:
    text = f"the {spec.name} backend needs {', '.join(missing)}"
    return f"{text}: {spec.install_hint}" if spec.install_hint else text


_default_registry: PluginRegistry | None = None
_registry_lock = threading.Lock()


def registry(*, reload: bool = False) -> PluginRegistry:
    """The process-wide registry of installed plugins, discovered on first use."""
    global _default_registry
    with _registry_lock:
        if _default_registry is None or reload:
            _default_registry = PluginRegistry()
        return _default_registry


def create_sink(backend: str, /, **options: Any) -> Sink[Any]:
    """Create a sink by backend name, e.g. ``create_sink("files", path="/out")``.

    Resolve sinks on the driver: the returned object is picklable and is what executors get.
    """
    return registry().create_sink(backend, **options)


def list_backends() -> list[BackendInfo]:
    """Every backend found, usable or not, with the reason."""
    return registry().backends()
