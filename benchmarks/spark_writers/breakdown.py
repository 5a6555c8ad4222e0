"""Where a writer's time per batch goes: the driver before its Spark jobs, the jobs, the
driver after them; for twopc also its own phases. A profile for a miss whose time is not
spent in Python (a profiler of the driver only sees it wait).

    python -m benchmarks.spark_writers.breakdown files --master standalone --reps 5
    python -m benchmarks.spark_writers.breakdown postgres_append --rows 1000000
    python -m benchmarks.spark_writers.breakdown overhead --reps 20   # 1,000-row batches

Runs each writer of the target ``--reps`` times, in turn, the way the benchmark does
(batch 0 with 1,000 rows, then the timed batch 1), on ``local[*]`` or on a standalone
cluster it starts. For the timed batch it reads from Spark's status store every job that
batch ran (tagged for the call): submitted and completed, and per stage the tasks'
summed run time, CPU time and deserialization time. twopc's own phases come from its
batch metrics. Prints a line per timed batch and a table of medians per writer; with
``--output``, writes every batch as JSON there. ``overhead`` runs the overhead variants
(``overhead.VARIANTS``) instead of a target.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.spark_writers.config import TARGETS, BenchConfig, Endpoints
from benchmarks.spark_writers.overhead import PHASES
from benchmarks.spark_writers.runner import (
    balanced_orders,
    call,
    frames,
    rotated,
    run_once,
    sides,
)
from benchmarks.spark_writers.targets import Target


@dataclass
class Stage:
    """One stage of a job: wall time and the tasks' summed times (milliseconds)."""

    stage_id: int
    tasks: int
    wall_ms: float
    first_task_after_ms: float
    task_run_ms: float
    task_cpu_ms: float
    task_deserialize_ms: float


@dataclass
class Job:
    job_id: int
    submitted_after_ms: float
    """From the writer's call to the job's submission."""
    wall_ms: float
    stages: list[Stage] = field(default_factory=list)


@dataclass
class Call:
    """One timed batch of one writer."""

    side: str
    rep: int
    wall_ms: float
    jobs: list[Job]
    phases_ms: dict[str, float]

    @property
    def before_jobs_ms(self) -> float:
        return self.jobs[0].submitted_after_ms if self.jobs else self.wall_ms

    @property
    def in_jobs_ms(self) -> float:
        return sum(j.wall_ms for j in self.jobs)

    @property
    def after_jobs_ms(self) -> float:
        if not self.jobs:
            return 0.0
        last = self.jobs[-1]
        return self.wall_ms - (last.submitted_after_ms + last.wall_ms)


class StatusStore:
    """Spark's status store (what the UI shows; filled with the UI off too), through py4j."""

    def __init__(self, spark: Any) -> None:
        self.context = spark.sparkContext
        self._store = self.context._jsc.sc().statusStore()
        self._tracker = self.context._jsc.sc().statusTracker()

    def jobs(self, tag: str, started_ms: float) -> list[Job]:
        ids = sorted(int(i) for i in self._tracker.getJobIdsForTag(tag))
        jobs = []
        for job_id in ids:
            data = self._store.job(job_id)
            submitted = _millis(data.submissionTime())
            completed = _millis(data.completionTime())
            stages = [self._stage(int(s)) for s in _seq(data.stageIds())]
            jobs.append(
                Job(
                    job_id,
                    submitted - started_ms,
                    completed - submitted,
                    [s for s in stages if s is not None],
                )
            )
        return jobs

    def _stage(self, stage_id: int) -> Stage | None:
        try:
            data = self._store.lastStageAttempt(stage_id)
        except Exception:  # skipped stages have no attempt
            return None
        submitted = _millis(data.submissionTime())
        return Stage(
            stage_id,
            int(data.numTasks()),
            _millis(data.completionTime()) - submitted,
            _millis(data.firstTaskLaunchedTime()) - submitted,
            float(data.executorRunTime()),
            float(data.executorCpuTime()) / 1e6,
            float(data.executorDeserializeTime()),
        )


