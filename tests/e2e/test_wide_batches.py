"""Wide batches through real Spark (issue 46): ``max_tasks`` runs phase 1 in fewer tasks
(coalesced, or hashed by key for upserts) and the target shows every row once; a
``two_phase`` batch wider than the server allows is refused before any task runs (the
crash tests at 200 partitions are in ``tests/crash/test_wide_batch_crash.py``)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

import twopc
from tests.harness.databases import Database

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def _frame(spark: Any, rows: int, partitions: int) -> Any:
    return spark.range(0, rows, 1, partitions).selectExpr("id", "concat('p', id) AS payload")


def test_max_tasks_writes_a_wide_two_phase_batch_in_fewer_tasks(
    spark: Any, postgres_dsn: str, tmp_path: Path
) -> None:
    db = Database("postgres", postgres_dsn)
    table = f"wide_{uuid.uuid4().hex[:8]}"
    db.create(table)
    try:
        sink = twopc.create_sink(
            "postgres", dsn=postgres_dsn, table=table, transaction_mode="two_phase"
        )
        sink_id = f"wide-{uuid.uuid4().hex[:8]}"
        metrics = twopc.write_batch(
            _frame(spark, 3_000, 90),  # wider than the server's 64 prepared transactions
            sink,
            sink_id,
            write_id="w1",
            commit_log=str(tmp_path / "log"),
            max_tasks=4,
        )
        assert metrics.status == "committed" and metrics.partitions == 4
        assert db.ids(table) == Counter(range(3_000))
        assert db.prepared(sink_id) == []
    finally:
        db.drop(table)


def test_max_tasks_hashes_an_upsert_by_its_keys_into_that_many_tasks(
    spark: Any, postgres_dsn: str, tmp_path: Path
) -> None:
    db = Database("postgres", postgres_dsn)
    table = f"wideup_{uuid.uuid4().hex[:8]}"
    db.query(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, payload VARCHAR(40))")
    try:
        sink = twopc.create_sink(
            "postgres",
            dsn=postgres_dsn,
            table=table,
            mode="upsert",
            key_columns=["id"],
            transaction_mode="two_phase",
        )
        spark.conf.set("spark.sql.shuffle.partitions", "50")
        try:
            metrics = twopc.write_batch(
                _frame(spark, 2_000, 7),
                sink,
                f"wideup-{uuid.uuid4().hex[:8]}",
                write_id="w1",
                commit_log=str(tmp_path / "log"),
                max_tasks=3,
            )
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", "2")
        assert metrics.partitions == 3  # hashed by key into max_tasks, not 50
        assert db.ids(table) == Counter(range(2_000))
    finally:
        db.drop(table)


def test_max_tasks_coalesces_the_files_sinks_spark_write(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = twopc.create_sink("files", path=str(out), format="parquet")
    metrics = twopc.write_batch(
        _frame(spark, 4_000, 40), sink, "wide-files", write_id="w1", max_tasks=3
    )
    assert metrics.partitions == 3
    dataset = ds.dataset(str(out), format="parquet", exclude_invalid_files=True)
    assert len(dataset.files) == 3
    assert Counter(dataset.to_table(columns=["id"])["id"].to_pylist()) == Counter(range(4_000))
