"""The seeds' example with real Spark: a streaming word count upserted into `wc(word PRIMARY
KEY, num)` exactly-once through a SIGKILL of the driver or of a task's Python worker, on
MariaDB and on PostgreSQL (whose upsert is a ``MERGE`` under a savepoint)."""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.harness.databases import Database
from tests.harness.processes import run_process

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "the dog sleeps and the fox runs",
    "exactly once means the count of the is right",
    "a fox a dog a cat",
]


_EXTENDED = [pytest.mark.extended]  # CI keeps one crash per database; --extended runs all


@pytest.mark.parametrize(
    ("backend", "mode", "crash"),
    [
        ("mysql", "transaction", "after_task_commit:kill@batch=2,partition=1"),
        pytest.param("mysql", "two_phase", "after_decision:kill@batch=2", marks=_EXTENDED),
        ("postgres", "two_phase", "between_commits:kill@batch=2"),
        # the upsert's MERGE (under a savepoint) ran, the branch is prepared, the worker dies
        ("postgres", "two_phase", "after_pre_commit:kill@batch=2,partition=1"),
        pytest.param(
            "postgres", "transaction", "after_pre_commit:kill@batch=2,partition=1", marks=_EXTENDED
        ),
        # shuffle_by_key=False: the counts are grouped by word already, no shuffle by key
        ("postgres", "two_phase", "after_pre_commit:kill@batch=2,partition=1,no-shuffle"),
        pytest.param(
            "mysql",
            "transaction",
            "after_task_commit:kill@batch=2,partition=1,no-shuffle",
            marks=_EXTENDED,
        ),
        pytest.param("postgres", "transaction", "after_commit:kill@batch=2", marks=_EXTENDED),
    ],
)
def test_word_count_is_exactly_once_through_a_crash(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, mode: str, crash: str
) -> None:
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    db = Database(backend, dsn)
    table = f"wc_{uuid.uuid4().hex[:8]}"
    db.query(f"CREATE TABLE {table} (word VARCHAR(255) PRIMARY KEY, num BIGINT NOT NULL)")
    source = tmp_path / "in"
    source.mkdir()
    for index, text in enumerate(TEXTS):
        (source / f"part-{index:03d}.txt").write_text(text + "\n")
    crash, no_shuffle, _ = crash.partition(",no-shuffle")
    args = [
        "examples/wordcount_mysql.py",
        str(source),
        str(tmp_path / "chk"),
        dsn,
        "--backend",
        backend,
        "--table",
        table,
        "--transaction-mode",
        mode,
        *(["--no-shuffle-by-key"] if no_shuffle else []),
    ]
    try:
        first = run_process(args, faults=crash)
        if "partition=" in crash:
            assert first.returncode != 0, first.stderr[-3000:]  # the worker died: batch failed
        else:
            assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
        second = run_process(args)
        assert second.returncode == 0, second.stderr[-3000:]

        expected = Counter(word for text in TEXTS for word in text.split())
        rows = dict(db.query(f"SELECT word, num FROM {table}"))
        assert {w: int(n) for w, n in rows.items()} == dict(expected)
        assert db.prepared("wordcount") == []
    finally:
        db.query(f"DROP TABLE IF EXISTS {table}")
