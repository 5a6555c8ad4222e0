"""Row serializers the Kafka sink imports by name (``value_serializer="module:factory"``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def versioned_json() -> Callable[[dict[str, Any], str], bytes]:
    """A tiny wire format: a version prefix, the topic, then the row as JSON."""

    def serialize(row: dict[str, Any], topic: str) -> bytes:
        if row["id"] < 0:
            raise ValueError(f"id must not be negative, got {row['id']}")
        return b"v1|" + topic.encode() + b"|" + json.dumps(row, sort_keys=True).encode()

    return serialize
