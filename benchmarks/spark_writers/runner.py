"""Timed, alternating runs of twopc and the other writers on each target, checked on the
target."""

from __future__ import annotations

import logging
import shutil
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.spark_writers.config import BenchConfig, Workload
from benchmarks.spark_writers.data import generate
from benchmarks.spark_writers.targets import Target, Writer

_log = logging.getLogger("bench")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
RUN_ID_PROPERTY = "spark.jobGroup.id"
"""The local property Spark's streaming engine sets around a foreachBatch call; twopc ties
its markers to it. The benchmark calls the functions itself, so it sets a fresh one."""


class WrongOutputError(RuntimeError):
    """A run left a different number of rows on the target than it was given."""


@dataclass
class Series:
    """The timings of one writer on one target and workload."""

    seconds: list[float] = field(default_factory=list)

    def summary(self, rows: int) -> dict[str, Any]:
        median = statistics.median(self.seconds)
        return {
            "seconds": [round(s, 4) for s in self.seconds],
            "median_seconds": round(median, 4),
            "min_seconds": round(min(self.seconds), 4),
            "max_seconds": round(max(self.seconds), 4),
            "median_rows_per_s": round(rows / median),
            "min_rows_per_s": round(rows / max(self.seconds)),
            "max_rows_per_s": round(rows / min(self.seconds)),
        }


def call(spark: Any, writer: Writer, df: Any, batch_id: int, query_id: str | None) -> float:
    """Seconds from calling ``writer(df, batch_id)`` to its return, as foreachBatch would,
    or the seconds the writer reports itself (see ``targets.Writer``)."""
    context = spark.sparkContext
    context.setLocalProperty(QUERY_ID_PROPERTY, query_id)
    # a running query's jobs run in a job group named by its run id
    context.setLocalProperty(RUN_ID_PROPERTY, f"run-{query_id}" if query_id else None)
    try:
        started = time.perf_counter()
        own = writer(df, batch_id)
        elapsed = time.perf_counter() - started
    finally:
        context.setLocalProperty(QUERY_ID_PROPERTY, None)
        context.setLocalProperty(RUN_ID_PROPERTY, None)
    return elapsed if own is None else own


def sides(target: Target) -> tuple[str, ...]:
    """twopc first, then the writers it is compared with."""
    return ("twopc", *target.alternatives())


