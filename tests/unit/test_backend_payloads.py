"""The first-party backends' payloads read what earlier versions wrote, and no more."""

from __future__ import annotations

from typing import Any

import pytest

from twopc import Committable, Payload, UnsupportedFormatError
from twopc_jdbc._base import SqlPayload
from twopc_kafka.sink import KafkaPayload

pytestmark = pytest.mark.unit


def committable(payload: dict[str, Any], version: int) -> Committable:
    return Committable("s", "q", 3, 1, 0, payload=payload, version=version)


@pytest.mark.parametrize(
    ("cls", "written", "read"),
    [
        # version 1 said ``skipped`` where the task found its marker; no branch says it now
        (SqlPayload, {"rows": 0, "skipped": True, "gtrid": None, "bqual": None}, SqlPayload(0)),
        (
            SqlPayload,
            {"rows": 5, "skipped": False, "gtrid": "g", "bqual": "b"},
            SqlPayload(5, "g", "b"),
        ),
        (
            KafkaPayload,
            {"transactional_id": "t-s-1", "rows": 0, "skipped": True},
            KafkaPayload("t-s-1", 0),
        ),
    ],
)
def test_version_1_is_read_without_the_skipped_flag(
    cls: type[Payload], written: dict[str, Any], read: Payload
) -> None:
    assert cls.of(committable(written, 1)) == read


@pytest.mark.parametrize(
    "payload", [SqlPayload(7, "g", "b"), SqlPayload(0), KafkaPayload("t-s-1", 7)]
)
def test_the_current_version_round_trips_and_a_newer_one_is_refused(payload: Payload) -> None:
    written = committable(payload.to_json(), payload.version)
    assert payload.version == 2 and "skipped" not in written.payload
    assert type(payload).of(written) == payload
    with pytest.raises(UnsupportedFormatError):
        type(payload).of(committable(payload.to_json(), 3))
