"""Every backend and mode as a test case: a fresh target per test, the input files, a
``foreachBatch`` query through the in-process Spark session, and the exactly-once check read
from the target (``tests.harness.targets``, checked with
``tests.harness.exactly_once.assert_target_exactly_once``), never from twopc's own log."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import twopc
from tests.harness.sink_recipe import SinkRecipe, build_sink
from tests.harness.targets import Target, make_target

CASES = [
    ("files", "parquet"),
    ("postgres", "transaction"),
    ("postgres", "two_phase"),
    ("mysql", "transaction"),
    ("mysql", "two_phase"),
    ("kafka", "per_partition"),
    ("kafka", "atomic"),
]
SCHEMA = "id long, payload string"
ROWS_PER_FILE = 40


def new_target(
    request: pytest.FixtureRequest, backend: str, mode: str, tmp_path: Path, prefix: str = "rq"
) -> tuple[Target, SinkRecipe]:
    """A fresh namespace of ``backend`` (table, topic or directory; ``s3``: a prefix of the
    S3 API's bucket, written by the files sink; ``iceberg``: a table in a warehouse of its
    own, its catalog on SQLite or, mode ``postgres``, on PostgreSQL, or, mode ``rest``, the
    REST catalog) and its sink spec, on
    the services the session's fixtures start."""
    fixtures = {"postgres": "postgres_dsn", "mysql": "mysql_dsn", "kafka": "kafka_bootstrap"}
    keys = {
        "postgres": "POSTGRES_DSN",
        "mysql": "MYSQL_DSN",
        "kafka": "KAFKA_BOOTSTRAP_SERVERS",
    }
    env = {keys[backend]: request.getfixturevalue(fixtures[backend])} if backend in keys else {}
    if backend == "s3":
        env = request.getfixturevalue("s3_store").env()
    if backend == "iceberg" and mode == "postgres":  # the catalog on PostgreSQL
        env = {"POSTGRES_DSN": request.getfixturevalue("postgres_dsn")}
    if backend == "iceberg" and mode == "rest":  # the REST catalog of scripts/services
        env = {"ICEBERG_REST_URI": request.getfixturevalue("iceberg_rest_uri")}
    target = make_target(backend, env, mode if backend == "iceberg" else "")
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    return target, target.prepare(name, mode, tmp_path, kafka_partitions=3)


@pytest.fixture(params=CASES, ids=[f"{b}-{m}" for b, m in CASES])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Target, SinkRecipe]]:
    """Every backend and mode: a fresh target per test, dropped afterwards."""
    target, spec = new_target(request, *request.param, tmp_path)
    yield target, spec
    target.cleanup(spec)


def add_input(directory: Path, index: int) -> set[int]:
    directory.mkdir(parents=True, exist_ok=True)
    ids = range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE)
    lines = [json.dumps({"id": i, "payload": f"p{i}"}) for i in ids]
    path = directory / f"in-{index:04d}.json"
    path.write_text("\n".join(lines) + "\n")
    # Spark's file source takes files in the order of their modification times, which tie
    # for files written within a millisecond: a second apart, file n is batch n.
    stamp = time.time() + index
    os.utime(path, (stamp, stamp))
    return set(ids)


def start_query(
    spark: Any,
    spec: SinkRecipe,
    source: Path,
    checkpoint: Path,
    *,
    partitions: int,
    files_per_trigger: int = 1,
    sink: twopc.Sink[Any] | None = None,
    commit_log: str | None = None,
    faults: str | None = None,
    trigger: dict[str, Any] | None = None,
    retry: twopc.RetryPolicy | None = None,
) -> tuple[Any, twopc.SparkBatchWriter]:
    """Start the query (``availableNow`` unless ``trigger`` says otherwise); returns the
    StreamingQuery and its writer."""
    from pyspark.sql import functions as F

    frame = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", files_per_trigger)
        .json(str(source))
        .repartition(partitions, "id")
    )
    if spec.backend == "kafka":
        frame = frame.withColumn("key", F.col("id").cast("string"))
    writer = twopc.foreach_batch(
        sink or build_sink(spec),
        sink_id=spec.sink_id,
        commit_log=commit_log or spec.commit_log(str(checkpoint)),
        faults=twopc.FaultPlan.parse(faults) if faults else twopc.FaultPlan(),
        retry=retry,
    )
    query = (
        frame.writeStream.option("checkpointLocation", str(checkpoint))
        .foreachBatch(writer)
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )
    return query, writer


def run_query(
    spark: Any,
    spec: SinkRecipe,
    source: Path,
    checkpoint: Path,
    *,
    partitions: int,
    files_per_trigger: int = 1,
    sink: twopc.Sink[Any] | None = None,
    commit_log: str | None = None,
) -> twopc.SparkBatchWriter:
    """Run the query over what ``source`` holds, until it has nothing left."""
    query, writer = start_query(
        spark,
        spec,
        source,
        checkpoint,
        partitions=partitions,
        files_per_trigger=files_per_trigger,
        sink=sink,
        commit_log=commit_log,
    )
    try:
        query.awaitTermination()
    finally:
        writer.close()
    return writer
