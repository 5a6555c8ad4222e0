"""Real Spark queries (``foreachBatch``, ``local[2,3]``: failed tasks are retried) whose
broker or database is stopped with SIGSTOP at one step of batch 1, for longer than the
sink's timeouts: the query fails with twopc's error (sink, batch, partition, cause) while
the service is still stopped, and after it returns a restart from the same checkpoint
writes every row exactly once. The breadth (every backend, mode, step, short and long
stalls) is in ``tests/integration/test_service_stalls.py`` on the local engine.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from pyspark import cloudpickle

import tests.harness.services
import tests.harness.stalls
import twopc
from tests.e2e.orders_stream import run_orders_stream
from tests.harness.databases import Database
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.kafka_topics import (
    committed_keys,
    create_topic,
    uncommitted_keys,
    unique,
    wait_until_stable,
)
from tests.harness.services import ServiceControl
from tests.harness.spark_fixtures import write_orders
from tests.harness.stalls import FlushingKafkaSink, Stall, StallAt
from twopc.faults import CrashPoint

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

ROWS = 20
RETRY = twopc.RetryPolicy(max_attempts=2, initial_backoff_seconds=0.1)

# The stall plan and the test sink travel to Spark's Python workers, which cannot import
# the tests package: pickle them by value.
cloudpickle.register_pickle_by_value(tests.harness.stalls)
cloudpickle.register_pickle_by_value(tests.harness.services)


def _fails_while_stalled(
    spark: Any, tmp_path: Path, writer: Any, stall: Stall, sink_id: str
) -> str:
    """Run the query into the stall; it must fail, naming a task, before the resume."""
    # Spark stops the query with a StreamingQueryException holding twopc's message
    failed = stall.fails(
        lambda: run_orders_stream(spark, tmp_path / "in", tmp_path / "chk", writer)
    )
    text = str(failed)
    # the task that fails first is named: the stalled one, or another one that met the
    # stopped service (tasks of a batch run in parallel)
    assert re.search(rf"sink '{sink_id}', batch 1, partition \d+: ", text), text[-3000:]
    return text


@pytest.mark.parametrize(
    "mode", ["per_partition", pytest.param("atomic", marks=pytest.mark.extended)]
)
def test_kafka_broker_stalled_in_phase1(
    spark: Any, kafka_bootstrap: str, services: ServiceControl, tmp_path: Path, mode: str
) -> None:
    expected = write_orders(tmp_path / "in", batches=2, rows_per_batch=ROWS)
    topic = create_topic(kafka_bootstrap)
    sink_id = f"stall-{uuid.uuid4().hex[:8]}"
    sink = FlushingKafkaSink(
        kafka_bootstrap,
        topic=topic,
        key_column="id",
        mode=mode,
        transactional_id_prefix=unique("stall"),
        transaction_timeout_ms=10_000,
        operation_timeout_seconds=2.0,
    )
    plan = StallAt(once=str(tmp_path / "stalled"), point=CrashPoint.AFTER_INVOKE, service="kafka")
    writer = twopc.foreach_batch(sink, sink_id, faults=plan, retry=RETRY)
    with Stall(services, "kafka", 16.0) as stall:
        text = _fails_while_stalled(spark, tmp_path, writer, stall, sink_id)
    assert "_TIMED_OUT" in text or "not delivered" in text, text[-3000:]

    lag = wait_until_stable(kafka_bootstrap, topic, within=15)
    print(f"last stable offset caught up {lag:.1f}s after the broker resumed")
    committed = Counter(int(k) for k in committed_keys(kafka_bootstrap, topic).elements())
    everything = Counter(int(k) for k in uncommitted_keys(kafka_bootstrap, topic).elements())
    aborted = set(everything) - set(committed)
    assert aborted, "no aborted records in the log: the stall point wrote nothing"
    assert aborted <= expected
    assert all(n == 1 for n in committed.values()), committed

    restart = twopc.foreach_batch(sink, sink_id, retry=RETRY)
    run_orders_stream(spark, tmp_path / "in", tmp_path / "chk", restart)
    wait_until_stable(kafka_bootstrap, topic, within=15)
    ids = Counter(int(k) for k in committed_keys(kafka_bootstrap, topic).elements())
    assert_exactly_once(ids, expected)


class SqlCase(NamedTuple):
    backend: str
    mode: str
    point: CrashPoint
    seconds: float


SQL_CASES = [
    # the driver's COMMIT PREPARED cannot connect: CommitError, recovery commits later
    SqlCase("postgres", "two_phase", CrashPoint.AFTER_DECISION, 10.0),
    # a task's pre-commit gets no answer: the task and its retries fail, batch rerun
    SqlCase("mysql", "transaction", CrashPoint.AFTER_INVOKE, 13.0),
]
EXTENDED_SQL_CASES = [
    # the same, each on the other database
    SqlCase("mysql", "two_phase", CrashPoint.AFTER_DECISION, 13.0),
    SqlCase("postgres", "transaction", CrashPoint.AFTER_INVOKE, 20.0),
]


@pytest.mark.parametrize(
    "case",
    [
        *(pytest.param(c, id=f"{c.backend}-{c.mode}") for c in SQL_CASES),
        *(
            pytest.param(c, id=f"{c.backend}-{c.mode}", marks=pytest.mark.extended)
            for c in EXTENDED_SQL_CASES
        ),
    ],
)
def test_database_stalled(
    spark: Any,
    request: pytest.FixtureRequest,
    services: ServiceControl,
    tmp_path: Path,
    case: SqlCase,
) -> None:
    backend, mode, point = case.backend, case.mode, case.point
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    db = Database(backend, dsn)
    service = "postgres" if backend == "postgres" else "mariadb"
    expected = write_orders(tmp_path / "in", batches=2, rows_per_batch=ROWS)
    table = f"stall_{uuid.uuid4().hex[:10]}"
    db.query(f"CREATE TABLE {table} (id BIGINT, customer VARCHAR(40), amount DOUBLE PRECISION)")
    sink_id = f"stall-{uuid.uuid4().hex[:8]}"
    try:
        sink = twopc.create_sink(
            backend,
            dsn=dsn,
            table=table,
            transaction_mode=mode,
            connect_timeout_seconds=2.0,
            read_timeout_seconds=2.0,
        )
        plan = StallAt(once=str(tmp_path / "stalled"), point=point, service=service)
        writer = twopc.foreach_batch(sink, sink_id, faults=plan, retry=RETRY)
        with Stall(services, service, case.seconds) as stall:
            text = _fails_while_stalled(spark, tmp_path, writer, stall, sink_id)
        if point is CrashPoint.AFTER_DECISION:
            assert "CommitError" in text or "commit failed" in text, text[-3000:]
            assert len(db.prepared(sink_id)) == 2  # decided, waiting for the restart
        assert all(n == 1 for n in db.ids(table).values())

        restart = twopc.foreach_batch(sink, sink_id, retry=RETRY)
        run_orders_stream(spark, tmp_path / "in", tmp_path / "chk", restart)
        assert_exactly_once(db.ids(table), expected)
        assert db.prepared(sink_id) == []
    finally:
        db.drop(table)


@pytest.mark.extended
@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_commit_whose_answer_is_lost(
    spark: Any,
    request: pytest.FixtureRequest,
    services: ServiceControl,
    tmp_path: Path,
    backend: str,
) -> None:
    """``transaction`` mode on real Spark: the database stops after the task sent COMMIT
    and stays stopped past the read timeout: the query completes and every row is in the
    table once. One partition: the stall meets that task's COMMIT only. (Spark's task
    retry alone would also end exactly once here; the local-engine test of the same name
    in tests/integration/test_service_stalls.py is the one that needs the marker check.)"""
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    db = Database(backend, dsn)
    service = "postgres" if backend == "postgres" else "mariadb"
    expected = write_orders(tmp_path / "in", batches=2, rows_per_batch=ROWS)
    table = f"stall_{uuid.uuid4().hex[:10]}"
    db.query(f"CREATE TABLE {table} (id BIGINT, customer VARCHAR(40), amount DOUBLE PRECISION)")
    sink_id = f"stall-{uuid.uuid4().hex[:8]}"
    try:
        sink = twopc.create_sink(
            backend,
            dsn=dsn,
            table=table,
            transaction_mode="transaction",
            connect_timeout_seconds=1.5,
            read_timeout_seconds=1.5,
        )
        plan = StallAt(
            once=str(tmp_path / "stalled"), point=CrashPoint.BEFORE_TASK_COMMIT, service=service
        )
        patient = twopc.RetryPolicy(
            max_attempts=8, initial_backoff_seconds=0.5, max_backoff_seconds=1
        )
        writer = twopc.foreach_batch(sink, sink_id, faults=plan, retry=patient)
        with Stall(services, service, 4.0):
            run_orders_stream(spark, tmp_path / "in", tmp_path / "chk", writer, partitions=1)
        assert_exactly_once(db.ids(table), expected)
    finally:
        db.drop(table)
