"""The Kafka sink keeps each batch's source offsets in its commit markers (the marker group's
offset metadata, committed in the batch's transaction); ``twopc.starting_offsets`` reads
them back. A real broker, the local engine, a stream whose offsets look like a Kafka
source's; every check reads the broker: the output topic with a ``read_committed``
consumer, the marker groups' committed offsets and their metadata."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

import twopc
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.kafka_topics import admin, create_topic, read_messages, unique
from tests.harness.offset_streams import TOPIC as SOURCE
from tests.harness.offset_streams import batches, run_stream

pytestmark = pytest.mark.integration


def _batches(count: int) -> list[list[pa.Table]]:
    return batches(count, key=True)


def _run(sink, sink_id: str, checkpoint: Path, data, *, faults=None, start=None) -> None:
    log = str(checkpoint) + "-log"
    run_stream(sink, sink_id, checkpoint, data, faults=faults, start=start, commit_log=log)


def _keys(bootstrap: str, topic: str) -> Counter[int]:
    return Counter(int(m.text_key) for m in read_messages(bootstrap, topic))


@pytest.mark.parametrize("mode", ["per_partition", "atomic"])
def test_a_new_checkpoint_from_the_markers_writes_every_record_once(
    kafka_bootstrap: str, tmp_path: Path, mode: str
) -> None:
    topic = create_topic(kafka_bootstrap, unique("offsets-out"), partitions=2)
    prefix, sink_id = unique("so"), unique("out")
    sink = twopc.create_sink(
        "kafka",
        bootstrap_servers=kafka_bootstrap,
        topic=topic,
        mode=mode,
        key_column="key",
        transactional_id_prefix=prefix,
    )
    everything = _batches(5)
    _run(sink, sink_id, tmp_path / "first", everything[:3])
    start = json.loads(twopc.starting_offsets(sink, sink_id, topics=[SOURCE]))
    assert start == {SOURCE: {"0": 9, "1": 9}}
    # partition 0's marker group holds them, in its committed offset's metadata
    query_id = (tmp_path / "first" / "metadata").read_text()
    group = f"{prefix}.{sink_id}.{json.loads(query_id)['id']}.p0"
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(sink.marker_topic, 0)])
    client = admin(kafka_bootstrap)  # kept: a collected client never answers its futures
    result = client.list_consumer_group_offsets([request])[group].result(30)
    (marker,) = result.topic_partitions
    assert marker.offset == 3  # the newest batch, 2, plus one
    kept = json.loads(marker.metadata)
    assert (kept["batch_id"], kept["partitions"]) == (2, 2 if mode == "per_partition" else 1)
    assert kept["offsets"]["topics"] == {SOURCE: {"0": 9, "1": 9}}

    _run(sink, sink_id, tmp_path / "new", everything[3:], start=start[SOURCE])
    assert_exactly_once(_keys(kafka_bootstrap, topic), set(range(30)))
    assert json.loads(twopc.starting_offsets(sink, sink_id)) == {SOURCE: {"0": 15, "1": 15}}


def test_a_batch_committed_in_one_partition_is_refused_until_its_replay(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique("offsets-out"), partitions=2)
    sink_id = unique("out")
    sink = twopc.create_sink(
        "kafka",
        bootstrap_servers=kafka_bootstrap,
        topic=topic,
        key_column="key",
        transactional_id_prefix=unique("so"),
    )
    batches = _batches(3)
    with pytest.raises(twopc.TwoPCError):
        _run(
            sink,
            sink_id,
            tmp_path / "ck",
            batches,
            faults="before_task_commit:raise@batch=2,partition=1",
        )
    with pytest.raises(twopc.UnsafeStartError, match=r"partitions 0 but not in 1 \(of 2\)"):
        twopc.starting_offsets(sink, sink_id)
    _run(sink, sink_id, tmp_path / "ck", batches)
    assert json.loads(twopc.starting_offsets(sink, sink_id)) == {SOURCE: {"0": 9, "1": 9}}
    assert_exactly_once(_keys(kafka_bootstrap, topic), set(range(18)))
