"""Seed -> scenario is a pure function: the reproduction command depends on it."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from tests.chaos import scenario as scenario_module
from tests.chaos.campaign import repro
from tests.chaos.scenario import (
    ALL_GROUP_MODES,
    DELTA_GROUP_MODES,
    MODES,
    SPECULATIVE_MASTER,
    NoScenario,
    Options,
    Scenario,
    draw,
)
from twopc.faults import FaultPlan

pytestmark = pytest.mark.unit


def test_the_same_seed_draws_the_same_scenario() -> None:
    options = Options(spark_share=0.3)
    assert [draw(s, options) for s in range(200)] == [draw(s, options) for s in range(200)]
    assert len({draw(s, options).describe() for s in range(200)}) > 150


def test_every_fault_parses_and_names_a_batch_of_the_run() -> None:
    for seed in range(2000):
        scenario = draw(seed, Options())
        if scenario.fault is None:
            assert scenario.timing == "delay" and scenario.delay is not None
            continue
        [fault] = FaultPlan.parse(scenario.fault).faults
        assert fault.batch_id is not None and 0 <= fault.batch_id < scenario.batches
        if fault.partition is not None:
            assert 0 <= fault.partition < scenario.partitions


def test_the_mix_covers_every_backend_mode_and_target() -> None:
    scenarios = [draw(seed, Options(spark_share=0.05)) for seed in range(3000)]
    groups = {("group", m) for m in ALL_GROUP_MODES}
    assert {(s.backend, s.mode) for s in scenarios} == {
        (b, m) for b, modes in MODES.items() for m in modes
    } | groups
    targets = Counter(s.service or s.target for s in scenarios)
    assert set(targets) == {"driver", "worker", "executor", "postgres", "mariadb", "kafka", "s3"}
    assert all(s.master.startswith("local-cluster") for s in scenarios if s.target == "executor")
    assert 0.03 < sum(s.engine == "spark" for s in scenarios) / len(scenarios) < 0.07


def test_filters_narrow_the_draw_and_appear_in_the_reproduction_command() -> None:
    options = Options(backends=("kafka:atomic",), targets=("driver",))
    scenario = draw(7, options)
    assert (scenario.backend, scenario.mode, scenario.target) == ("kafka", "atomic", "driver")
    assert repro(scenario, options, "") == (
        "scripts/chaos --seed 7 --runs 1 --backend=kafka:atomic --target=driver --spark-share=0.01"
    )
    with pytest.raises(NoScenario):
        draw(1, Options(backends=("files",), targets=("service",)))


def test_events_are_drawn_apart_and_only_where_they_apply() -> None:
    options = Options(spark_share=0.2)
    scenarios = [draw(seed, options) for seed in range(3000)]
    assert {s.event for s in scenarios} == {
        "none",
        "rescale",
        "rename",
        "restore",
        "stop",
        "speculate",
    }
    for s in scenarios:
        assert s.event != "rename" or s.backend not in ("files", "s3")
        assert s.event != "stop" or s.engine == "spark"
        if s.event == "speculate":
            assert (s.engine, s.partitions) == ("spark", 2) and s.mode != "atomic"
            assert s.restart_master == SPECULATIVE_MASTER and s.master != SPECULATIVE_MASTER
            [slow, *_] = FaultPlan.parse(s.restart_faults or "").faults
            assert (slow.partition, slow.batch_id) == (1, None)  # every batch of a restart
        else:
            assert (s.restart_master, s.restart_faults, s.loser) == (s.master, None, "")
        if s.event == "rescale":
            assert s.partitions_after not in (0, s.partitions)
        else:
            assert s.partitions_after == 0


def test_pauses_are_drawn_apart_and_only_where_a_service_runs() -> None:
    options = Options(spark_share=0.2)
    scenarios = [draw(seed, options) for seed in range(3000)]
    paused = [s for s in scenarios if s.pause_for]
    assert all(s.backend != "files" for s in paused)
    with_service = [s for s in scenarios if s.backend != "files"]
    assert 0.08 < len(paused) / len(with_service) < 0.16
    assert all(1.0 <= s.pause_for <= 8.0 and s.pause_at >= 0.0 for s in paused)
    assert {s.engine for s in paused} == {"local", "spark"}
    # a pause leaves the rest of the seed's scenario as it was drawn without it
    for s in paused[:50]:
        assert replace(s, pause_at=0.0, pause_for=0.0).describe() in s.describe()


def test_s3_is_a_share_of_the_files_runs_and_leaves_every_other_seed_as_it_was() -> None:
    """S3 joined the mix after seeds were recorded: a seed not drawn as S3 draws what it
    drew before (the draw without S3), and ``--backend s3`` draws S3 only."""
    without = Options(backends=("files", "postgres", "mysql", "kafka"))
    for seed in range(1000):
        scenario = draw(seed, Options())
        if scenario.backend == "group":
            continue  # tested below
        if scenario.backend not in ("s3", "iceberg", "delta"):
            assert scenario == draw(seed, without)
        else:
            assert draw(seed, without).backend == "files"
    only = [draw(seed, Options(backends=("s3",))) for seed in range(200)]
    assert {s.backend for s in only} == {"s3"}
    assert {s.service for s in only} == {None, "s3"}
    assert all(s.event != "rename" for s in only)


def test_iceberg_is_a_share_of_the_files_runs_and_leaves_every_other_seed_as_it_was() -> None:
    """Iceberg joined the mix after seeds were recorded (issue 33): a seed not drawn as
    Iceberg draws what it drew before, an Iceberg seed was a local-disk ``files`` run, a
    third of them put the catalog on PostgreSQL (the service a ``service`` run kills), and
    ``--backend iceberg`` draws Iceberg only, never ``rename`` nor ``between_commits``."""
    without = Options(backends=("files", "s3", "postgres", "mysql", "kafka", "delta"))
    modes = []
    for seed in range(1000):
        scenario = draw(seed, Options())
        if scenario.backend == "group":
            continue
        if scenario.backend == "iceberg":
            # a files run, or (Delta being a share of the files runs) a Delta run
            assert draw(seed, without).backend in ("files", "delta")
            modes.append(scenario.mode)
        else:
            assert scenario == draw(seed, without)
    assert len(modes) > 20 and 0.15 < modes.count("postgres") / len(modes) < 0.55
    only = [draw(seed, Options(backends=("iceberg",))) for seed in range(300)]
    assert {s.backend for s in only} == {"iceberg"}
    assert {s.mode for s in only} == {"sqlite", "postgres"}
    assert {s.service for s in only if s.mode == "sqlite"} == {None}
    assert {s.service for s in only if s.target == "service"} == {"postgres"}
    assert all(s.event != "rename" for s in only)
    assert not any(s.fault and s.fault.startswith("between_commits") for s in only)


def test_the_rest_catalog_is_drawn_only_when_named() -> None:
    """``iceberg:rest`` (the REST catalog of scripts/services) joined after seeds were
    recorded: no draw without it names it, so every seed keeps its scenario; named, it is
    all that is drawn, and its service (what a ``service`` run kills) is the REST server."""
    from tests.chaos.campaign import parse_args

    assert all(draw(seed, Options()).mode != "rest" for seed in range(300))
    assert all(draw(seed, Options(backends=("iceberg",))).mode != "rest" for seed in range(300))
    only = [draw(seed, Options(backends=("iceberg:rest",))) for seed in range(300)]
    assert {(s.backend, s.mode) for s in only} == {("iceberg", "rest")}
    assert {s.own_service for s in only} == {"iceberg-rest"}
    assert {s.service for s in only if s.target == "service"} == {"iceberg-rest"}
    assert parse_args(["--backend", "iceberg:rest"]).backend == ["iceberg:rest"]


def test_a_group_is_a_share_of_the_sql_two_phase_runs_and_leaves_every_other_seed_as_it_was() -> (
    None
):
    """Groups joined the mix after seeds were recorded: a seed not drawn as a group draws
    what it drew before (the draw without groups); a group seed is, without groups, a SQL
    ``two_phase`` run of the group's first member; ``--backend group`` draws groups only,
    never with ``rename``."""
    without = Options(backends=("files", "s3", "postgres", "mysql", "kafka", "iceberg", "delta"))
    groups = 0
    for seed in range(1000):
        scenario = draw(seed, Options())
        before = draw(seed, without)
        if scenario.backend != "group":
            assert scenario == before
            continue
        if scenario.mode in DELTA_GROUP_MODES:
            assert (before.backend, before.mode) == ("delta", "append")  # tested below
            continue
        groups += 1
        assert (before.backend, before.mode) == (scenario.mode.split("+")[0], "two_phase")
        assert scenario.own_service == {"postgres": "postgres", "mysql": "mariadb"}[before.backend]
    assert 30 < groups < 150
    only = [draw(seed, Options(backends=("group",))) for seed in range(200)]
    assert {s.backend for s in only} == {"group"}
    assert all(s.event != "rename" for s in only)


def test_group_modes_narrow_the_draw_and_kafka_groups_reach_the_last_resource_points() -> None:
    options = Options(backends=("group:postgres+kafka",), targets=("driver",), spark_share=1.0)
    scenarios = [draw(seed, options) for seed in range(300)]
    assert {(s.backend, s.mode) for s in scenarios} == {("group", "postgres+kafka")}
    points = {s.fault.split(":")[0] for s in scenarios if s.fault}
    assert {"before_last_resource", "after_last_resource"} <= points
    assert "between_members" not in points  # one driver member: never fires
    mixed = [draw(seed, Options(backends=("group",))) for seed in range(300)]
    assert {s.mode for s in mixed} == {
        "postgres+mysql",
        "postgres+files",
        "postgres+kafka",
        "mysql+postgres",
        "delta+postgres",
        "delta+kafka",
    }


def test_iceberg_spark_writer_runs_never_kill_a_python_worker() -> None:
    """``--iceberg-write-path spark``: Spark's writer runs no Python task, so no Iceberg
    run on Spark is drawn with a worker target; the flag reproduces the draw."""
    options = Options(backends=("iceberg",), spark_share=1.0, iceberg_write_path="spark")
    scenarios = [draw(seed, options) for seed in range(300)]
    assert {s.target for s in scenarios} <= {"driver", "executor", "service"}
    assert "--iceberg-write-path=spark" in options.repro_flags()
    python = Options(backends=("iceberg",), spark_share=1.0)
    assert "worker" in {draw(seed, python).target for seed in range(300)}


def test_delta_spark_writer_runs_never_kill_a_python_worker() -> None:
    """``--delta-write-path spark``: the same for Delta runs alone on real Spark; the draw
    of every seed is otherwise the one without the flag, and the flag reproduces it."""
    options = Options(backends=("delta",), spark_share=1.0, delta_write_path="spark")
    python = Options(backends=("delta",), spark_share=1.0)
    drawn = [(draw(seed, options), draw(seed, python)) for seed in range(300)]
    assert {s.target for s, _ in drawn if s.backend == "delta"} <= {"driver", "executor"}
    assert "worker" in {p.target for _, p in drawn if p.backend == "delta"}
    assert "--delta-write-path=spark" in options.repro_flags()
    assert all(s.backend == p.backend for s, p in drawn)


def test_checkpoint_lost_is_drawn_apart_on_local_runs_only() -> None:
    """``checkpoint_lost`` 0 (the default) leaves every seed as it was; 1 makes every
    local-engine run lose its checkpoint, and every Spark run that kills the driver or a
    Python worker (its query then reads a Kafka topic on ``local[2]``), with the commit log
    lost too only where no prepared work can wait."""
    lost = Options(checkpoint_lost=1.0, spark_share=0.3)
    for seed in range(300):
        before = draw(seed, Options(spark_share=0.3))
        after = draw(seed, lost)
        if before.engine == "spark" and before.target not in ("driver", "worker"):
            assert after == before
            continue
        assert after.event == "checkpoint-lost"
        assert after == replace(
            before,
            event="checkpoint-lost",
            partitions_after=0,
            stop_delay=0.0,
            loser="",
            variant=after.variant,
        )
        inside = after.backend in ("kafka", "postgres", "mysql")
        assert after.variant == ("log-inside" if inside else "log-outside")
    assert "--checkpoint-lost=1" in repro(draw(1, lost), lost, "")


def _without_delta(seed: int, options: Options, monkeypatch: pytest.MonkeyPatch) -> Scenario:
    """The seed's scenario as drawn before Delta joined the mix."""
    with monkeypatch.context() as patch:
        patch.setattr(scenario_module, "DELTA_SHARE", 0.0)
        patch.setattr(Options, "delta_group_modes", lambda self: ())
        return draw(seed, options)


