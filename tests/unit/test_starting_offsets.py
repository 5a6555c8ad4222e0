"""``twopc.starting_offsets``: the offsets each batch stores with its output, the newest
whole batch as the start of a query on a new checkpoint, and every unsafe case refused.

Runs on the local engine with a stream whose offsets look like a Kafka source's
(``LocalStream(kafka_topic=...)``), into the memory task sink (offsets with each partition's
marker) and the files sink (offsets in the commit log's decisions, kept with the output).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from tests.harness.exactly_once import assert_exactly_once
from twopc import local
from twopc.faults import FaultPlan
from twopc.testing import (
    MemoryDriverSink,
    MemoryLastResource,
    MemoryTaskSink,
    forget_store,
    memory_store,
)

pytestmark = pytest.mark.unit

TOPIC = "orders"


def _partition(start: int, rows: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + rows), pa.int64())})


def _batches(
    count: int, partitions: int = 2, rows: int = 3, first: int = 0
) -> list[list[pa.Table]]:
    """``count`` batches of ``partitions`` partitions; ids numbered through, from ``first``."""
    found, next_id = [], first
    for _ in range(count):
        batch = []
        for _ in range(partitions):
            batch.append(_partition(next_id, rows))
            next_id += rows
        found.append(batch)
    return found


@pytest.fixture
def store_name() -> Iterator[str]:
    forget_store("offsets")
    yield "offsets"
    forget_store("offsets")


def _run(sink: twopc.Sink, checkpoint: Path, batches, *, faults=None, start=None) -> None:
    stream = local.LocalStream(str(checkpoint), batches, kafka_topic=TOPIC, starting_offsets=start)
    stream.run(local.foreach_batch(sink, "out", faults=faults, processes=False))


def test_the_start_is_the_end_of_the_newest_batch(store_name: str, tmp_path: Path) -> None:
    sink = MemoryTaskSink(store_name)
    _run(sink, tmp_path / "ck", _batches(3))
    # two partitions of 3 rows per batch: each partition is at 9 after three batches
    assert json.loads(twopc.starting_offsets(sink, "out")) == {TOPIC: {"0": 9, "1": 9}}
    assert twopc.starting_offsets(sink, "out", topics=[TOPIC]) == '{"orders":{"0":9,"1":9}}'


def test_a_new_checkpoint_from_the_start_writes_every_id_once(
    store_name: str, tmp_path: Path
) -> None:
    sink = MemoryTaskSink(store_name)
    everything = _batches(5)
    _run(sink, tmp_path / "ck", everything[:3])
    start = json.loads(twopc.starting_offsets(sink, "out"))[TOPIC]
    # the checkpoint is gone: a new query (new id, batch 0) reads on from the stored offsets
    _run(sink, tmp_path / "new", everything[3:], start={int(p): o for p, o in start.items()})
    ids = Counter(memory_store(store_name).visible)
    assert_exactly_once(ids, set(range(30)))
    assert json.loads(twopc.starting_offsets(sink, "out")) == {TOPIC: {"0": 15, "1": 15}}


def test_a_partly_committed_batch_is_refused_until_its_replay_finishes_it(
    store_name: str, tmp_path: Path
) -> None:
    sink = MemoryTaskSink(store_name)
    batches = _batches(3)
    plan = FaultPlan.parse("before_task_commit:raise@batch=2,partition=1")
    with pytest.raises(twopc.TwoPCError):
        _run(sink, tmp_path / "ck", batches, faults=plan)
    with pytest.raises(twopc.UnsafeStartError) as refused:
        twopc.starting_offsets(sink, "out")
    message = str(refused.value)
    assert "batch 2" in message and "partitions 0 but not in 1 (of 2)" in message
    assert "twopc recover" in message
    _run(sink, tmp_path / "ck", batches)  # the old checkpoint replays batch 2: whole now
    assert json.loads(twopc.starting_offsets(sink, "out")) == {TOPIC: {"0": 9, "1": 9}}


def test_other_topics_another_sink_id_and_nothing_stored_are_refused(
    store_name: str, tmp_path: Path
) -> None:
    sink = MemoryTaskSink(store_name)
    with pytest.raises(twopc.NoStoredOffsetsError, match="no committed batch of sink id 'out'"):
        twopc.starting_offsets(sink, "out")
    _run(sink, tmp_path / "ck", _batches(1))
    with pytest.raises(twopc.OffsetsMismatchError, match=r"topic\(s\) orders.*reads payments"):
        twopc.starting_offsets(sink, "out", topics=["payments"])
    with pytest.raises(twopc.NoStoredOffsetsError, match="sink id 'other'"):
        twopc.starting_offsets(sink, "other")


def test_a_source_that_is_not_kafka_stores_no_offsets(store_name: str, tmp_path: Path) -> None:
    sink = MemoryTaskSink(store_name)
    local.LocalStream(str(tmp_path / "ck"), _batches(2)).run(
        local.foreach_batch(sink, "out", processes=False)
    )
    with pytest.raises(twopc.NoStoredOffsetsError, match="source is not Kafka"):
        twopc.starting_offsets(sink, "out")


def test_the_newest_query_of_the_sink_id_wins(store_name: str, tmp_path: Path) -> None:
    sink = MemoryTaskSink(store_name)
    everything = _batches(6)
    _run(sink, tmp_path / "first", everything[:4])
    start = json.loads(twopc.starting_offsets(sink, "out"))[TOPIC]
    # the second query is newer and has fewer batches: its batch 0 is where output ends
    _run(sink, tmp_path / "second", everything[4:5], start={int(p): o for p, o in start.items()})
    assert json.loads(twopc.starting_offsets(sink, "out")) == {TOPIC: {"0": 15, "1": 15}}


def test_files_keep_the_offsets_in_their_commit_log(tmp_path: Path) -> None:
    sink = twopc.create_sink("files", path=str(tmp_path / "out"), format="parquet")
    _run(sink, tmp_path / "ck", _batches(2))
    assert json.loads(twopc.starting_offsets(sink, "out")) == {TOPIC: {"0": 6, "1": 6}}


def test_files_refuse_while_a_decided_batch_waits_for_recovery(tmp_path: Path) -> None:
    sink = twopc.create_sink("files", path=str(tmp_path / "out"), format="parquet")
    plan = FaultPlan.parse("after_decision:raise@batch=1")
    with pytest.raises(twopc.TwoPCError):
        _run(sink, tmp_path / "ck", _batches(2), faults=plan)
    with pytest.raises(twopc.UnsafeStartError, match=r"batch 1 of query .*twopc recover"):
        twopc.starting_offsets(sink, "out")
    # the writer that failed is this process, alive: recovery must be forced
    log = twopc.CommitLog(str(tmp_path / "out/_twopc/out"))
    report = twopc.recover_sink(sink, "out", log, force=True)
    assert report.ok, report
    assert json.loads(twopc.starting_offsets(sink, "out")) == {TOPIC: {"0": 6, "1": 6}}


def test_the_decision_records_the_offsets_once(tmp_path: Path) -> None:
    sink = twopc.create_sink("files", path=str(tmp_path / "out"), format="parquet")
    _run(sink, tmp_path / "ck", _batches(1))
    (decision,) = (tmp_path / "out/_twopc/out").rglob("*.decision*")
    body = json.loads(decision.read_text())
    assert body["source_offsets"] == {"batch_id": 0, "topics": {TOPIC: {"0": 3, "1": 3}}}
    assert all("source_offsets" not in c for c in body["committables"])


def test_a_group_starts_where_every_member_ends(tmp_path: Path) -> None:
    forget_store("group-a")
    forget_store("group-b")
    try:
        group = twopc.SinkGroup(
            {
                "task": twopc.Member(MemoryLastResource("group-a")),
                "driver": twopc.Member(MemoryDriverSink("group-b")),
            }
        )
        checkpoint = tmp_path / "ck"
        stream = local.LocalStream(str(checkpoint), _batches(2), kafka_topic=TOPIC)
        log = str(tmp_path / "log")
        stream.run(local.foreach_batch(group, "both", commit_log=log, processes=False))
        # the driver-commit member keeps no offsets of its own: the group's commit log does
        with pytest.raises(twopc.NoStoredOffsetsError, match="commit_log="):
            twopc.starting_offsets(group, "both")
        start = twopc.starting_offsets(group, "both", commit_log=log)
        assert json.loads(start) == {TOPIC: {"0": 6, "1": 6}}
    finally:
        forget_store("group-a")
        forget_store("group-b")


def test_the_commit_log_confirms_a_batch_that_ran_fewer_partitions_than_planned(
    store_name: str, tmp_path: Path
) -> None:
    sink = MemoryTaskSink(store_name)
    checkpoint = tmp_path / "ck"
    stream = local.LocalStream(str(checkpoint), _batches(2), kafka_topic=TOPIC)
    log = str(tmp_path / "log")
    stream.run(local.foreach_batch(sink, "out", commit_log=log, processes=False))
    # as adaptive execution leaves it: 3 partitions planned (and stored), 2 ran
    store = memory_store(store_name)
    for key, (batch_id, _, offsets, at) in list(store.offsets.items()):
        store.offsets[key] = (batch_id, 3, offsets, at)
    with pytest.raises(twopc.UnsafeStartError, match="adaptive query execution ran the batch"):
        twopc.starting_offsets(sink, "out")
    # the query's decision says every partition that ran committed
    start = twopc.starting_offsets(sink, "out", commit_log=log)
    assert json.loads(start) == {TOPIC: {"0": 6, "1": 6}}


def test_twopc_offsets_prints_the_start_and_refuses_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from twopc.cli import main

    out = tmp_path / "out"
    sink = twopc.create_sink("files", path=str(out), format="parquet")
    plan = FaultPlan.parse("after_decision:raise@batch=2")
    with pytest.raises(twopc.TwoPCError):
        _run(sink, tmp_path / "ck", _batches(3), faults=plan)
    args = ["offsets", "files", "--sink-id", "out", "--option", f"path={out}"]

    assert main(args) == 2  # batch 2 is decided, not finished
    assert "twopc recover" in capsys.readouterr().err
    # the writer that failed is this process, alive: recovery must be forced
    assert main(["recover", "files", "--sink-id", "out", "--option", f"path={out}", "--force"]) == 0
    capsys.readouterr()

    assert main([*args, "--topic", TOPIC]) == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out) == {TOPIC: {"0": 9, "1": 9}}
    assert "after batch 2 of query" in printed.err
    assert main([*args, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["batch_id"], shown["starting_offsets"]) == (2, {TOPIC: {"0": 9, "1": 9}})
    assert main([*args, "--topic", "payments"]) == 2
    assert "reads payments" in capsys.readouterr().err
