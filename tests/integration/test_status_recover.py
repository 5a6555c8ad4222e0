"""``twopc status`` and ``twopc recover`` against crashed runs of every backend and mode.

Each case crashes a checkpointed query (local engine, no JVM) at batch 1, runs the real
command line as a subprocess, and checks the target system itself:

* ``commit``: the driver is SIGKILLed right after the decision was recorded. Status must say
  "commit" (or "mark_done" where the tasks committed already); recover must make batch 1
  visible exactly once.
* ``abort``: the crash comes after phase 1 prepared and before any decision. Status must say
  "abort" for the prepared work (two-phase SQL, files) or the open transaction (Kafka);
  recover must leave batch 1 invisible, with nothing prepared, staged or open.

``--dry-run`` must change nothing on the target. Afterwards a second status shows nothing in
doubt, and a restart of the query from its checkpoint ends with every row exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec

from tests.e2e.backend_queries import BACKENDS
from tests.e2e.test_sql_crash_matrix import Database
from tests.helpers import REPO, local_query, read_ids, run_process, staged_attempts
from tests.integration.kafka_support import admin, committed_keys, create_topic

pytestmark = pytest.mark.integration

BATCHES, PARTITIONS, ROWS = 3, 2, 20
ALL_IDS = {b * 1000 + i for b in range(BATCHES) for i in range(PARTITIONS * ROWS)}


def ids_of(
    batches: range | list[int], partitions: range | list[int] = range(PARTITIONS)
) -> set[int]:
    return {b * 1000 + p * ROWS + i for b in batches for p in partitions for i in range(ROWS)}


def twopc_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command line, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "twopc.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        check=False,
    )


def status_json(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = twopc_cli("status", *args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@dataclass
class Target:
    """One backend in one mode: how to run the query, what the CLI needs, how to read back."""

    name: str
    query: list[str]
    cli: list[str]
    env: dict[str, str]
    reader: Callable[[], Iterable[int]]
    leftovers: Callable[[], list[str]]
    """What a crash left that readers or writers trip over: staged attempts, prepared
    branches, partitions a read_committed reader is held back on."""
    commit_in_task: bool

    def visible(self) -> Counter[int]:
        return Counter(self.reader())


def _files(tmp_path: Path) -> Target:
    out, chk = tmp_path / "out", tmp_path / "chk"
    sink_id = "local-orders"  # fixed by tests/e2e/local_query.py
    return Target(
        name="files",
        query=local_query(
            "local_query",
            checkpoint=chk,
            output=out,
            batches=BATCHES,
            partitions=PARTITIONS,
            rows=ROWS,
        ),
        cli=["files", "--sink-id", sink_id, "--option", f"path={out}"],
        env={},
        reader=lambda: read_ids(out).elements(),
        leftovers=lambda: [str(p) for p in staged_attempts(out)],
        commit_in_task=False,
    )


def _sql(tmp_path: Path, db: Database, mode: str) -> Target:
    table = f"ops_{uuid.uuid4().hex[:10]}"
    sink_id = f"ops-{uuid.uuid4().hex[:8]}"
    db.create(table)
    chk = tmp_path / "chk"
    return Target(
        name=f"{db.backend}-{mode}",
        query=local_query(
            "local_sql_query",
            backend=db.backend,
            dsn=db.dsn,
            table=table,
            transaction_mode=mode,
            checkpoint=chk,
            batches=BATCHES,
            partitions=PARTITIONS,
            rows=ROWS,
            sink_id=sink_id,
        ),
        cli=[
            db.backend,
            "--sink-id",
            sink_id,
            "--option-env",
            "dsn=TWOPC_TEST_DSN",  # the DSN holds a password: never on the command line
            "--option",
            f"table={table}",
            "--option",
            f"transaction_mode={mode}",
            "--commit-log",
            str(chk / "twopc-log"),
        ],
        env={"TWOPC_TEST_DSN": db.dsn},
        reader=lambda: db.ids(table).elements(),
        leftovers=lambda: db.prepared(sink_id),
        commit_in_task=mode == "transaction",
    )


def _kafka(tmp_path: Path, bootstrap: str, mode: str) -> Target:
    topic = create_topic(bootstrap, partitions=3)
    sink_id = f"ops-{uuid.uuid4().hex[:8]}"
    chk = tmp_path / "chk"
    return Target(
        name=f"kafka-{mode}",
        query=local_query(
            "local_kafka_query",
            bootstrap=bootstrap,
            topic=topic,
            mode=mode,
            checkpoint=chk,
            sink_id=sink_id,
            batches=BATCHES,
            partitions=PARTITIONS,
            rows=ROWS,
        ),
        cli=[
            "kafka",
            "--sink-id",
            sink_id,
            "--option",
            f"bootstrap_servers={bootstrap}",
            "--option",
            f"topic={topic}",
            "--option",
            f"mode={mode}",
            "--commit-log",
            str(chk / "twopc-log"),
        ],
        env={},
        reader=lambda: (int(k) for k in committed_keys(bootstrap, topic).elements()),
        leftovers=lambda: stalled_partitions(bootstrap, topic),
        commit_in_task=True,
    )


def stalled_partitions(bootstrap: str, topic: str) -> list[str]:
    """Partitions where a read_committed reader stops short of the log's end."""
    client = admin(bootstrap)
    partitions = client.list_topics(topic, timeout=30).topics[topic].partitions
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    ends = {}
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        futures = client.list_offsets(request, isolation_level=level, request_timeout=30)
        ends[level] = {tp.partition: f.result(30).offset for tp, f in futures.items()}
    committed, high = ends[IsolationLevel.READ_COMMITTED], ends[IsolationLevel.READ_UNCOMMITTED]
    return [f"{topic}[{p}]" for p in sorted(partitions) if committed[p] < high[p]]