def _is_delta(scenario: Scenario) -> bool:
    return scenario.backend == "delta" or scenario.mode in DELTA_GROUP_MODES


def test_delta_is_a_share_of_the_files_runs_and_leaves_every_other_seed_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Delta joined the mix after seeds were recorded (issue 48): a seed not drawn as Delta
    (alone or in a group) draws what it drew before, the fixed seeds of CI among them; a
    Delta seed was a local-disk ``files`` run; ``--backend delta`` draws Delta alone, never
    ``rename``, ``between_commits``, a service kill or a pause."""
    from tests.chaos.ci_seeds import CI_SEEDS

    options = Options(spark_share=0.05)
    delta = 0
    for seed in range(1500):
        scenario = draw(seed, options)
        before = _without_delta(seed, options, monkeypatch)
        if _is_delta(scenario):
            delta += 1
            assert (before.backend, before.mode) == ("files", "parquet")
        else:
            assert scenario == before
    assert 20 < delta < 90  # a half of the files runs left after S3 and Iceberg: ~3 %
    for seed in CI_SEEDS:
        scenario = draw(seed, Options())
        if not _is_delta(scenario):
            assert scenario == _without_delta(seed, Options(), monkeypatch)
    only = [draw(seed, Options(backends=("delta",), spark_share=0.3)) for seed in range(300)]
    assert {(s.backend, s.mode) for s in only} == {("delta", "append")}
    assert {s.target for s in only} == {"driver", "worker", "executor"}
    assert {s.event for s in only} >= {"none", "rescale", "restore", "stop", "speculate"}
    assert all(s.event != "rename" and s.pause_for == 0 and s.service is None for s in only)
    assert not any(s.fault and s.fault.startswith("between_commits") for s in only)


def test_a_delta_group_is_a_share_of_the_delta_runs_with_its_own_driver_points() -> None:
    """With groups allowed, a third of the Delta runs write a group instead (the Delta
    table, then PostgreSQL ``two_phase`` or Kafka ``atomic`` as the last resource); the
    group keeps the Delta run's other fields, and its driver point is drawn again among
    those its batch passes."""
    alone = Options(backends=("delta",), spark_share=1.0)
    both = Options(backends=("delta", "group:delta+postgres", "group:delta+kafka"), spark_share=1.0)
    groups: list[Scenario] = []
    for seed in range(900):
        scenario, before = draw(seed, both), draw(seed, alone)
        if scenario.backend == "delta":
            assert scenario == before
            continue
        groups.append(scenario)
        assert scenario.mode in DELTA_GROUP_MODES
        assert replace(scenario, backend="delta", mode="append", fault=before.fault) == before
        if scenario.fault and scenario.fault.split(":")[0] in ("before_begin", "after_invoke"):
            assert scenario.fault == before.fault  # task points stay
    assert 0.25 < len(groups) / 900 < 0.42
    points = {
        m: {s.fault.split(":")[0] for s in groups if s.fault and s.mode == m}
        for m in DELTA_GROUP_MODES
    }
    assert {"before_last_resource", "after_last_resource"} <= points["delta+kafka"]
    assert "between_members" not in points["delta+kafka"]
    assert "between_commits" not in points["delta+kafka"]  # one Delta commit, Kafka last
    assert {"between_members", "between_commits"} <= points["delta+postgres"]
    assert not points["delta+postgres"] & {"before_last_resource", "after_last_resource"}
    for s in groups:
        if s.fault and s.fault.startswith("between_commits"):
            assert s.partitions > 1  # PostgreSQL commits two partitions or more
        assert s.service is None and s.pause_for == 0  # the Delta run's: no service


def test_group_filters_reach_delta_groups_and_leave_the_sql_groups_as_they_were() -> None:
    """``--backend group`` draws Delta groups for a share of its runs (from the Delta
    stream): every other seed draws the SQL group it drew before; ``group:delta+kafka``
    draws that group only; a SQL backend with only a Delta group named draws no group."""
    from tests.chaos.campaign import parse_args

    sql_modes = ("postgres+mysql", "postgres+files", "postgres+kafka", "mysql+postgres")
    before = Options(backends=tuple(f"group:{m}" for m in sql_modes))
    delta = 0
    for seed in range(600):
        scenario = draw(seed, Options(backends=("group",)))
        if scenario.mode in DELTA_GROUP_MODES:
            delta += 1
        else:
            assert scenario == draw(seed, before)
    assert 0.22 < delta / 600 < 0.45  # 2 of the 6 group modes
    only = [draw(seed, Options(backends=("group:delta+kafka",))) for seed in range(100)]
    assert {(s.backend, s.mode) for s in only} == {("group", "delta+kafka")}
    sql = [
        draw(seed, Options(backends=("postgres:two_phase", "group:delta+postgres")))
        for seed in range(200)
    ]
    assert {s.backend for s in sql} == {"postgres"}
    args = parse_args(["--backend", "delta", "--backend", "group:delta+postgres"])
    assert args.backend == ["delta", "group:delta+postgres"]
    options = Options(backends=("delta", "group:delta+kafka"), spark_share=1.0)
    assert repro(draw(3, options), options, "") == (
        "scripts/chaos --seed 3 --runs 1 --backend=delta --backend=group:delta+kafka "
        "--spark-share=1"
    )
