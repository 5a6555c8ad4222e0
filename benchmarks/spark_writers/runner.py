"""Timed, alternating runs of twopc and Spark's writer on each target, checked on the target."""

from __future__ import annotations

import logging
import shutil
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.spark_writers.config import BenchConfig, Workload
from benchmarks.spark_writers.data import generate
from benchmarks.spark_writers.targets import Target, Writer

_log = logging.getLogger("bench")

SIDES = ("twopc", "spark")
QUERY_ID_PROPERTY = "sql.streaming.queryId"
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
    """Seconds from calling ``writer(df, batch_id)`` to its return, as foreachBatch would."""
    context = spark.sparkContext
    context.setLocalProperty(QUERY_ID_PROPERTY, query_id)
    try:
        started = time.perf_counter()
        writer(df, batch_id)
        return time.perf_counter() - started
    finally:
        context.setLocalProperty(QUERY_ID_PROPERTY, None)


def _writer(target: Target, side: str, work: Path) -> Writer:
    return target.twopc_writer(work) if side == "twopc" else target.spark_writer()


def run_once(spark: Any, target: Target, side: str, df: Any, *, rows: int, work: Path) -> float:
    """Reset the target, time one write of ``df``, then check the target shows every row."""
    target.reset()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    query_id = str(uuid.uuid4()) if side == "twopc" else None
    seconds = call(spark, _writer(target, side, work), df, 0, query_id)
    shown = target.read_back(side)
    expected_sum = rows * (rows - 1) // 2
    if shown.rows != rows or (shown.id_sum is not None and shown.id_sum != expected_sum):
        raise WrongOutputError(
            f"{target.name}/{side}: the target shows {shown.rows} rows (id sum {shown.id_sum}), "
            f"expected {rows} (id sum {expected_sum})"
        )
    return seconds


def run_workload(
    spark: Any, workload: Workload, targets: dict[str, Target], config: BenchConfig
) -> list[dict[str, Any]]:
    """Every target of ``workload``: a warm-up of both writers, then ``reps`` alternating
    pairs (twopc first in even repetitions, Spark first in odd ones)."""
    spark.conf.set("spark.sql.shuffle.partitions", str(workload.partitions))
    df = generate(spark, workload.rows, workload.partitions)
    warm = generate(spark, min(1_000, workload.rows), workload.partitions)
    results = []
    try:
        for name in workload.targets:
            target = targets[name]
            work = config.work_dir / "log" / name
            for side in SIDES:  # class loading, first connections, Python workers
                run_once(spark, target, side, warm, rows=warm_rows(workload), work=work)
            series = {side: Series() for side in SIDES}
            for rep in range(config.reps):
                order = SIDES if rep % 2 == 0 else SIDES[::-1]
                for side in order:
                    seconds = run_once(spark, target, side, df, rows=workload.rows, work=work)
                    series[side].seconds.append(seconds)
                    _log.info(
                        "%s %s rows=%d partitions=%d rep=%d: %.2f s",
                        name,
                        side,
                        workload.rows,
                        workload.partitions,
                        rep,
                        seconds,
                    )
            target.reset()
            results.append(_result(target, workload, series))
    finally:
        df.unpersist()
        warm.unpersist()
    return results


def warm_rows(workload: Workload) -> int:
    return min(1_000, workload.rows)


def _result(target: Target, workload: Workload, series: dict[str, Series]) -> dict[str, Any]:
    twopc_s = series["twopc"].summary(workload.rows)
    spark_s = series["spark"].summary(workload.rows)
    return {
        "target": target.name,
        "workload": workload.label,
        "rows": workload.rows,
        "partitions": workload.partitions,
        "twopc": {"writer": target.twopc_label, **twopc_s},
        "spark": {"writer": target.spark_label, **spark_s},
        # throughput twopc / Spark = Spark's time / twopc's time (medians)
        "ratio": round(spark_s["median_seconds"] / twopc_s["median_seconds"], 3),
    }