def balanced_orders(names: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Orders in which every name follows every other name equally often (a Williams
    design: ``len(names)`` orders for an even count, twice that for an odd one), each name
    first equally often too.

    A Spark job's time depends on the job before it: measured on this machine, a Python
    job right after another one took about 30 ms longer than right after a JVM-only job
    over the same cached frame. A fixed cyclic order (see :func:`rotated`) gives each name
    the same predecessor every time, which biases a comparison of two names by that much;
    over these orders the predecessors even out."""
    n = len(names)
    first: list[int] = []
    low, high = 0, n - 1
    for position in range(n):
        if position % 2 == 0:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    rows = [[(i + shift) % n for i in first] for shift in range(n)]
    if n % 2:
        rows += [list(reversed(row)) for row in rows]
    return [tuple(names[i] for i in row) for row in rows]


def rotated(names: tuple[str, ...], rep: int) -> tuple[str, ...]:
    """The order of repetition ``rep``: each writer goes first in turn (with two writers,
    twopc first in even repetitions and the other in odd ones)."""
    shift = rep % len(names)
    return names[shift:] + names[:shift]


@dataclass(frozen=True)
class Frame:
    """A cached DataFrame and what a target must show after it was written."""

    df: Any
    rows: int
    first_id: int = 0

    @property
    def id_sum(self) -> int:
        return self.rows * (2 * self.first_id + self.rows - 1) // 2


Caller = Callable[[Any, Writer, Any, int, str | None], float]
"""How a writer is called: :func:`call`, or a wrapper that also records the call."""


def run_once(
    spark: Any,
    target: Target,
    side: str,
    *,
    warm: Frame,
    data: Frame,
    work: Path,
    caller: Caller = call,
) -> tuple[float, float]:
    """Reset the target, then as one query: batch 0 with ``warm`` (the query's start:
    connections, recovery, class loading), batch 1 with ``data`` (a running query's
    batch), each through ``caller``. Returns both durations; checks the target shows
    every row of both."""
    target.reset()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    query_id = str(uuid.uuid4()) if side.startswith("twopc") else None  # twopc's sides
    writer = target.writer(side, work)
    first = caller(spark, writer, warm.df, 0, query_id)
    seconds = caller(spark, writer, data.df, 1, query_id)
    shown = target.read_back(side)
    rows, id_sum = warm.rows + data.rows, warm.id_sum + data.id_sum
    if shown.rows != rows or (shown.id_sum is not None and shown.id_sum != id_sum):
        raise WrongOutputError(
            f"{target.name}/{side}: the target shows {shown.rows} rows (id sum {shown.id_sum}), "
            f"expected {rows} (id sum {id_sum})"
        )
    return first, seconds


def frames(spark: Any, rows: int, partitions: int) -> tuple[Frame, Frame]:
    """A run's two batches, cached: the warm-up batch 0 (up to 1,000 rows) and the timed
    batch 1 of ``rows`` rows."""
    data = Frame(generate(spark, rows, partitions), rows)
    warm_rows = min(1_000, rows)
    # ids after the data's: upserts insert, and Spark's appends into a keyed table work
    warm = Frame(generate(spark, warm_rows, partitions, first_id=rows), warm_rows, first_id=rows)
    return warm, data


def run_workload(
    spark: Any, workload: Workload, targets: dict[str, Target], config: BenchConfig
) -> list[dict[str, Any]]:
    """Every target of ``workload``: ``reps`` rounds of one run per writer, each writer
    first in turn (see :func:`rotated`)."""
    spark.conf.set("spark.sql.shuffle.partitions", str(workload.partitions))
    warm, data = frames(spark, workload.rows, workload.partitions)
    results = []
    try:
        for name in workload.targets:
            target = targets[name]
            work = config.work_dir / "log" / name
            names = sides(target)
            series = {side: Series() for side in names}
            first = {side: Series() for side in names}
            target.begin_workload(range(warm.first_id + warm.rows))
            for _ in range(config.warmups):
                for side in names:
                    _, seconds = run_once(spark, target, side, warm=warm, data=data, work=work)
                    _log.info("%s %s warm-up: %.2f s (untimed)", name, side, seconds)
            for rep in range(config.reps):
                for side in rotated(names, rep):
                    start, seconds = run_once(spark, target, side, warm=warm, data=data, work=work)
                    first[side].seconds.append(start)
                    series[side].seconds.append(seconds)
                    _log.info(
                        "%s %s rows=%d partitions=%d rep=%d: %.2f s (first batch %.2f s)",
                        name,
                        side,
                        workload.rows,
                        workload.partitions,
                        rep,
                        seconds,
                        start,
                    )
            target.reset()
            results.append(
                {**_result(target, workload, series, first), "warmup_runs": config.warmups}
            )
    finally:
        data.df.unpersist()
        warm.df.unpersist()
    return results


def _result(
    target: Target, workload: Workload, series: dict[str, Series], first: dict[str, Series]
) -> dict[str, Any]:
    """twopc's numbers, every other writer's with its ratio, and the fastest of them as
    ``spark`` with its ``ratio``: the comparison of the goal (the name ``spark`` is kept
    from when Spark's writer was the only other one)."""
    summaries = {}
    labels = {"twopc": target.twopc_label, **target.alternatives()}
    for side, timings in series.items():
        summary = timings.summary(workload.rows)
        summary["first_batch_median_seconds"] = round(statistics.median(first[side].seconds), 3)
        summaries[side] = {"writer": labels[side], **summary}
    twopc_s = summaries.pop("twopc")
    for summary in summaries.values():
        # throughput twopc / other = other's time / twopc's time (medians)
        summary["ratio"] = round(summary["median_seconds"] / twopc_s["median_seconds"], 3)
    fastest = min(summaries, key=lambda side: summaries[side]["median_seconds"])
    return {
        "target": target.name,
        "workload": workload.label,
        "rows": workload.rows,
        "partitions": workload.partitions,
        "twopc": twopc_s,
        "spark": summaries[fastest],
        "compared_with": fastest,
        "alternatives": summaries,
        "ratio": summaries[fastest]["ratio"],
    }
