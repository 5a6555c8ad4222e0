"""Sink options given as strings (``.option("table", "orders")`` on a Spark writer), typed
the way :func:`twopc.create_sink` would receive them, from the backend factory's signature.

Spark hands a data source its options as strings, with lower-cased keys on some paths. A
string becomes the parameter's annotated type: ``bool`` (``true``/``false``), ``int``,
``float``, a list (a JSON array, or comma-separated names), a dict (a JSON object), or stays
a string. An option the factory does not take is refused with the names it does take.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from twopc._contract.signature import annotation_kind, is_option, parameters_of, unknown_option
from twopc.errors import ConfigurationError
from twopc.plugins import registry
from twopc.protocol import Sink

__all__ = [
    "FORMAT_OWN_OPTIONS",
    "FORMAT_SPARK_OPTIONS",
    "PROGRESS_PREFIX",
    "backend_options",
    "json_object",
    "sink_from_options",
    "typed_options",
]

FORMAT_OWN_OPTIONS = (
    "sink",
    "sink_id",
    "commit_log",
    "commit_log_options",
    "write_id",
    "faults",
    "speculation",
    "commit_parallelism",
)
"""``format("twopc")``'s own options (lower case): never passed to the backend."""
FORMAT_SPARK_OPTIONS = ("checkpointlocation",)
"""Spark's options a ``format("twopc")`` writer sees among its own (lower case)."""
PROGRESS_PREFIX = "progress_"
"""``format("twopc")`` options of the progress reporter start with it."""

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def typed_options(
    backend: str, factory: Callable[..., Any], options: Mapping[str, str]
) -> dict[str, Any]:
    """``options`` as keyword arguments for ``factory``: names matched case-insensitively
    against its parameters, values converted to their annotated types."""
    parameters = parameters_of(factory)
    by_lower = {name.lower(): name for name in parameters}
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    typed: dict[str, Any] = {}
    for key, value in options.items():
        name = by_lower.get(key.lower())
        if name is None:
            if accepts_any:
                typed[key] = value
                continue
            known = sorted(n for n, p in parameters.items() if is_option(p))
            raise ConfigurationError(unknown_option(backend, key, known))
        typed[name] = _convert(backend, name, value, parameters[name].annotation)
    missing = [
        name
        for name, parameter in parameters.items()
        if is_option(parameter)
        and parameter.default is inspect.Parameter.empty
        and name not in typed
    ]
    if missing:
        raise ConfigurationError(
            f"the {backend} backend needs the option(s) {', '.join(map(repr, missing))}"
        )
    return typed


def backend_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``format("twopc")`` options that go to the backend's factory: all but twopc's
    own, Spark's ``checkpointLocation`` and the ``progress_*`` options."""
    return {
        key: value
        for key, value in options.items()
        if key.lower() not in FORMAT_OWN_OPTIONS
        and key.lower() not in FORMAT_SPARK_OPTIONS
        and not key.lower().startswith(PROGRESS_PREFIX)
    }


def sink_from_options(backend: str, options: Mapping[str, str]) -> Sink[Any]:
    """The sink ``format("twopc")`` builds from its options: ``backend``'s factory from the
    plugin registry, called with :func:`backend_options` typed by :func:`typed_options`.
    The conformance kit builds it the same way to check that a plugin's options describe
    the sink its ``sink_factory`` makes."""
    factory = registry().spec(backend).load()
    typed = typed_options(backend, factory, backend_options(options))
    return registry().create_sink(backend, **typed)


def _convert(backend: str, name: str, value: Any, annotation: Any) -> Any:
    if not isinstance(value, str):
        return value  # given typed already (write_batch, tests)
    kind, optional = annotation_kind(annotation)
    if optional and value.strip().lower() in ("", "none", "null"):
        return None
    converters = (
        (("bool",), _bool),
        (("int",), int),
        (("float",), float),
        (("dict", "Mapping"), json_object),
        (("Sequence", "list", "tuple"), _names),
    )
    convert = next((f for prefixes, f in converters if kind.startswith(prefixes)), None)
    if convert is None:
        return value
    try:
        return convert(value)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"the {backend} backend's option {name!r} ({kind}) cannot take {value!r}: {exc}"
        ) from exc


def _bool(value: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("use true or false")


def json_object(value: str) -> dict[str, Any]:
    """A JSON object from text; ValueError for anything else."""
    parsed = json.loads(value)
    if not isinstance(parsed, dict):
        raise ValueError("expected a JSON object")
    return parsed


def _names(value: str) -> list[Any]:
    text = value.strip()
    if text.startswith("["):
        parsed = json.loads(text)
        if not isinstance(parsed, list):
            raise ValueError("expected a JSON array")
        return parsed
    return [part.strip() for part in text.split(",") if part.strip()]
