"""Every backend and mode behind one in-process Spark ``foreachBatch`` query, read back from
the real system.

A test asks for the ``backend`` fixture with ``indirect=True`` and one of :data:`BACKENDS`;
it gets a :class:`BackendRun`: a fresh namespace (output directory, table or topic) made by
the chaos campaign's targets (``tests/harness/targets.py``), a writer factory, and the
checks those targets read from the system (ids a reader sees, leftovers a crash may leave:
staged files, prepared transactions, staging tables, open Kafka transactions).

Input is JSON files, one per micro-batch (``maxFilesPerTrigger=1``): rows ``{"id", "payload"}``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

import twopc
from tests.harness.databases import Database
from tests.harness.sink_recipe import SinkRecipe, build_sink
from tests.harness.sql_sink_cases import MODES
from tests.harness.targets import FilesTarget, KafkaTarget, SqlTarget, Target

BACKENDS = (
    "files",
    "postgres-transaction",
    "postgres-two_phase",
    "mysql-transaction",
    "mysql-two_phase",
    "kafka-per_partition",
    "kafka-atomic",
)
"""``backend-mode`` names; files has one mode (its format). SQL sinks append."""

SQL_UPSERTS = tuple(f"{db}-{tm}-upsert" for db in ("postgres", "mysql") for tm in MODES)
"""The SQL sinks upserting on ``id`` (the table gets that primary key; MySQL stages rows
in a table of its own)."""

SCHEMA = "id long, payload string"


@dataclass
class BackendRun:
    """One backend in one mode, in a namespace of its own."""

    name: str
    target: Target
    spec: SinkRecipe
    tmp_path: Path
    upsert: bool = False

    @property
    def sink_id(self) -> str:
        return self.spec.sink_id

    def writer(
        self,
        *,
        faults: str | None = None,
        commit_log: str | None = None,
        retry: twopc.RetryPolicy | None = None,
    ) -> twopc.SparkBatchWriter:
        """A fresh sink and writer; the commit log defaults to one shared by every query of
        the test (``<tmp>/log``), so a new checkpoint finds the old query's decisions."""
        sink = build_sink(self.spec)
        if self.upsert:
            sink = twopc.create_sink(
                self.spec.backend,
                dsn=self.spec.address,
                table=self.spec.table,
                mode="upsert",
                key_columns=["id"],
                transaction_mode=self.spec.mode,
            )
        return twopc.foreach_batch(
            sink,
            self.sink_id,
            commit_log=commit_log or (None if self.spec.backend == "files" else self.log_url),
            faults=twopc.FaultPlan.parse(faults) if faults else None,
            retry=retry,
        )

    @property
    def log_url(self) -> str:
        return str(self.tmp_path / "log")

    def committed(self) -> Counter[int]:
        """Every id a reader of the target sees, with how often."""
        return self.target.committed(self.spec)

    def leftovers(self) -> list[str]:
        """Staged files, prepared transactions, staging tables, open Kafka transactions."""
        return self.target.leftovers(self.spec)


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendRun]:
    """A :class:`BackendRun` for ``request.param`` (one of :data:`BACKENDS` or
    :data:`SQL_UPSERTS`)."""
    name: str = request.param
    kind, _, mode = name.partition("-")
    mode, _, write = mode.partition("-")
    target: Target
    if kind == "files":
        target, mode = FilesTarget(), "parquet"
    elif kind == "kafka":
        target = KafkaTarget(request.getfixturevalue("kafka_bootstrap"))
    else:
        dsn = request.getfixturevalue("postgres_dsn" if kind == "postgres" else "mysql_dsn")
        target = SqlTarget(kind, dsn)
    run_id = f"edge-{kind[:2]}-{uuid.uuid4().hex[:10]}"
    spec = target.prepare(run_id, mode, tmp_path, kafka_partitions=3)
    run = BackendRun(name, target, spec, tmp_path, upsert=write == "upsert")
    if run.upsert and isinstance(target, SqlTarget):
        Database(kind, spec.address).query(
            f"ALTER TABLE {target.ident(spec.table)} ADD PRIMARY KEY (id)"
        )
    try:
        yield run
    finally:
        if isinstance(target, SqlTarget):  # prepared branches would block DROP TABLE
            for gid in target.prepared(spec.sink_id):
                finish_by_hand(run, "ROLLBACK", gid)
        target.cleanup(spec)


def finish_by_hand(run: BackendRun, verb: str, gid: str) -> None:
    """What an operator types to end a prepared transaction (``verb``: ``COMMIT`` or
    ``ROLLBACK``): ``COMMIT PREPARED 'gid'`` on PostgreSQL, ``XA COMMIT 'gtrid','bqual'``
    on MySQL/MariaDB. ``gid`` is ``gtrid:bqual``, as ``SqlTarget.prepared`` lists it."""
    assert verb in ("COMMIT", "ROLLBACK"), verb
    db = Database(run.spec.backend, run.spec.address)
    if run.spec.backend == "postgres":
        db.query(sql.SQL("{} PREPARED {}").format(sql.SQL(verb), sql.Literal(gid)))
    else:
        gtrid, _, bqual = gid.partition(":")
        db.query(f"XA {verb} %s, %s", (gtrid, bqual))


def write_input(directory: Path, batches: Sequence[Sequence[int]]) -> None:
    """One JSON file per micro-batch, in order after any files already there; an empty
    sequence writes an empty file (a micro-batch with no rows)."""
    directory.mkdir(parents=True, exist_ok=True)
    start = len(list(directory.glob("batch-*.json")))
    for index, ids in enumerate(batches, start):
        lines = "".join(json.dumps({"id": i, "payload": f"p{i}"}) + "\n" for i in ids)
        path = directory / f"batch-{index:04d}.json"
        path.write_text(lines)
        # Spark's file source orders new files by modification time: make it the index
        moment = 1_700_000_000 + index
        os.utime(path, (moment, moment))


def run_query(
    spark: Any,
    run: BackendRun,
    source: Path,
    checkpoint: Path,
    writer: twopc.SparkBatchWriter,
    *,
    partitions: int | None = 2,
    one_partition: bool = False,
    keep: str | None = None,
) -> None:
    """Run the query over every input file not yet in ``checkpoint`` and wait for it.

    ``partitions=None`` keeps the source's partitioning (an empty input file then gives a
    batch without any partition); ``one_partition`` puts every row in one of the
    ``partitions`` (the others stay empty);
    ``keep`` is a SQL filter applied before the sink (a batch whose rows all fail it is
    empty). Raises Spark's ``StreamingQueryException`` when a batch fails.
    """
    from pyspark.sql import functions as F

    # Without a partition count (the SQL upsert's repartition by key), adaptive execution
    # would coalesce a small batch's shuffle into one partition: keep them all.
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    if keep is not None:
        frame = frame.where(keep)
    # hash partitioning is deterministic: a replayed batch splits the same way
    if partitions is not None:
        frame = frame.repartition(partitions, F.lit(0) if one_partition else F.col("id"))
    if run.spec.backend == "kafka":
        frame = frame.withColumn("key", F.col("id").cast("string"))
    query = (
        frame.writeStream.option("checkpointLocation", str(checkpoint))
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        writer.close()
        spark.conf.unset("spark.sql.adaptive.coalescePartitions.enabled")
