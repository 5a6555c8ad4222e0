"""The source's progress in a consumer group, through a SIGKILLed driver, on real Spark.

The access-log pipeline of ``test_kafka_spark.py`` (Kafka → 5-second windows per IP → Kafka,
and the same windows → Postgres) runs with ``progress=ConsumerGroup(...)``. The first run's
driver is SIGKILLed at a crash point of a middle batch; the second resumes from the
checkpoint. Checked on what the broker shows:

* after the crash, the group is at the end offsets Spark logged for the newest batch whose
  output is visible (``atomic``: the crashed batch, whose transaction carried them), or at
  most one batch behind it (every other sink: the group is set after the commit);
* after the restart, every window is in the output once, and the group is at the source's
  end: ``kafka-consumer-groups.sh --describe`` shows lag 0 at the consumed offsets.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka.admin import AdminClient
from psycopg import sql

from tests.e2e.access_log_pipeline import (
    CRASH_BATCH,
    access_lines,
    assert_each_window_once,
    kafka_windows,
    pipeline_args,
    produce_input,
)
from tests.harness.kafka_topics import (
    TIMEOUT,
    create_topic,
    describe_group_with_kafka_tool,
    end_offset,
    group_offsets,
    unique,
)
from tests.harness.processes import run_process
from tests.harness.status_cli import status_json
from twopc import SourceOffsets
from twopc_kafka import ConsumerGroup

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def _case(mode: str, point: str, drift: str = "none", *, ci: bool = False) -> Any:
    marks = [] if ci else [pytest.mark.extended]
    label = f"{mode}-{point}" + ("" if drift == "none" else f"-group_{drift}")
    return pytest.param(mode, point, drift, id=label, marks=marks)


def _drift(bootstrap: str, group: str, source: str, drift: str) -> None:
    """Move the group where the restart must not care: far ahead of the checkpoint (as
    after an older checkpoint was put back), or gone (expired, or deleted by an operator)."""
    if drift == "ahead":
        ahead = SourceOffsets(99, {source: {0: 10_000}})
        ConsumerGroup(group, bootstrap).publish(ahead, "access-counts", "elsewhere")
        assert group_offsets(bootstrap, group) == {(source, 0): 10_000}
    elif drift == "deleted":
        client = AdminClient({"bootstrap.servers": bootstrap})
        client.delete_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
        assert group_offsets(bootstrap, group) == {}


def _logged_offsets(checkpoint: Path, batch_id: int) -> dict[tuple[str, int], int]:
    """The end offsets Spark logged for a batch (``offsets/<batch>``, the source's line)."""
    line = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()[2]
    return {(t, int(p)): int(o) for t, ps in json.loads(line).items() for p, o in ps.items()}


def _newest_batch(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())


def _args(bootstrap: str, source: str, tmp_path: Path, group: str, *extra: str) -> list[str]:
    return pipeline_args(bootstrap, source, tmp_path, "--progress-group", group, *extra)


@dataclass(frozen=True)
class WindowsTable:
    """A Postgres table for the window rows (the sink creates it)."""

    dsn: str
    name: str

    def windows(self) -> list[tuple[str, str, int]]:
        query = sql.SQL('SELECT window_start, ip, "count" FROM {}').format(
            sql.Identifier(self.name)
        )
        with psycopg.connect(self.dsn) as conn:
            return [(str(w), str(ip), int(n)) for w, ip, n in conn.execute(query).fetchall()]


@pytest.fixture
def table(postgres_dsn: str) -> Iterator[WindowsTable]:
    """A fresh name for the windows table, dropped afterwards."""
    created = WindowsTable(postgres_dsn, f"access_counts_{unique('t').replace('-', '_')}")
    yield created
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(created.name)))


def _assert_at_the_end(bootstrap: str, source: str, group: str, checkpoint: Path) -> None:
    """The group holds the offsets of the query's last batch, which are the source's end,
    and the broker's own tool shows lag 0 there."""
    end = end_offset(bootstrap, source, 0, "read_uncommitted")
    final = _logged_offsets(checkpoint, _newest_batch(checkpoint))
    assert final == {(source, 0): end}
    assert group_offsets(bootstrap, group) == final
    rows = describe_group_with_kafka_tool(bootstrap, group)
    assert [(r.topic, r.partition, r.current, r.log_end, r.lag) for r in rows] == [
        (source, 0, end, end, 0)
    ]