def _millis(option: Any) -> float:
    """A Scala ``Option[java.util.Date]`` as epoch milliseconds (NaN when empty)."""
    return float(option.get().getTime()) if option.isDefined() else float("nan")


def _seq(seq: Any) -> list[Any]:
    return [seq.apply(i) for i in range(seq.size())]


class Recorder:
    """A caller for the runner (``runner.Caller``): :func:`runner.call` with the call's
    Spark jobs tagged, so that the last call's jobs and writer can be read afterwards."""

    def __init__(self, store: StatusStore) -> None:
        self.store = store
        self.wall_ms = 0.0
        self.jobs: list[Job] = []
        self.writer: Any = None

    def __call__(
        self, spark: Any, writer: Any, df: Any, batch_id: int, query_id: str | None
    ) -> float:
        context = self.store.context
        tag = f"bench-breakdown-{uuid.uuid4().hex}"
        context.addJobTag(tag)
        try:
            started_ms = time.time() * 1000
            seconds = call(spark, writer, df, batch_id, query_id)
        finally:
            context.removeJobTag(tag)
        self.wall_ms, self.writer = seconds * 1000, writer
        self.jobs = self.store.jobs(tag, started_ms)
        return seconds

    def last(self, side: str, rep: int) -> Call:
        return Call(side, rep, self.wall_ms, self.jobs, _phases_of(self.writer))


def run(spark: Any, target: Target, config: BenchConfig) -> list[Call]:
    """``config.reps`` runs of each writer of ``target`` as the benchmark makes them (its
    streaming file sink aside, which times itself), each checked on the target; the timed
    batch of each."""
    recorder = Recorder(StatusStore(spark))
    spark.conf.set("spark.sql.shuffle.partitions", str(config.partitions))
    warm, data = frames(spark, config.rows, config.partitions)
    names = tuple(s for s in sides(target) if s != "stream")  # it times itself
    work = config.work_dir / "log" / f"breakdown-{target.name}"
    calls = []
    target.prepare()
    target.begin_workload(range(warm.first_id + warm.rows))
    try:
        for rep in range(config.reps):
            for side in rotated(names, rep):
                run_once(spark, target, side, warm=warm, data=data, work=work, caller=recorder)
                calls.append(recorder.last(side, rep))  # batch 1, the timed one
                print(_line(calls[-1]), flush=True)
    finally:
        target.reset()
        target.cleanup()
        data.df.unpersist()
        warm.df.unpersist()
    return calls


def run_overhead(spark: Any, config: BenchConfig) -> list[Call]:
    """The overhead variants (``overhead.VARIANTS``: 1,000-row batches of one query, in
    rotating order, after two untimed batches), ``config.reps`` batches each."""
    from benchmarks.spark_writers.data import generate
    from benchmarks.spark_writers.overhead import (
        VARIANTS,
        WARMUP_BATCHES,
        whole_cycles,
        writers_of,
    )

    recorder = Recorder(StatusStore(spark))
    spark.conf.set("spark.sql.shuffle.partitions", str(config.partitions))
    df = generate(spark, config.overhead_rows, config.partitions)
    writers = writers_of(config)
    query = str(uuid.uuid4())
    calls = []
    try:
        orders = balanced_orders(VARIANTS)
        for batch_id in range(WARMUP_BATCHES + whole_cycles(config.reps, len(orders))):
            for variant in orders[(batch_id - WARMUP_BATCHES) % len(orders)]:
                recorder(spark, writers[variant], df, batch_id, query)
                if batch_id >= WARMUP_BATCHES:
                    calls.append(recorder.last(variant, batch_id))
                    print(_line(calls[-1]), flush=True)
    finally:
        df.unpersist()
    return calls


def _phases_of(writer: Any) -> dict[str, float]:
    """twopc's phases of the writer's last batch (milliseconds); none for other writers."""
    metrics = getattr(writer, "metrics", None)
    if not metrics:
        return {}
    last = metrics[-1]
    return {phase: round(getattr(last, f"{phase}_seconds") * 1000, 1) for phase in PHASES}


