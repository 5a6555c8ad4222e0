"""The marker log's record format: written and read back, other formats refused, foreign
records ignored (the read side of ``twopc_kafka._marker_log``; the broker side is in
``tests/integration/test_kafka_sink.py``)."""

from __future__ import annotations

import json

import pytest

from twopc_kafka._marker_log import LoggedMarker, _parse, _restored_metadata, marker_record

GROUP = "twopc.orders.q1.p3"


def test_a_record_reads_back_as_written() -> None:
    key, value = marker_record(GROUP, "q1", 3, 41)
    assert _parse(key, value, "twopc.orders.q1.p") == LoggedMarker(GROUP, "q1", 3, 41)


def test_records_of_other_queries_and_tombstones_are_ignored() -> None:
    key, value = marker_record(GROUP, "q1", 3, 41)
    assert _parse(key, value, "twopc.orders.q2.p") is None
    assert _parse(key, None, "twopc.orders.q1.p") is None
    assert _parse(key, b"not json", "twopc.orders.q1.p") is None


@pytest.mark.parametrize("version", [0, 2])
def test_a_record_of_another_format_is_refused_not_guessed(version: int) -> None:
    key, value = marker_record(GROUP, "q1", 3, 41)
    body = {**json.loads(value), "format": version}
    if version == 0:
        del body["format"]
    with pytest.raises(ValueError, match=f"has format {version}, this twopc reads format 1"):
        _parse(key, json.dumps(body).encode(), "twopc.orders.q1.p")


def test_a_record_keeps_the_marker_metadata_and_a_restore_writes_it_back() -> None:
    """The marker's metadata (partition count, source offsets) goes into the log record,
    so that a marker restored from the log still tells where the batch's source ended."""
    metadata = json.dumps(
        {"query_id": "q1", "batch_id": 41, "partitions": 4, "at": 1.5, "offsets": {"t": 1}}
    )
    key, value = marker_record(GROUP, "q1", 0, 41, metadata)
    logged = _parse(key, value, "twopc.orders.q1.p")
    assert logged == LoggedMarker(GROUP, "q1", 0, 41, metadata)
    restored = json.loads(_restored_metadata(logged))
    assert restored == {**json.loads(metadata), "restored": True}


def test_a_record_without_metadata_restores_the_batch_alone() -> None:
    """Records of twopc before 0.3.0 keep no metadata."""
    key, value = marker_record(GROUP, "q1", 3, 41)
    logged = _parse(key, value, "twopc.orders.q1.p")
    assert logged is not None and logged.metadata is None
    restored = json.loads(_restored_metadata(logged))
    assert restored == {"query_id": "q1", "batch_id": 41, "restored": True}
