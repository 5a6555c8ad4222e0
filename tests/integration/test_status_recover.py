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
import signal
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec

from tests.harness.backend_runs import BACKENDS
from tests.harness.databases import Database
from tests.harness.kafka_topics import admin, committed_keys, create_topic
from tests.harness.outputs import read_ids, staged_attempts
from tests.harness.processes import local_query, run_process
from tests.harness.status_cli import status_json, twopc_cli

pytestmark = pytest.mark.integration

BATCHES, PARTITIONS, ROWS = 3, 2, 20
ALL_IDS = {b * 1000 + i for b in range(BATCHES) for i in range(PARTITIONS * ROWS)}


def ids_of(
    batches: range | list[int], partitions: range | list[int] = range(PARTITIONS)
) -> set[int]:
    return {b * 1000 + p * ROWS + i for b in batches for p in partitions for i in range(ROWS)}


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
    sink_id = "local-orders"  # fixed by tests/harness/local_query.py
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


# -- recovery pointed at the wrong place (issue 28) --------------------------------------------
#
# Only the commit log the query writes to can prove a batch undecided. Pointed anywhere else
# (a mistyped checkpoint, another sink id, an empty directory, another query's log, no
# --commit-log for a query that passed commit_log=), `twopc recover` must change nothing on
# the target and exit 2, saying what it looked for and where; the right place then recovers.

WRONG_PLACE_TARGETS = ["postgres-two_phase", "mysql-two_phase", "files"]


def _replace_option(cli: list[str], flag: str, value: str | None) -> list[str]:
    """``cli`` with ``flag``'s value replaced, added, or (``value`` None) dropped."""
    out: list[str] = []
    args = iter(cli)
    for arg in args:
        if arg == flag:
            next(args)
            continue
        out.append(arg)
    return out if value is None else [*out, flag, value]


def _another_querys_log(log: Path, tmp_path: Path) -> Path:
    """A commit log of another query: the same files under another query id."""
    other = tmp_path / "other-query-log"
    for query_dir in log.iterdir():
        if query_dir.is_dir() and not query_dir.name.startswith("."):
            destination = other / str(uuid.uuid4())
            destination.mkdir(parents=True)
            for entry in query_dir.iterdir():
                if not entry.name.startswith("."):
                    (destination / entry.name).write_bytes(entry.read_bytes())
    return other


def _wrong_places(target: Target, tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Each wrong way to point recover at the log, with the text its refusal must show."""
    sink_id = target.cli[target.cli.index("--sink-id") + 1]
    empty = tmp_path / "empty"
    empty.mkdir()
    typo = str(tmp_path / "chk-typo")
    places = {
        "mistyped checkpoint": (
            _replace_option(
                _replace_option(target.cli, "--commit-log", None), "--checkpoint", typo
            ),
            f"no commit log at {typo}/twopc/{sink_id}",
        ),
        "empty directory": (
            _replace_option(
                _replace_option(target.cli, "--checkpoint", None), "--commit-log", str(empty)
            ),
            f"no commit log at {empty}",
        ),
        "another sink id": (
            _replace_option(target.cli, "--sink-id", "another-sink"),
            "not 'another-sink'" if "--commit-log" in target.cli else "no commit log at",
        ),
    }
    if "--commit-log" in target.cli:
        log = Path(target.cli[target.cli.index("--commit-log") + 1])
        places["another query's log"] = (
            _replace_option(target.cli, "--commit-log", str(_another_querys_log(log, tmp_path))),
            "has no record of",
        )
        places["commit_log= on the query, not on the command line"] = (
            _replace_option(target.cli, "--commit-log", None),
            "keeps no commit log of its own: give --commit-log",
        )
    else:
        # the files sink keeps its log under its path, whatever the checkpoint: a mistyped
        # checkpoint finds the right log; a mistyped path is the wrong place
        del places["mistyped checkpoint"]
        path = next(a for a in target.cli if a.startswith("path="))
        places["mistyped path"] = (
            [path + "-typo" if a == path else a for a in target.cli],
            "no commit log at",
        )
        # another query's log, beside the right one
        places["another query's log"] = (
            _replace_option(
                target.cli, "--commit-log", str(_another_querys_log(_files_log(target), tmp_path))
            ),
            "has no record of",
        )
    return places


def _files_log(target: Target) -> Path:
    path = next(a.split("=", 1)[1] for a in target.cli if a.startswith("path="))
    sink_id = target.cli[target.cli.index("--sink-id") + 1]
    return Path(path) / "_twopc" / sink_id


@pytest.mark.parametrize("target", WRONG_PLACE_TARGETS, indirect=True)
def test_recover_pointed_at_the_wrong_place_changes_nothing(target: Target, tmp_path: Path) -> None:
    _crash(target, "commit")  # batch 1 decided, both partitions still prepared
    before, prepared = target.visible(), target.leftovers()
    assert len(prepared) == PARTITIONS and set(before) == ids_of([0])

    for name, (cli, says) in _wrong_places(target, tmp_path).items():
        done = twopc_cli("recover", *cli, env=target.env)
        output = done.stdout + done.stderr
        assert done.returncode == 2, f"{name}: exit {done.returncode}\n{output}"
        assert says in output, f"{name}: {output}"
        assert "nothing in doubt" not in output, name
        assert target.visible() == before, f"{name}: recover changed what readers see"
        assert target.leftovers() == prepared, f"{name}: recover touched the prepared work"

    # the right place finishes the decided batch; the restart then ends exactly once
    done = twopc_cli("recover", *target.cli, env=target.env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(target.visible()) == ids_of(range(2))
    restart = run_process(target.query, timeout=120)
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert sorted(target.visible().elements()) == sorted(ALL_IDS)


@pytest.mark.parametrize("target", ["postgres-two_phase"], indirect=True)
def test_status_warns_and_recover_force_names_what_it_aborts(
    target: Target, tmp_path: Path
) -> None:
    """The issue's reproduction: a mistyped checkpoint. Status warns; recover refuses; with
    --force it aborts and names the batch whose output it may have thrown away."""
    _crash(target, "abort")  # batch 1 prepared, undecided: forcing loses nothing here
    typo = str(tmp_path / "chk" / "ordrs")
    cli = _replace_option(_replace_option(target.cli, "--commit-log", None), "--checkpoint", typo)

    status = twopc_cli("status", *cli, env=target.env)
    assert status.returncode == 0, status.stderr
    assert "WARNING: no commit log at" in status.stdout
    assert "nothing for recovery to do" not in status.stdout
    assert "no record of it in this commit log" in status.stdout
    plan = status_json(cli, target.env)
    assert plan["log_found"] is False and plan["warnings"]
    assert all(i["unproven"] for i in plan["in_doubt"])

    refused = twopc_cli("recover", *cli, env=target.env)
    assert refused.returncode == 2
    assert "refused: no commit log at" in refused.stdout
    assert "--force would abort 2 prepared item(s)" in refused.stdout
    assert len(target.leftovers()) == PARTITIONS

    forced = twopc_cli("recover", *cli, "--force", env=target.env)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "forced: aborting batch 1 of query" in forced.stdout
    assert "if that batch was decided, its output is lost" in forced.stdout
    assert target.leftovers() == []
    assert set(target.visible()) == ids_of([0])
    restart = run_process(target.query, timeout=120)
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert sorted(target.visible().elements()) == sorted(ALL_IDS)