@pytest.mark.parametrize(
    ("mode", "point", "drift"),
    [
        _case("atomic", "before_decision"),
        _case("atomic", "after_decision", "ahead", ci=True),
        _case("atomic", "after_commit"),
        _case("per_partition", "before_decision"),
        _case("per_partition", "after_decision"),
        _case("per_partition", "after_commit", "deleted"),
    ],
)
def test_kafka_to_kafka_group_agrees_with_the_output_through_a_driver_crash(
    kafka_bootstrap: str,
    tmp_path: Path,
    mode: str,
    point: str,
    drift: str,
) -> None:
    lines = access_lines()
    source = create_topic(kafka_bootstrap, unique("access-log"))
    output = create_topic(kafka_bootstrap, unique("access-counts"), partitions=2)
    produce_input(kafka_bootstrap, source, lines)
    group = unique("access-progress")
    args = _args(kafka_bootstrap, source, tmp_path, group, "--output", output, "--mode", mode)
    checkpoint = tmp_path / "checkpoint"

    first = run_process(args, faults=f"{point}:kill@batch={CRASH_BATCH}", timeout=240)
    assert first.returncode == -signal.SIGKILL, first.stderr[-4000:]
    # Every crash point here is after the crashed batch's tasks committed its output. In
    # atomic mode its one transaction also moved the group; per partition, the group is
    # set after the batch commits, so it still shows the batch before.
    shown = CRASH_BATCH if mode == "atomic" else CRASH_BATCH - 1
    assert group_offsets(kafka_bootstrap, group) == _logged_offsets(checkpoint, shown)
    # the group is never read: wherever it is now, the restart writes the same output
    _drift(kafka_bootstrap, group, source, drift)

    second = run_process(args, timeout=240)
    assert second.returncode == 0, second.stderr[-4000:]
    assert_each_window_once(kafka_windows(kafka_bootstrap, output), lines)
    _assert_at_the_end(kafka_bootstrap, source, group, checkpoint)
    # the metrics callback carried the offsets and the lag of every committed batch
    last = [e for e in second.of("batch") if e["status"] == "committed"][-1]
    assert last["source_lag"] == 0 and last["progress_error"] is None, last


@pytest.mark.parametrize(
    ("point", "drift"),
    [
        pytest.param("after_decision", "deleted", id="after_decision-group_deleted"),
        pytest.param("between_commits", "none", id="between_commits", marks=pytest.mark.extended),
        pytest.param(
            "after_commit", "ahead", id="after_commit-group_ahead", marks=pytest.mark.extended
        ),
    ],
)
def test_kafka_to_postgres_group_follows_the_commits_through_a_driver_crash(
    kafka_bootstrap: str,
    table: WindowsTable,
    tmp_path: Path,
    point: str,
    drift: str,
) -> None:
    lines = access_lines()
    source = create_topic(kafka_bootstrap, unique("access-log"))
    produce_input(kafka_bootstrap, source, lines)
    group = unique("access-progress")
    args = _args(
        kafka_bootstrap, source, tmp_path, group, "--postgres-dsn", table.dsn, "--table", table.name
    )
    checkpoint = tmp_path / "checkpoint"
    first = run_process(args, faults=f"{point}:kill@batch={CRASH_BATCH}", timeout=240)
    assert first.returncode == -signal.SIGKILL, first.stderr[-4000:]
    # never ahead of the rows: the group moves only after a batch's commit
    assert group_offsets(kafka_bootstrap, group) == _logged_offsets(checkpoint, CRASH_BATCH - 1)
    _drift(kafka_bootstrap, group, source, drift)

    second = run_process(args, timeout=240)
    assert second.returncode == 0, second.stderr[-4000:]
    assert_each_window_once(table.windows(), lines)
    _assert_at_the_end(kafka_bootstrap, source, group, checkpoint)


@pytest.mark.extended  # ~50 s; CI runs the same publish path through Kafka -> Postgres
def test_a_format_query_publishes_its_progress_after_each_commit(
    kafka_bootstrap: str,
    table: WindowsTable,
    tmp_path: Path,
) -> None:
    """``writeStream.format("twopc")`` with the group as options: the commit's process dies
    right after a decision (before the publish); on restart Spark calls ``commit`` for the
    batch again, which publishes, and the run ends at lag 0 with every window once."""
    lines = access_lines()
    source = create_topic(kafka_bootstrap, unique("access-log"))
    produce_input(kafka_bootstrap, source, lines)
    group = unique("format-progress")
    args = _args(
        kafka_bootstrap,
        source,
        tmp_path,
        group,
        "--postgres-dsn",
        table.dsn,
        "--table",
        table.name,
        "--entry",
        "format",
    )
    checkpoint = tmp_path / "checkpoint"
    first = run_process(args, faults=f"after_decision:exit@batch={CRASH_BATCH}", timeout=240)
    assert first.returncode != 0, first.stderr[-4000:]
    # Spark may finish the decided batch before the query stops (it plans the writer
    # again to abort): either way the group shows the last batch the commit log calls
    # committed, never one whose rows are not committed
    status = status_json(
        [
            "postgres",
            "--sink-id",
            "access-counts",
            "--checkpoint",
            str(checkpoint),
            "--option",
            f"dsn={table.dsn}",
            "--option",
            f"table={table.name}",
            "--option",
            "transaction_mode=two_phase",
            "--no-group",
        ],
        dict(os.environ),
    )
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    (shown,) = [q for q in status["queries"] if q["query_id"] == query_id]
    last = shown["log_last_committed"]
    assert last in (CRASH_BATCH - 1, CRASH_BATCH), shown
    assert shown["source_offsets"]["batch_id"] == last
    assert group_offsets(kafka_bootstrap, group) == _logged_offsets(checkpoint, last)
    second = run_process(args, timeout=240)
    assert second.returncode == 0, second.stderr[-4000:]
    assert_each_window_once(table.windows(), lines)
    _assert_at_the_end(kafka_bootstrap, source, group, checkpoint)
