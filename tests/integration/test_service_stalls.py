"""Slow and missing services during commit: the broker or the database is stopped with
SIGSTOP (``scripts/services pause``) at one step of the protocol, for less and for longer
than the sink's timeouts, on the local engine (tasks in forked processes, no JVM).

A stalled server keeps its connections open and answers nothing, so only the client's own
timeouts end the wait. For every case the test checks what the target shows: rows and
prepared transactions of the database; records a ``read_committed`` and a
``read_uncommitted`` consumer see, and the last stable offset against the high watermark.

* short stall: the batch waits and then completes, exactly once;
* long stall: the batch fails with a clear error (sink, batch, partition, cause) after
  bounded retries, *while the service is still stopped*; after the service returns, a
  restart from the same checkpoint finishes exactly once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pytest

import twopc
from tests.harness.databases import Database
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.kafka_topics import create_topic, read_messages, unique, wait_until_stable
from tests.harness.local_query import make_batches
from tests.harness.services import ServiceControl
from tests.harness.stalls import FlushingKafkaSink, Stall, StallAt
from tests.harness.status_cli import twopc_cli
from twopc.faults import CrashPoint
from twopc.local import LocalStream, foreach_batch
from twopc_kafka.sink import KafkaSink

pytestmark = pytest.mark.integration

BATCHES, PARTITIONS, ROWS = 2, 2, 5
STALL_BATCH = 1
EXPECTED = {b * 1000 + i for b in range(BATCHES) for i in range(PARTITIONS * ROWS)}
# records partition 0 of the stalled batch wrote (make_batches: b*1000 + p*rows + i)
STALLED = {STALL_BATCH * 1000 + i for i in range(ROWS)}

RETRY = twopc.RetryPolicy(max_attempts=2, initial_backoff_seconds=0.1)
# Short Kafka stalls ride it out with more in-task commit attempts: a 3 s SIGSTOP once left
# the KRaft broker silent for 40 s on the CI machine ("Exceptionally slow controller event
# writeNoOpRecord took 40306 ms", the broker fenced and unfenced), so two 20 s
# commit_transaction calls both timed out by a few hundred ms (fresh-clone CI of ec029d7).
SHORT_RETRY = twopc.RetryPolicy(max_attempts=4, initial_backoff_seconds=0.1)


class Case(NamedTuple):
    mode: str
    point: CrashPoint
    length: str

    @property
    def long(self) -> bool:
        return self.length == "long"

    def param(self, *, by_default: bool) -> Any:
        """The pytest parameter; a long stall not run ``by_default`` is marked slow and
        extended (CI runs the default ones, ``--extended`` all)."""
        slow = self.long and not by_default
        return pytest.param(
            self,
            id=f"{self.mode}-{self.point.value}-{self.length}",
            marks=[pytest.mark.slow, pytest.mark.extended] if slow else [],
        )


def _batches() -> list[list[pa.Table]]:
    return make_batches(BATCHES, PARTITIONS, ROWS)


def _names_task(exc: BaseException, sink_id: str) -> str:
    text = str(exc)
    assert f"sink {sink_id!r}" in text, text
    assert f"batch {STALL_BATCH}" in text, text
    assert "partition 0" in text, text
    return text


# -- Kafka -----------------------------------------------------------------------------------

TXN_TIMEOUT_MS = 10_000  # long stalls: the broker aborts the stalled transaction
# Short stalls must end well inside both client timeouts even on a loaded 2-core CI machine
# (a 10 s transaction timeout was crossed there once: the broker fenced the producer).
SHORT_TXN_TIMEOUT_MS = 60_000
SHORT_OPERATION_TIMEOUT = 20.0
KAFKA_SHORT = 3.0  # far below both the operation timeout and the transaction timeout
KAFKA_LONG = 12.0  # above the transaction timeout and above the tasks' whole retry budget
KAFKA_LONG_TWICE = 30.0  # the same, for a failed run and a failed restart (18 s was too
# short on a loaded 2-core CI machine: the first run alone took longer to give up)


def _kafka_sink(bootstrap: str, topic: str, mode: str, timeout: float, prefix: str) -> KafkaSink:
    """A new sink object, as a restarted query process builds it; short stalls (a long
    operation timeout) get a long transaction timeout too."""
    return FlushingKafkaSink(
        bootstrap,
        topic=topic,
        mode=mode,
        key_column="id",
        transactional_id_prefix=prefix,
        transaction_timeout_ms=TXN_TIMEOUT_MS if timeout < 10 else SHORT_TXN_TIMEOUT_MS,
        operation_timeout_seconds=timeout,
    )


def _keys(bootstrap: str, topic: str, isolation: str) -> Counter[int]:
    return Counter(int(m.text_key) for m in read_messages(bootstrap, topic, isolation))


KAFKA_CASES = [
    Case(mode, point, length)
    for mode in ("per_partition", "atomic")
    for point in (CrashPoint.AFTER_INVOKE, CrashPoint.BEFORE_TASK_COMMIT)
    for length in ("short", "long")
]
# one long case runs by default; the other long ones are marked slow
_KAFKA_DEFAULT_LONG = ("per_partition", CrashPoint.AFTER_INVOKE)


@pytest.mark.parametrize(
    "case", [c.param(by_default=(c.mode, c.point) == _KAFKA_DEFAULT_LONG) for c in KAFKA_CASES]
)
def test_kafka_broker_stalled(
    kafka_bootstrap: str, services: ServiceControl, tmp_path: Path, case: Case
) -> None:
    mode, point, long = case.mode, case.point, case.long
    topic = create_topic(kafka_bootstrap)
    sink_id = f"stall-{uuid.uuid4().hex[:8]}"
    prefix = unique("stall")
    timeout = 2.0 if long else SHORT_OPERATION_TIMEOUT
    sink = _kafka_sink(kafka_bootstrap, topic, mode, timeout, prefix)
    # the default long case also restarts while the broker is still stopped: the restart's
    # recovery (the sweep's probe) and its tasks must give up too
    again = long and (mode, point) == _KAFKA_DEFAULT_LONG
    log = str(tmp_path / "log")
    stream = LocalStream(str(tmp_path / "chk"), _batches())
    stall_plan = StallAt(
        once=str(tmp_path / "stalled"), point=point, service="kafka", batch_id=STALL_BATCH
    )
    retry = RETRY if long else SHORT_RETRY
    writer = foreach_batch(sink, sink_id, commit_log=log, faults=stall_plan, retry=retry)

    seconds = KAFKA_LONG_TWICE if again else KAFKA_LONG if long else KAFKA_SHORT
    with Stall(services, "kafka", seconds) as stall:
        if not long:
            stream.run(writer)
        else:
            failed = stall.fails(lambda: stream.run(writer), twopc.TwoPCError)
        if again:
            early = _kafka_sink(kafka_bootstrap, topic, mode, timeout, prefix)
            restart_early = foreach_batch(early, sink_id, commit_log=log, retry=RETRY)
            in_restart = stall.fails(
                lambda: LocalStream(str(tmp_path / "chk"), _batches()).run(restart_early),
                twopc.TwoPCError,
            )
            # the restart's first step, reading the marker groups before phase 1, gives up
            text = str(in_restart)
            assert isinstance(in_restart, twopc.TransientSinkError), text
            assert f"sink {sink_id!r}, batch {STALL_BATCH}" in text, text
            assert "cannot read the marker groups" in text and "timed out" in text, text
    if not long:
        wait_until_stable(kafka_bootstrap, topic, within=10)
        assert_exactly_once(_keys(kafka_bootstrap, topic, "read_committed"), EXPECTED)
        return

    text = _names_task(failed, sink_id)
    assert "_TIMED_OUT" in text or "not delivered" in text, text
    # The broker aborts the stalled transaction once it runs again (its age is past
    # transaction.timeout.ms): read_committed readers wait no longer than that.
    lag = wait_until_stable(kafka_bootstrap, topic, within=TXN_TIMEOUT_MS / 1000 + 5)
    print(f"last stable offset caught up {lag:.1f}s after the broker resumed")
    committed = _keys(kafka_bootstrap, topic, "read_committed")
    everything = _keys(kafka_bootstrap, topic, "read_uncommitted")
    if point is CrashPoint.AFTER_INVOKE:
        # no commit was ever sent: the records are in the log, aborted
        assert set(everything) >= STALLED, "the stalled transaction's records are not in the log"
        assert not STALLED & set(committed), "records of the stalled transaction are visible"
    # The timed-out commit request may still reach the broker when it resumes, so the
    # stalled transaction may have committed after all: either way, once only.
    assert all(n == 1 for n in committed.values()), committed

    fresh = _kafka_sink(kafka_bootstrap, topic, mode, timeout, prefix)
    restart = foreach_batch(fresh, sink_id, commit_log=log, retry=RETRY)
    LocalStream(str(tmp_path / "chk"), _batches()).run(restart)
    wait_until_stable(kafka_bootstrap, topic, within=10)
    assert_exactly_once(_keys(kafka_bootstrap, topic, "read_committed"), EXPECTED)


# -- PostgreSQL and MariaDB ------------------------------------------------------------------

SQL_SHORT = 1.5  # far below the sink's timeouts for short stalls
# Short stalls must end well inside the timeouts on a loaded 2-core CI machine too (a
# 5 s read timeout was crossed there once, at the task's COMMIT).
SQL_SHORT_TIMEOUT = 15.0
SQL_LONG = 10.0  # above the whole retry budget of a run: 2 attempts of a 2 s timeout each
SQL_LONG_TWICE = 14.0  # the decision case: the first restart's recovery must fail too


@pytest.fixture(params=["postgres", "mysql"])
def database(request: pytest.FixtureRequest) -> Database:
    backend = request.param
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    return Database(backend, dsn)


def _service(db: Database) -> str:
    return "postgres" if db.backend == "postgres" else "mariadb"


def _sql_sink(db: Database, table: str, mode: str, timeout: float) -> twopc.Sink[Any]:
    return twopc.create_sink(
        db.backend,
        dsn=db.dsn,
        table=table,
        transaction_mode=mode,
        connect_timeout_seconds=timeout,
        read_timeout_seconds=timeout,
    )


# (transaction mode, stall point): phase 1 (rows written, pre-commit waits), the task's own
# commit (transaction mode), and between the decision and the driver's COMMIT PREPARED /
# XA COMMIT (two_phase)
SQL_POINTS = [
    ("transaction", CrashPoint.AFTER_INVOKE),
    ("transaction", CrashPoint.BEFORE_TASK_COMMIT),
    ("two_phase", CrashPoint.AFTER_INVOKE),
    ("two_phase", CrashPoint.AFTER_DECISION),
]


# the decision case matters most for two_phase: its long stall runs by default
@pytest.mark.parametrize(
    "case",
    [
        Case(mode, point, length).param(by_default=point is CrashPoint.AFTER_DECISION)
        for mode, point in SQL_POINTS
        for length in ("short", "long")
    ],
)
def test_database_stalled(
    database: Database, services: ServiceControl, tmp_path: Path, case: Case
) -> None:
    mode, point, long = case.mode, case.point, case.long
    table = f"stall_{uuid.uuid4().hex[:10]}"
    sink_id = f"stall-{uuid.uuid4().hex[:8]}"
    service = _service(database)
    database.create(table)
    try:
        sink = _sql_sink(database, table, mode, 2.0 if long else SQL_SHORT_TIMEOUT)
        stream = LocalStream(str(tmp_path / "chk"), _batches())
        plan = StallAt(
            once=str(tmp_path / "stalled"), point=point, service=service, batch_id=STALL_BATCH
        )
        log = str(tmp_path / "log")
        writer = foreach_batch(sink, sink_id, commit_log=log, faults=plan, retry=RETRY)
        seconds = SQL_LONG_TWICE if point is CrashPoint.AFTER_DECISION else SQL_LONG
        with Stall(services, service, seconds if long else SQL_SHORT) as stall:
            if not long:
                stream.run(writer)
            else:
                failed = stall.fails(lambda: stream.run(writer), twopc.TwoPCError)
                if point is CrashPoint.AFTER_DECISION:
                    # the restart's recovery meets the same stalled database: it fails
                    # clearly too, and leaves the decided batch for the next restart
                    recovery = foreach_batch(sink, sink_id, commit_log=log, retry=RETRY)
                    in_recovery = stall.fails(
                        lambda: LocalStream(str(tmp_path / "chk"), _batches()).run(recovery),
                        twopc.CommitError,
                    )
        if not long:
            assert_exactly_once(database.ids(table), EXPECTED)
            assert database.prepared(sink_id) == []
            return

        _names_task(failed, sink_id)
        if point is CrashPoint.AFTER_DECISION:
            assert isinstance(failed, twopc.CommitError), repr(failed)
            assert failed.partition == 0, repr(failed)
            _names_task(in_recovery, sink_id)
            # decided and prepared: the branches wait for the restart, holding their rows
            assert len(database.prepared(sink_id)) == PARTITIONS
            assert not STALLED & set(database.ids(table))
        visible = database.ids(table)
        assert all(n == 1 for n in visible.values()), visible

        restart = foreach_batch(sink, sink_id, commit_log=log, retry=RETRY)
        LocalStream(str(tmp_path / "chk"), _batches()).run(restart)
        assert_exactly_once(database.ids(table), EXPECTED)
        assert database.prepared(sink_id) == []
    finally:
        database.drop(table)


ANSWER_LOST_TIMEOUT = 1.5  # the sink's read and connect timeouts
ANSWER_LOST_STALL = 4.0  # the COMMIT's answer is lost, and the first look at the marker too
# commit retries that outlast the stall: each waits a connect timeout while it is stopped
PATIENT = twopc.RetryPolicy(max_attempts=8, initial_backoff_seconds=0.5, max_backoff_seconds=1)


def test_commit_whose_answer_is_lost(
    database: Database, services: ServiceControl, tmp_path: Path
) -> None:
    """``transaction`` mode: the database stops after the task sent COMMIT and stays
    stopped past the read timeout, so the client gives up on the answer and its connection.
    The commit retries cannot commit on that connection again: they ask the marker row,
    committed with the rows, once the database answers, and the batch completes once."""
    table = f"stall_{uuid.uuid4().hex[:10]}"
    sink_id = f"stall-{uuid.uuid4().hex[:8]}"
    service = _service(database)
    database.create(table)
    try:
        sink = _sql_sink(database, table, "transaction", ANSWER_LOST_TIMEOUT)
        plan = StallAt(
            once=str(tmp_path / "stalled"),
            point=CrashPoint.BEFORE_TASK_COMMIT,
            service=service,
            batch_id=STALL_BATCH,
        )
        # tasks inline, one after the other: the stall meets partition 0's COMMIT only,
        # not another task's statements (their read timeout is as short)
        log = str(tmp_path / "log")
        writer = foreach_batch(
            sink, sink_id, commit_log=log, faults=plan, retry=PATIENT, processes=False
        )
        with Stall(services, service, ANSWER_LOST_STALL):
            LocalStream(str(tmp_path / "chk"), _batches()).run(writer)
        assert_exactly_once(database.ids(table), EXPECTED)
    finally:
        database.drop(table)


# -- what the operator sees --------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["kafka", "postgres", "mysql"])
def test_status_of_a_stalled_target_fails_clearly(
    request: pytest.FixtureRequest, services: ServiceControl, tmp_path: Path, backend: str
) -> None:
    """``twopc status`` against a stopped service: bounded by the sink's timeouts, exit
    status 1, and a message that says what happened (not an empty ``TimeoutError:``)."""
    if backend == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        options = ["--option", f"bootstrap_servers={bootstrap}"]
        options += ["--option", f"topic={create_topic(bootstrap)}"]
        options += ["--option-json", "operation_timeout_seconds=3"]
        service = "kafka"
    else:
        dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
        options = ["--option", f"dsn={dsn}", "--option", "table=orders"]
        options += ["--option", "transaction_mode=two_phase"]
        options += ["--option-json", "connect_timeout_seconds=3"]
        options += ["--option-json", "read_timeout_seconds=3"]
        service = _service(Database(backend, dsn))
    args = [backend, "--sink-id", "stalled", *options, "--commit-log", str(tmp_path / "log")]
    assert twopc_cli("status", *args).returncode == 0  # the service answers
    services.pause(service)
    try:
        done = twopc_cli("status", *args)
    finally:
        services.resume(service)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("twopc status: ")]
    print(line)
    assert any(word in line for word in ("timeout", "timed out", "no answer in time")), line
