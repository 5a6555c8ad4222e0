"""The Iceberg sink keeps each batch's source offsets in its marker (the table property and
the snapshot summary, one catalog commit with the data); ``twopc.starting_offsets`` reads
them back. pyiceberg's SQL catalog on SQLite, the local engine, a stream whose offsets look
like a Kafka source's; every check reads the table (a scan, its properties, its
snapshots)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.iceberg import ids, load
from tests.harness.offset_streams import TOPIC, batches, run_stream

pytest.importorskip("pyiceberg")

pytestmark = pytest.mark.integration

TABLE = "db.orders"


def _batches(count: int) -> list[list[pa.Table]]:
    return batches(count)


def _sink(warehouse: Path) -> twopc.Sink:
    return twopc.create_sink(
        "iceberg", table=TABLE, warehouse=str(warehouse), create_table=True, write_path="python"
    )


def _run(sink, checkpoint: Path, data, *, faults=None, start=None) -> None:
    log = str(checkpoint) + "-log"
    run_stream(sink, "orders-out", checkpoint, data, faults=faults, start=start, commit_log=log)


def test_the_snapshot_and_the_property_keep_the_offsets(tmp_path: Path) -> None:
    sink = _sink(tmp_path / "warehouse")
    everything = _batches(5)
    _run(sink, tmp_path / "first", everything[:3])
    table = load(tmp_path / "warehouse", TABLE)
    newest = table.current_snapshot()
    assert newest is not None and newest.summary is not None
    summary = newest.summary.additional_properties
    assert json.loads(summary["twopc.source-offsets"])["topics"] == {TOPIC: {"0": 9, "1": 9}}
    assert summary["twopc.partition-count"] == "2"
    (marker,) = [v for k, v in table.properties.items() if k.startswith("twopc.committed.")]
    assert json.loads(marker)["offsets"]["topics"] == {TOPIC: {"0": 9, "1": 9}}

    start = json.loads(twopc.starting_offsets(sink, "orders-out", topics=[TOPIC]))
    assert start == {TOPIC: {"0": 9, "1": 9}}
    # the checkpoint is gone: a new query starts where the table's output ends
    _run(sink, tmp_path / "new", everything[3:], start=start[TOPIC])
    assert_exactly_once(ids(tmp_path / "warehouse", TABLE), set(range(30)))
    assert json.loads(twopc.starting_offsets(sink, "orders-out")) == {TOPIC: {"0": 15, "1": 15}}


def test_a_decided_batch_waits_for_recovery_then_is_the_start(tmp_path: Path) -> None:
    sink = _sink(tmp_path / "warehouse")
    with pytest.raises(twopc.TwoPCError):
        _run(sink, tmp_path / "ck", _batches(3), faults="after_decision:raise@batch=2")
    with pytest.raises(twopc.UnsafeStartError, match=r"batch 2 of query .*twopc recover"):
        twopc.starting_offsets(sink, "orders-out")
    log = twopc.CommitLog(str(tmp_path / "ck") + "-log")
    assert twopc.recover_sink(sink, "orders-out", log, force=True).ok
    assert json.loads(twopc.starting_offsets(sink, "orders-out")) == {TOPIC: {"0": 9, "1": 9}}
    assert_exactly_once(ids(tmp_path / "warehouse", TABLE), set(range(18)))


def test_the_summaries_stand_in_for_a_removed_property(tmp_path: Path) -> None:
    sink = _sink(tmp_path / "warehouse")
    _run(sink, tmp_path / "ck", _batches(2))
    table = load(tmp_path / "warehouse", TABLE)
    with table.transaction() as txn:
        txn.remove_properties(*[k for k in table.properties if k.startswith("twopc.committed.")])
    assert json.loads(twopc.starting_offsets(sink, "orders-out")) == {TOPIC: {"0": 6, "1": 6}}
