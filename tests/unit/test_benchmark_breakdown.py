"""What reads a benchmark's misses: the breakdown of a writer's batch
(``benchmarks.spark_writers.breakdown``) into before, in and after its Spark jobs, from
recorded calls (the command itself runs Spark and is run by hand: docs/benchmarks.md), and
the warm-up runs that keep a short run's first, cold repetition out of its medians, and
the balanced orders the overhead variants run in."""

from __future__ import annotations

from collections import Counter

import pytest
from benchmarks.spark_writers.breakdown import Call, Job, Stage, summary
from benchmarks.spark_writers.config import BenchConfig
from benchmarks.spark_writers.runner import balanced_orders

pytestmark = pytest.mark.unit


def _call(side: str, wall: float, jobs: list[tuple[float, float]], **phases: float) -> Call:
    stage = Stage(0, 2, 10.0, 1.0, task_run_ms=30.0, task_cpu_ms=20.0, task_deserialize_ms=5.0)
    return Call(side, 0, wall, [Job(i, at, ms, [stage]) for i, (at, ms) in enumerate(jobs)], phases)


def test_a_call_is_split_around_its_jobs() -> None:
    call = _call("twopc", 1000.0, [(100.0, 300.0), (450.0, 400.0)])
    assert call.before_jobs_ms == 100.0
    assert call.in_jobs_ms == 700.0
    assert call.after_jobs_ms == 150.0  # 1000 - (450 + 400)


def test_a_call_without_jobs_is_all_before() -> None:
    call = _call("spark", 12.0, [])
    assert (call.before_jobs_ms, call.in_jobs_ms, call.after_jobs_ms) == (12.0, 0.0, 0.0)


def _phases(write: float, decide: float, commit: float) -> dict[str, float]:
    return {
        "recover": 0.0,
        "write": write,
        "decide": decide,
        "commit": commit,
        "total": write + decide + commit,
    }


def test_the_summary_has_medians_per_writer_and_twopcs_phases() -> None:
    calls = [
        _call("twopc", 900.0, [(100.0, 700.0)], **_phases(880.0, 5.0, 10.0)),
        _call("spark", 600.0, [(50.0, 500.0)]),
        _call("twopc", 1100.0, [(120.0, 800.0)], **_phases(1080.0, 7.0, 12.0)),
        _call("spark", 700.0, [(60.0, 600.0)]),
    ]
    table = summary(calls).splitlines()
    assert table[2] == "| twopc | 2 | 1000 | 110 | 750 | 140 | 1 | 30 | 20 |"
    assert table[3] == "| spark | 2 | 650 | 55 | 550 | 45 | 1 | 30 | 20 |"
    assert table[-1] == (
        "twopc's phases, medians (ms): recover 0.0, write 980.0, decide 6.0, commit 11.0, "
        "total 997.0"
    )


def test_phases_are_summarized_per_twopc_writer() -> None:
    calls = [
        _call("twopc_null", 100.0, [(10.0, 80.0)], **_phases(95.0, 1.0, 1.0)),
        _call("twopc_files", 200.0, [(10.0, 150.0)], **_phases(190.0, 3.0, 5.0)),
        _call("python_job", 90.0, [(10.0, 75.0)]),
    ]
    lines = summary(calls).splitlines()
    assert lines[-2].startswith("twopc_null's phases, medians (ms): recover 0.0, write 95.0")
    assert lines[-1].startswith("twopc_files's phases, medians (ms): recover 0.0, write 190.0")


@pytest.mark.parametrize(
    ("reps", "asked", "warmups"), [(1, None, 1), (2, None, 1), (3, None, 0), (5, 2, 2), (1, 0, 0)]
)
def test_short_runs_warm_every_writer_up_first(reps: int, asked: int | None, warmups: int) -> None:
    assert BenchConfig(reps=reps, warmup_runs=asked).warmups == warmups


@pytest.mark.parametrize("count", [2, 3, 4, 7])
def test_balanced_orders_give_every_name_every_predecessor_equally_often(count: int) -> None:
    names = tuple("abcdefg"[:count])
    orders = balanced_orders(names)
    assert all(sorted(order) == sorted(names) for order in orders)
    follows = Counter((o[i], o[i + 1]) for o in orders for i in range(count - 1))
    assert len(follows) == count * (count - 1)  # every ordered pair occurs
    assert len(set(follows.values())) == 1  # and equally often
    assert len(set(Counter(o[0] for o in orders).values())) == 1
    assert len(Counter(o[0] for o in orders)) == count
