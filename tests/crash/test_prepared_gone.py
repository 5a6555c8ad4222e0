"""A decided prepared transaction that the database no longer has (an operator ran
``ROLLBACK PREPARED`` / ``XA ROLLBACK``, or the database was restored), on real PostgreSQL
and MariaDB in ``two_phase`` mode, through real Spark.

The driver fails right after the decision of batch 1 (both partitions prepared, nothing
committed). Then, by hand:

* rolled back (all branches, or only partition 1's): ``twopc status`` shows the lost work,
  the restart fails naming the batch and the transaction, ``twopc recover`` fails the same
  way, and the table never shows the lost rows as if all were well. The documented remedy
  (delete the batch's decision, restart) then writes the batch exactly once.
* committed (``COMMIT PREPARED`` of one branch): the marker row proves it, so the restart
  counts it as committed, commits the other branch and ends exactly once.

The first case also runs with the driver SIGKILLed after the decision (local engine in its
own process, no JVM): every restart fails the same way and writes no later batch.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.harness.backend_runs import BackendRun, finish_by_hand, run_query, write_input
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.processes import local_query, run_process
from tests.harness.status_cli import status_json, twopc_cli

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

SQL_TWO_PHASE = ["postgres-two_phase", "mysql-two_phase"]
BATCHES = [list(range(40)), list(range(1000, 1040))]
ALL_IDS = {i for ids in BATCHES for i in ids}


def _crash_after_decision(spark: Any, tmp_path: Path, run: BackendRun) -> tuple[str, list[str]]:
    """Batch 0 committed; batch 1 decided, both its branches prepared. Returns the query id
    and the two gids (``gtrid:bqual``), partition 0's first."""
    from pyspark.errors import StreamingQueryException

    write_input(tmp_path / "in", BATCHES)
    writer = run.writer(faults="after_decision:raise@batch=1")
    with pytest.raises(StreamingQueryException, match="after_decision"):
        run_query(spark, run, tmp_path / "in", tmp_path / "chk", writer)
    gids = sorted(run.target.prepared(run.sink_id), key=_partition)
    # bqual is batch-partition-attempt, the attempt named by Spark's task attempt id
    assert [_partition(g) for g in gids] == [0, 1], gids
    assert all(g.rpartition(":")[2].startswith("1-") for g in gids), gids
    assert_exactly_once(run.committed(), set(BATCHES[0]))
    return writer.metrics[0].query_id, gids


def _cli(run: BackendRun) -> tuple[list[str], dict[str, str]]:
    """``twopc status|recover`` arguments for the run's sink, the DSN from the environment."""
    args = [
        run.spec.backend,
        "--sink-id",
        run.sink_id,
        "--option-env",
        "dsn=TWOPC_TEST_DSN",
        "--option",
        f"table={run.spec.table}",
        "--option",
        "transaction_mode=two_phase",
        "--commit-log",
        run.log_url,
    ]
    return args, {"TWOPC_TEST_DSN": run.spec.address}


def _partition(gid: str) -> int:
    """The partition a gid (``gtrid:batch-partition-attempt``) belongs to."""
    return int(gid.rpartition(":")[2].split("-")[1])


def _named(run: BackendRun, gid: str) -> str:
    """How the error names a transaction: the gid, or MySQL's XA xid."""
    if run.spec.backend == "postgres":
        return f"gid '{gid}'"
    gtrid, _, bqual = gid.partition(":")
    return f"xid '{gtrid}','{bqual}'"


