"""Kafka's rule for topic names, checked before any topic is looked up: a name the broker
would refuse must not be reported as a topic that "does not exist"."""

from __future__ import annotations

import re

__all__ = ["MAX_TOPIC_LENGTH", "shown", "topic_name_problem"]

MAX_TOPIC_LENGTH = 249
"""Kafka's limit on a topic name's length (``Topic.MAX_NAME_LENGTH``)."""
_LEGAL = re.compile(r"[A-Za-z0-9._-]")
_RULE = (
    "Kafka allows ASCII letters, digits, '.', '_' and '-', 1 to "
    f"{MAX_TOPIC_LENGTH} characters, and neither '.' nor '..'"
)


def topic_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid Kafka topic name, with Kafka's rule; ``None`` if it is."""
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a string"
    if not name:
        why = "it is empty"
    elif name in (".", ".."):
        why = f"{name!r} is reserved"
    elif len(name) > MAX_TOPIC_LENGTH:
        why = f"it has {len(name)} characters"
    else:
        illegal = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        if not illegal:
            return None
        why = f"it contains {', '.join(repr(c) for c in illegal)}"
    return f"{why} ({_RULE})"


def shown(name: str) -> str:
    """``name`` for a message: quoted, and cut short when it is very long."""
    return repr(name) if len(name) <= 60 else repr(name[:40]) + f"... ({len(name)} characters)"
