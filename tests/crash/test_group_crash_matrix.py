"""Crash matrix of a SinkGroup (docs/groups.md): one query writing two targets with one
decision, its driver SIGKILLed at every driver crash point of batch 1, then restarted.

Groups: PostgreSQL + MariaDB (both ``two_phase``), files + PostgreSQL ``two_phase``,
PostgreSQL ``two_phase`` + Kafka ``atomic`` as the last resource (read back with a
``read_committed`` consumer), Delta + PostgreSQL ``two_phase`` and Delta + Kafka
``atomic`` (read back with deltalake). The members get different projections (the files member only
ids). After the crash no target
holds a row twice, and no target holds a batch that the decision does not name; after the
restart every target holds every id once, with nothing prepared or staged. The local
engine's query runs every point in CI; the Spark query (the driver a real PySpark
process) runs a representative point in CI and the others under ``--extended``.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.backend_cases import add_input, new_target
from tests.harness.group_recipe import GroupRecipe
from tests.harness.processes import run_process
from tests.harness.targets import Target
from twopc import CommitLog
from twopc.faults import CrashPoint

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BATCHES, PARTITIONS, ROWS, CRASH_BATCH = 3, 2, 10, 1
EXPECTED = {
    b * 1000 + p * ROWS + i for b in range(BATCHES) for p in range(PARTITIONS) for i in range(ROWS)
}
GROUPS = {
    "postgres+mysql": [
        ("orders", "postgres", "two_phase", ("id", "payload")),
        ("audit", "mysql", "two_phase", ("id", "payload")),
    ],
    "files+postgres": [
        ("audit", "files", "parquet", ("id",)),
        ("orders", "postgres", "two_phase", ("id", "payload")),
    ],
    "postgres+kafka": [
        ("orders", "postgres", "two_phase", ("id", "payload")),
        ("outbox", "kafka", "atomic", ("id", "key", "payload")),
    ],
    "delta+postgres": [
        ("events", "delta", "append", ("id", "payload")),
        ("orders", "postgres", "two_phase", ("id", "payload")),
    ],
    "delta+kafka": [
        ("events", "delta", "append", ("id", "payload")),
        ("outbox", "kafka", "atomic", ("id", "key", "payload")),
    ],
}
_LAST_RESOURCE = {"postgres+kafka", "delta+kafka"}
"""Groups with a last resource: one driver member, so no ``between_members``."""
_ONE_COMMIT = {"delta+kafka"}
"""Groups whose driver members commit a batch in one call (a Delta commit per batch): no
``between_commits``."""


def _points(group: str) -> list[CrashPoint]:
    """The driver points a batch of ``group`` passes, in protocol order."""
    last = group in _LAST_RESOURCE
    return [
        p
        for p in CrashPoint
        if p.on_driver
        and not p.in_recovery
        and (p.needs_last_resource == last if p.in_group_only else True)
        and not (group in _ONE_COMMIT and p is CrashPoint.BETWEEN_COMMITS)
    ]


CASES = [
    pytest.param(group, point, id=f"{group}-{point.value}")
    for group in GROUPS
    for point in _points(group)
]

Group = tuple[GroupRecipe, list[Target]]


@pytest.fixture
def group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Group]:
    members, targets = [], []
    for name, backend, mode, columns in GROUPS[request.param]:
        target, spec = new_target(request, backend, mode, tmp_path / name, prefix=f"g{name[0]}")
        members.append((name, spec, columns))
        targets.append(target)
    recipe = GroupRecipe.of(f"grp-{uuid.uuid4().hex[:8]}", *members)
    yield recipe, targets
    for target, member in zip(targets, recipe.members, strict=True):
        target.cleanup(member.sink)


def _crash_then_restart(
    args: list[str],
    group: Group,
    point: CrashPoint,
    *,
    log: str,
    expected: set[int],
    crashed_batch: set[int],
    timeout: float,
) -> None:
    """Kill the driver at ``point`` of batch 1, check what each target shows, restart, and
    check every target exactly-once. ``crashed_batch``: the ids of batch 1."""
    recipe, targets = group
    crashed = run_process(args, faults=f"{point.value}:kill@batch={CRASH_BATCH}", timeout=timeout)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    decided = CommitLog(log).decision(_query_id(log), CRASH_BATCH) is not None
    for target, member in zip(targets, recipe.members, strict=True):
        seen = target.committed(member.sink)
        assert max(seen.values(), default=1) == 1, f"{member.name}: duplicates after {point}"
        # a target may show the crashed batch only if it was decided: never a batch that
        # another target will never get
        assert decided or not crashed_batch & set(seen), f"{member.name}: undecided rows"
    finished = run_process(args, timeout=timeout)
    assert finished.returncode == 0, finished.stderr[-3000:]
    for target, member in zip(targets, recipe.members, strict=True):
        seen = target.committed(member.sink)
        assert sorted(i for i, n in seen.items() if n > 1) == [], member.name
        assert set(seen) == expected, member.name
        assert target.leftovers(member.sink) == [], member.name


def _query_id(log: str) -> str:
    """The one query the commit log holds."""
    (query_id,) = CommitLog(log).query_ids()
    return query_id


def test_every_group_passes_the_points_it_is_crashed_at() -> None:
    assert CrashPoint.BETWEEN_MEMBERS in _points("postgres+mysql")
    assert CrashPoint.AFTER_LAST_RESOURCE in _points("postgres+kafka")
    assert CrashPoint.BETWEEN_MEMBERS not in _points("postgres+kafka")
    assert CrashPoint.BETWEEN_COMMITS in _points("delta+postgres")


@pytest.mark.parametrize(("group", "point"), CASES, indirect=["group"])
def test_local_driver_killed_at_every_point(
    group: Group, point: CrashPoint, tmp_path: Path
) -> None:
    recipe, _ = group
    checkpoint = str(tmp_path / "chk")
    args = ["-m", "tests.harness.recipe_local_query", recipe.dumps(), checkpoint]
    args += [str(BATCHES), str(PARTITIONS), str(ROWS), "1"]
    crashed = {i for i in EXPECTED if i // 1000 == CRASH_BATCH}
    _crash_then_restart(
        args,
        group,
        point,
        log=recipe.commit_log(checkpoint),
        expected=EXPECTED,
        crashed_batch=crashed,
        timeout=180,
    )


def _spark_case(group: str, point: CrashPoint, *, ci: bool = False) -> object:
    marks = [] if ci else [pytest.mark.extended]
    return pytest.param(group, point, id=f"{group}-{point.value}", marks=marks)


_SPARK_CI = {  # a representative point per group
    # postgres+mysql after the decision: tests/crash/test_checkpoint_lost.py kills a group
    # with both servers' members there in CI, and recovery commits the decided batch
    ("files+postgres", CrashPoint.BETWEEN_MEMBERS),
    ("postgres+kafka", CrashPoint.AFTER_LAST_RESOURCE),
    # a Delta table and its outbox topic: Kafka's transaction decided, the Delta commit not
    # yet made when the driver dies
    ("delta+kafka", CrashPoint.AFTER_LAST_RESOURCE),
}
SPARK_CASES = [
    _spark_case(name, point, ci=(name, point) in _SPARK_CI)
    for name in GROUPS
    for point in _points(name)
]


@pytest.mark.slow
@pytest.mark.parametrize(("group", "point"), SPARK_CASES, indirect=["group"])
def test_spark_driver_killed_at_every_point(
    group: Group, point: CrashPoint, tmp_path: Path
) -> None:
    recipe, _ = group
    source = tmp_path / "in"
    first, crashed = add_input(source, 0), add_input(source, 1)
    expected = first | crashed | add_input(source, 2)
    checkpoint = str(tmp_path / "chk")
    args = ["-m", "tests.harness.recipe_spark_query", "--spec", recipe.dumps()]
    args += ["--checkpoint", checkpoint, "--input", str(source), "--partitions", "2"]
    _crash_then_restart(
        args,
        group,
        point,
        log=recipe.commit_log(checkpoint),
        expected=expected,
        crashed_batch=crashed,
        timeout=300,
    )


RECOVERY_SEQUENCES = [
    # a decided batch, then recovery killed between its commits, then before them
    (
        "postgres+mysql",
        "commit",
        ["after_decision", "recovery_between_commits", "recovery_before_commit"],
    ),
    # Kafka committed (the decision), then recovery killed before and between its commits
    (
        "postgres+kafka",
        "commit",
        ["after_last_resource", "recovery_before_commit", "recovery_between_commits"],
    ),
    # recorded, Kafka never ran: recovery fences it and aborts; killed between the aborts
    ("postgres+kafka", "abort", ["before_last_resource", "recovery_between_aborts"]),
]


@pytest.mark.parametrize(
    ("group", "points"),
    [
        pytest.param(
            group,
            points,
            id=f"{group}-{kind}",
            marks=[pytest.mark.extended] if group in _LAST_RESOURCE else [],
        )
        for group, kind, points in RECOVERY_SEQUENCES
    ],
    indirect=["group"],
)
def test_local_recovery_of_a_group_killed_again(
    group: Group, points: list[str], tmp_path: Path
) -> None:
    """The driver killed at a point of batch 1, then each restart killed inside the
    recovery of that batch, then a clean restart: no target ever shows an id twice or a
    batch the decision does not hold, and at the end every target holds every id once."""
    recipe, _ = group
    checkpoint = str(tmp_path / "chk")
    args = ["-m", "tests.harness.recipe_local_query", recipe.dumps(), checkpoint]
    args += [str(BATCHES), str(PARTITIONS), str(ROWS), "1"]
    crashed_batch = {i for i in EXPECTED if i // 1000 == CRASH_BATCH}
    for point in points:
        crashed = run_process(args, faults=f"{point}:kill@batch={CRASH_BATCH}", timeout=180)
        assert crashed.returncode == -signal.SIGKILL, (point, crashed.stderr[-3000:])
        shown = []
        for target, member in _pairs(group):
            seen = target.committed(member.sink)
            assert max(seen.values(), default=1) == 1, f"{member.name}: duplicates at {point}"
            shown.append(set(seen) & crashed_batch)
        if "abort" in point or point == "before_last_resource":
            assert shown == [set()] * len(shown), f"a member shows an undecided batch: {point}"
    finished = run_process(args, timeout=180)
    assert finished.returncode == 0, finished.stderr[-3000:]
    for target, member in _pairs(group):
        seen = target.committed(member.sink)
        assert sorted(i for i, n in seen.items() if n > 1) == [], member.name
        assert set(seen) == EXPECTED, member.name
        assert target.leftovers(member.sink) == [], member.name


def _pairs(group: Group) -> list[tuple[Target, Any]]:
    recipe, targets = group
    return list(zip(targets, recipe.members, strict=True))