def _line(call: Call) -> str:
    jobs = "; ".join(
        f"job {j.job_id}: {j.wall_ms:.0f} ms ("
        + ", ".join(
            f"stage {s.stage_id}: {s.tasks} tasks, first task after {s.first_task_after_ms:.0f},"
            f" run {s.task_run_ms:.0f}, cpu {s.task_cpu_ms:.0f}, deser {s.task_deserialize_ms:.0f}"
            for s in j.stages
        )
        + ")"
        for j in call.jobs
    )
    phases = f" phases {call.phases_ms}" if call.phases_ms else ""
    return (
        f"{call.side} rep {call.rep}: {call.wall_ms:.0f} ms = before jobs "
        f"{call.before_jobs_ms:.0f} + jobs {call.in_jobs_ms:.0f} + after jobs "
        f"{call.after_jobs_ms:.0f}{phases} | {jobs}"
    )


def summary(calls: list[Call]) -> str:
    """Medians per writer: wall, before, in and after its jobs, the tasks' run time."""
    lines = [
        "| writer | batches | wall ms | before jobs | in jobs | after jobs | jobs | "
        "tasks' run ms (sum) | tasks' CPU ms (sum) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for side in dict.fromkeys(c.side for c in calls):
        mine = [c for c in calls if c.side == side]

        def med(values: list[float]) -> str:
            return f"{statistics.median(values):.0f}"

        lines.append(
            f"| {side} | {len(mine)} | {med([c.wall_ms for c in mine])} | "
            f"{med([c.before_jobs_ms for c in mine])} | {med([c.in_jobs_ms for c in mine])} | "
            f"{med([c.after_jobs_ms for c in mine])} | "
            f"{med([len(c.jobs) for c in mine])} | "
            f"{med([sum(s.task_run_ms for j in c.jobs for s in j.stages) for c in mine])} | "
            f"{med([sum(s.task_cpu_ms for j in c.jobs for s in j.stages) for c in mine])} |"
        )
    for side in dict.fromkeys(c.side for c in calls if c.phases_ms):
        phases = [c.phases_ms for c in calls if c.side == side]
        lines.append(
            f"{side}'s phases, medians (ms): "
            + ", ".join(f"{p} {statistics.median(ph[p] for ph in phases):.1f}" for p in PHASES)
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "target",
        choices=(*TARGETS, "overhead"),
        help="a target, or 'overhead': the overhead variants, --reps batches each",
    )
    defaults = BenchConfig()
    parser.add_argument("--master", default=defaults.master)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rows", type=int, default=defaults.rows)
    parser.add_argument("--partitions", type=int, default=defaults.partitions)
    parser.add_argument("--output", type=Path, help="JSON of every call")
    args = parser.parse_args(argv)
    from benchmarks.spark_writers import standalone
    from benchmarks.spark_writers.session import start_session
    from benchmarks.spark_writers.targets import build_targets

    config = BenchConfig(
        rows=args.rows, partitions=args.partitions, reps=args.reps, master=args.master
    )
    target = None
    if args.target != "overhead":
        endpoints = Endpoints.from_services(start=False)
        target = build_targets((args.target,), endpoints, config)[args.target]
    with contextlib.ExitStack() as stack:
        master, conf = config.master, {}
        if config.master == "standalone":
            running = stack.enter_context(
                standalone.cluster(config.workers, config.worker_cores, config.worker_memory)
            )
            master, conf = running.url, standalone.session_conf(running)
        spark, _ = start_session(config, master, conf)
        try:
            calls = run(spark, target, config) if target else run_overhead(spark, config)
        finally:
            spark.stop()
    print(summary(calls))
    if args.output:
        payload = {
            "target": args.target,
            "master": args.master,
            "rows": config.rows,
            "partitions": config.partitions,
            "calls": [asdict(c) for c in calls],
        }
        args.output.write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