TARGETS = list(BACKENDS)


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    name: str = request.param
    if name == "files":
        yield _files(tmp_path)
        return
    backend, mode = name.split("-", 1)
    if backend == "kafka":
        yield _kafka(tmp_path, request.getfixturevalue("kafka_bootstrap"), mode)
        return
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    yield _sql(tmp_path, Database(backend, dsn), mode)


def _crash(target: Target, scenario: str) -> None:
    """Crash the query at batch 1: after the decision (commit) or before it (abort)."""
    if scenario == "commit":
        faults, code = "after_decision:kill@batch=1", -signal.SIGKILL
    elif target.commit_in_task:
        # Tasks commit their own transactions: what stays undecided is a task killed
        # between pre_commit and its commit. Atomic Kafka has one task, partition 0.
        where = "" if target.name == "kafka-atomic" else ",partition=1"
        faults, code = f"before_task_commit:kill@batch=1{where}", 1
    else:
        faults, code = "before_decision:kill@batch=1", -signal.SIGKILL
    result = run_process(target.query, faults=faults, timeout=120)
    assert result.returncode == code, result.stderr[-3000:]


def _expected_after_recover(target: Target, scenario: str) -> set[int]:
    if scenario == "commit":
        return ids_of(range(2))
    if target.name in ("postgres-transaction", "mysql-transaction", "kafka-per_partition"):
        return ids_of([0]) | ids_of([1], [0])  # partition 0 of batch 1 committed in its task
    return ids_of([0])


CASES = [(t, s) for t in TARGETS for s in ("commit", "abort")]


@pytest.mark.parametrize(
    ("target", "scenario"), CASES, ids=[f"{t}-{s}" for t, s in CASES], indirect=["target"]
)
def test_status_and_recover_after_a_crash(target: Target, scenario: str) -> None:
    _crash(target, scenario)
    before = target.visible()

    status = status_json(target.cli, target.env)
    assert status["running"] is False, status["writers"]
    assert [w["state"] for w in status["writers"]] in (["writing"], ["failed"])
    actions = Counter((i["kind"], i["action"]) for i in status["in_doubt"])
    (query,) = status["queries"]
    _check_plan(target, scenario, actions, query)

    dry = twopc_cli("recover", *target.cli, "--dry-run", "--json", env=target.env)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["performed"] is False
    assert target.visible() == before, "--dry-run changed the target"
    again = status_json(target.cli, target.env)["in_doubt"]
    assert _without_age(again) == _without_age(status["in_doubt"]), "--dry-run changed state"

    done = twopc_cli("recover", *target.cli, env=target.env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "afterwards: nothing in doubt" in done.stdout

    visible = target.visible()
    assert all(n == 1 for n in visible.values()), "duplicates after recover"
    assert set(visible) == _expected_after_recover(target, scenario)
    assert target.leftovers() == []
    after = status_json(target.cli, target.env)
    assert after["in_doubt"] == []
    (query,) = after["queries"]
    if scenario == "commit":
        assert query["log_last_committed"] == 1

    # the query restarts from its checkpoint and ends exactly once
    restart = run_process(target.query, timeout=120)
    assert restart.returncode == 0, restart.stderr[-3000:]
    final = target.visible()
    assert sorted(final.elements()) == sorted(ALL_IDS)
    assert target.leftovers() == []
    assert status_json(target.cli, target.env)["writers"] == []  # a clean stop removes it


def _without_age(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "age_seconds"} for item in items]


def _check_plan(
    target: Target, scenario: str, actions: Counter[tuple[str, str]], query: dict[str, Any]
) -> None:
    two_phase = target.name.endswith("two_phase") or target.name == "files"
    if scenario == "commit":
        decision = "mark_done" if target.commit_in_task else "commit"
        expected = Counter({("decision", decision): 1})
        if two_phase:
            expected[("prepared", "commit")] = PARTITIONS
        assert actions == expected
        assert query["log_last_committed"] == 0
        assert query["pending_decisions"] == [1]
        if target.commit_in_task:
            # the target's markers already show batch 1; the log lags: both are shown
            assert query["target_last_committed"] == 1
            assert query["differs"] is True
        return
    if two_phase:
        assert actions == Counter({("prepared", "abort"): PARTITIONS})
    elif target.name.startswith("kafka"):
        assert set(actions) == {("open", "abort")}
        assert actions[("open", "abort")] >= 1
    else:  # SQL transaction mode: the server rolled the task back; nothing is prepared
        assert actions == Counter()
    assert query["log_last_committed"] == 0
    assert query["pending_decisions"] == []
    if target.name in ("postgres-transaction", "mysql-transaction", "kafka-per_partition"):
        assert query["target_partitions"] == {"0": 1, "1": 0}
    elif target.name == "kafka-atomic":
        assert query["target_partitions"] == {"0": 0}
