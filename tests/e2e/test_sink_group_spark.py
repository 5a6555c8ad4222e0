"""A SinkGroup on real Spark: a streaming query and a batch write, each writing two files
targets (Parquet through Spark's own writer, JSON through Python tasks) from one batch
with one decision, read back with Spark. The crash matrix of groups is in tests/crash."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import twopc
from tests.e2e.orders_stream import run_orders_stream
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.spark_fixtures import write_orders

pytestmark = [pytest.mark.e2e]


def _group(root: Path) -> twopc.SinkGroup:
    return twopc.SinkGroup(
        {
            "orders": twopc.Member(
                twopc.create_sink("files", path=str(root / "orders"), format="parquet"),
                project=lambda df: df.select("id", "amount"),
            ),
            "audit": twopc.Member(
                twopc.create_sink(
                    "files", path=str(root / "audit"), format="json", write_path="python"
                ),
                project=lambda df: df.selectExpr("id", "concat('order ', customer) AS event"),
            ),
        }
    )


def _read(spark: Any, root: Path) -> dict[str, tuple[Counter[int], list[str]]]:
    found = {}
    for member, reader in (("orders", spark.read.parquet), ("audit", spark.read.json)):
        frame = reader(str(root / member))
        ids = Counter(int(r["id"]) for r in frame.select("id").collect())
        found[member] = (ids, frame.columns)
    return found


def test_a_query_writes_each_member_its_projection_once(spark: Any, tmp_path: Path) -> None:
    expected = write_orders(tmp_path / "in", batches=3, rows_per_batch=100)
    writer = twopc.foreach_batch(_group(tmp_path / "out"), sink_id="orders-with-audit")
    run_orders_stream(spark, tmp_path / "in", tmp_path / "chk", writer)

    found = _read(spark, tmp_path / "out")
    assert_exactly_once(found["orders"][0], expected)
    assert_exactly_once(found["audit"][0], expected)
    assert sorted(found["orders"][1]) == ["amount", "id"]
    assert sorted(found["audit"][1]) == ["event", "id"]
    assert [(m.batch_id, m.status, m.rows) for m in writer.metrics] == [
        (0, "committed", 200),
        (1, "committed", 200),
        (2, "committed", 200),
    ]  # rows: every member's, 100 each


def test_a_batch_write_of_a_group_is_written_once(spark: Any, tmp_path: Path) -> None:
    expected = write_orders(tmp_path / "in", batches=1, rows_per_batch=50)
    df = spark.read.json(str(tmp_path / "in"))
    group = _group(tmp_path / "out")
    log = str(tmp_path / "log")
    first = twopc.write_batch(df, group, "orders-with-audit", write_id="run-1", commit_log=log)
    again = twopc.write_batch(df, group, "orders-with-audit", write_id="run-1", commit_log=log)
    assert (first.status, again.status) == ("committed", "skipped")
    found = _read(spark, tmp_path / "out")
    assert_exactly_once(found["orders"][0], expected)
    assert_exactly_once(found["audit"][0], expected)


@pytest.mark.integration
def test_a_batch_write_of_a_table_and_a_kafka_last_resource(
    spark: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``write_batch`` of PostgreSQL ``two_phase`` + Kafka ``atomic`` (the last resource):
    each target read back (SQL, a ``read_committed`` consumer) holds every id once, and the
    write again with the same write id writes nothing."""
    from pyspark.sql import functions as F

    from tests.harness.backend_cases import new_target
    from tests.harness.sink_recipe import build_sink

    table, table_spec = new_target(request, "postgres", "two_phase", tmp_path / "t", "gk")
    topic, topic_spec = new_target(request, "kafka", "atomic", tmp_path / "k", "gk")
    try:
        expected = write_orders(tmp_path / "in", batches=1, rows_per_batch=50)
        df = spark.read.json(str(tmp_path / "in")).repartition(2)
        group = twopc.SinkGroup(
            {
                "events": twopc.Member(
                    build_sink(topic_spec),
                    project=lambda d: d.select(
                        "id", "amount", F.col("id").cast("string").alias("key")
                    ),
                ),
                "orders": twopc.Member(
                    build_sink(table_spec),
                    project=lambda d: d.selectExpr("id", "customer AS payload"),
                ),
            }
        )
        log = str(tmp_path / "log")
        sink_id = table_spec.sink_id
        first = twopc.write_batch(df, group, sink_id, write_id="run-1", commit_log=log)
        again = twopc.write_batch(df, group, sink_id, write_id="run-1", commit_log=log)
        assert (first.status, again.status) == ("committed", "skipped")
        member_ids = {"events": f"{sink_id}.events", "orders": f"{sink_id}.orders"}
        for target, spec, name in ((table, table_spec, "orders"), (topic, topic_spec, "events")):
            renamed = dataclasses.replace(spec, sink_id=member_ids[name])
            assert_exactly_once(target.committed(renamed), expected)
            assert target.leftovers(renamed) == []
    finally:
        table.cleanup(table_spec)
        topic.cleanup(topic_spec)
