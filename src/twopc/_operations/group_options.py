"""A :class:`~twopc.SinkGroup` from command-line options, so that ``twopc status group`` and
``twopc recover group`` can act on a group's batches: they only make driver-side calls,
so the members' projections (Python functions) are not needed, only the members' sinks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twopc._contract.sink_options import typed_options
from twopc.errors import ConfigurationError
from twopc.groups import SinkGroup
from twopc.plugins import create_sink, registry
from twopc.protocol import Sink

__all__ = ["GROUP_BACKEND", "group_from_options", "sink_from_options"]

GROUP_BACKEND = "group"
"""The backend name the command line takes for a group."""


def group_from_options(options: Mapping[str, Any]) -> SinkGroup:
    """The group ``options`` describe: ``members`` maps each member name, in the group's
    order, to ``{"backend": ..., "options": {...}}``; a flat option ``<member>.<option>``
    (from ``--option`` or ``--option-env``, for secrets) sets one option of one member."""
    spec = _members(options.get("members"))
    for key, value in options.items():
        if key == "members":
            continue
        member, dot, option = key.partition(".")
        if not dot or not option or member not in spec:
            raise ConfigurationError(
                f"group option {key!r}: name a member's option as <member>.<option>, for a "
                f"member of 'members' ({', '.join(spec)})"
            )
        spec[member][1][option] = value
    sinks = {}
    for name, (backend, member_options) in spec.items():
        try:
            sinks[name] = sink_from_options(backend, member_options)
        except TypeError as exc:
            raise ConfigurationError(
                f"group member {name!r}: the {backend} backend does not accept these options: {exc}"
            ) from None
    return SinkGroup(sinks)


def sink_from_options(backend: str, options: Mapping[str, Any]) -> Sink[Any]:
    """A backend's sink from command-line options: strings typed as ``format("twopc")``
    types them, from the backend's ``create_sink`` signature. ``TypeError`` for options the
    backend does not take."""
    factory = registry().spec(backend).load()
    return create_sink(backend, **typed_options(backend, factory, options))


def _members(found: object) -> dict[str, tuple[str, dict[str, Any]]]:
    """Member name -> (backend, options), checked."""
    example = '{"members": {"orders": {"backend": "postgres", "options": {...}}, ...}}'
    if not isinstance(found, Mapping) or not found:
        raise ConfigurationError(
            f"a group needs its members as an option (--options-json FILE with {example})"
        )
    members: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, member in found.items():
        backend = member.get("backend") if isinstance(member, Mapping) else None
        options = member.get("options", {}) if isinstance(member, Mapping) else None
        if not isinstance(backend, str) or not isinstance(options, Mapping):
            raise ConfigurationError(
                f"group member {name!r}: give its backend and options as {example}"
            )
        members[str(name)] = (backend, dict(options))
    return members