@pytest.mark.parametrize("gone", ["all", "partition1"])
@pytest.mark.parametrize("backend", SQL_TWO_PHASE, indirect=True)
def test_rolled_back_prepared_transaction_fails_loudly(
    spark: Any,
    tmp_path: Path,
    backend: BackendRun,
    gone: str,
) -> None:
    from pyspark.errors import StreamingQueryException

    query_id, gids = _crash_after_decision(spark, tmp_path, backend)
    rolled_back = gids if gone == "all" else gids[1:]
    for gid in rolled_back:
        finish_by_hand(backend, "ROLLBACK", gid)

    cli, env = _cli(backend)
    status = status_json(cli, env)
    actions = Counter((i["kind"], i["action"]) for i in status["in_doubt"])
    assert actions == Counter(
        {
            ("decision", "commit"): 1,
            ("lost", "fail"): len(rolled_back),
            ("prepared", "commit"): len(gids) - len(rolled_back),
        }
    )
    lost = sorted(i["partition"] for i in status["in_doubt"] if i["kind"] == "lost")
    assert lost == ([0, 1] if gone == "all" else [1])

    # the restart fails, naming the batch and the first transaction that is gone
    with pytest.raises(StreamingQueryException) as failure:
        run_query(spark, backend, tmp_path / "in", tmp_path / "chk", backend.writer())
    message = str(failure.value)
    assert f"sink {backend.sink_id!r}, batch 1, partition {lost[0]}" in message, message
    assert _named(backend, rolled_back[0]) in message, message
    assert "neither prepared nor committed" in message, message
    visible = backend.committed()
    in_batch_1 = set(visible) & set(BATCHES[1])
    assert_exactly_once(visible, set(BATCHES[0]) | in_batch_1)
    if gone == "all":
        assert in_batch_1 == set()
    else:  # partition 0's branch was still prepared: recovery committed it, then failed
        assert set() < in_batch_1 < set(BATCHES[1])
    assert backend.leftovers() == []

    # twopc recover cannot fix it either, and says why
    recover = twopc_cli("recover", *cli, env=env)
    assert recover.returncode == 1, recover.stdout + recover.stderr
    assert _named(backend, rolled_back[0]) in recover.stdout, recover.stdout

    # the documented remedy: forget the decision; the replay writes what is missing, once
    (tmp_path / "log" / query_id / f"{1:020d}.decision.json").unlink()
    restarted = backend.writer()
    run_query(spark, backend, tmp_path / "in", tmp_path / "chk", restarted)
    assert [(m.batch_id, m.status) for m in restarted.metrics] == [(1, "committed")]
    assert_exactly_once(backend.committed(), ALL_IDS)
    assert backend.leftovers() == []
    assert status_json(cli, env)["in_doubt"] == []


@pytest.mark.parametrize("backend", SQL_TWO_PHASE, indirect=True)
def test_prepared_transaction_committed_by_hand_counts_as_committed(
    spark: Any,
    tmp_path: Path,
    backend: BackendRun,
) -> None:
    _, gids = _crash_after_decision(spark, tmp_path, backend)
    finish_by_hand(backend, "COMMIT", gids[1])

    cli, env = _cli(backend)
    actions = Counter((i["kind"], i["action"]) for i in status_json(cli, env)["in_doubt"])
    assert actions == Counter({("decision", "commit"): 1, ("prepared", "commit"): 1})

    restarted = backend.writer()
    run_query(spark, backend, tmp_path / "in", tmp_path / "chk", restarted)
    assert [(m.batch_id, m.status) for m in restarted.metrics] == [(1, "skipped")]
    assert_exactly_once(backend.committed(), ALL_IDS)
    assert backend.leftovers() == []


@pytest.mark.parametrize("backend", SQL_TWO_PHASE, indirect=True)
def test_driver_killed_after_the_decision_then_rolled_back(
    tmp_path: Path, backend: BackendRun
) -> None:
    """The same through a SIGKILL of the driver (local engine, its own process)."""
    query = local_query(
        "local_sql_query",
        backend=backend.spec.backend,
        dsn=backend.spec.address,
        table=backend.spec.table,
        transaction_mode="two_phase",
        checkpoint=tmp_path / "chk",
        batches=3,
        partitions=2,
        rows=10,
        sink_id=backend.sink_id,
    )
    crash = run_process(query, faults="after_decision:kill@batch=1", timeout=120)
    assert crash.returncode == -signal.SIGKILL, crash.stderr[-3000:]
    gids = sorted(backend.target.prepared(backend.sink_id), key=_partition)
    assert [_partition(g) for g in gids] == [0, 1], gids
    for gid in gids:
        finish_by_hand(backend, "ROLLBACK", gid)

    for _ in range(2):  # every restart fails the same way; none writes past the gap
        restart = run_process(query, timeout=120)
        assert restart.returncode not in (0, -signal.SIGKILL), restart.stderr[-3000:]
        assert f"sink {backend.sink_id!r}, batch 1, partition 0" in restart.stderr
        assert _named(backend, gids[0]) in restart.stderr, restart.stderr[-3000:]
        assert_exactly_once(backend.committed(), set(range(20)))  # batch 0 only
        assert backend.leftovers() == []
