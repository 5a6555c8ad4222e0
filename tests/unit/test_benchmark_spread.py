"""Several full benchmark runs in one results file (``--runs N``, issue 47): every run kept,
each ratio's median and min-max, goals judged on the median, and the docs table with the
runs side by side. The runs themselves need Spark and the services (``./scripts/bench``);
these build their payloads by hand."""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks.spark_writers import report, spread
from benchmarks.spark_writers.config import GOALS, SCALING_GOALS

pytestmark = pytest.mark.unit


def _side(writer: str, seconds: float) -> dict[str, Any]:
    return {
        "writer": writer,
        "seconds": [seconds],
        "median_seconds": seconds,
        "min_seconds": seconds,
        "max_seconds": seconds,
        "median_rows_per_s": round(1000 / seconds),
        "min_rows_per_s": round(1000 / seconds),
        "max_rows_per_s": round(1000 / seconds),
    }


def _result(
    target: str, ratio: float, workload: str = "main", partitions: int = 2
) -> dict[str, Any]:
    spark = {**_side("df.write.parquet", ratio), "ratio": ratio}
    return {
        "target": target,
        "workload": workload,
        "rows": 1000,
        "partitions": partitions,
        "twopc": _side(f"twopc {target}", 1.0),
        "spark": spark,
        "compared_with": "spark",
        "alternatives": {"spark": spark},
        "ratio": ratio,
    }


def _run(
    number: int, files: float, kafka: float, scaling: float, overhead: float
) -> dict[str, Any]:
    return {
        "meta": {
            "date": f"2026-12-05T1{number}:00:00+00:00",
            "command": "python -m benchmarks.spark_writers",
            "duration_minutes": 20.0,
            "load_before": [float(number), 0.5, 0.5],
            "load_after": [1.0, 1.0, 1.0],
            "machine": {
                "cpu": "cpu",
                "cores": 2,
                "memory_gib": 24.0,
                "os": "Debian",
                "java": "openjdk 17",
                "python": "3.11",
                "packages": {"pyspark": "4.0.1", "pyarrow": "21"},
            },
            "servers": {"postgres": "PostgreSQL 17"},
            "config": {"master": "local[*]", "reps": 5},
        },
        "results": [
            _result("files", files),
            _result("kafka_atomic", kafka),
            _result("files", scaling, workload="scaling: partitions", partitions=4),
        ],
        "overhead": {"overhead_ms": overhead},
        "floor": None,
    }


RUNS = [
    _run(1, files=1.30, kafka=0.70, scaling=0.95, overhead=40.0),
    _run(2, files=1.10, kafka=1.40, scaling=1.05, overhead=60.0),
    _run(3, files=1.25, kafka=0.90, scaling=1.10, overhead=50.0),
]


def test_each_ratio_is_judged_on_its_median_across_the_runs() -> None:
    combined = spread.combine(RUNS, "python -m benchmarks.spark_writers --runs 3")
    lines = {(line["workload"], line["target"]): line for line in combined["spread"]}

    files = lines[("main", "files")]
    assert files["ratios"] == [1.30, 1.10, 1.25]
    assert (files["median"], files["min"], files["max"]) == (1.25, 1.10, 1.30)
    assert files["goal"] == GOALS["files"].minimum == 1.2 and files["met"] is True

    kafka = lines[("main", "kafka_atomic")]
    # one run at 1.40 does not meet the goal: the median (0.90) is what counts
    assert kafka["median"] == 0.9 and kafka["max"] == 1.4 and kafka["met"] is False

    scaling = lines[("scaling: partitions", "files")]
    assert scaling["goal"] == SCALING_GOALS["files"].minimum
    assert scaling["median"] == 1.05 and scaling["met"] is True


def test_the_tables_show_the_run_whose_ratio_is_the_median() -> None:
    combined = spread.combine(RUNS, "cmd")
    by_key = {(r["workload"], r["target"]): r for r in combined["results"]}
    assert by_key[("main", "files")]["ratio"] == 1.25  # run 3's line, as measured
    assert by_key[("main", "files")]["ratio_runs"] == [1.30, 1.10, 1.25]
    assert by_key[("main", "kafka_atomic")]["ratio"] == 0.90
    assert combined["overhead"]["overhead_ms"] == 50.0
    assert combined["overhead"]["overhead_ms_runs"] == [40.0, 60.0, 50.0]
    assert [r["meta"]["load_before"] for r in combined["runs"]] == [
        [1.0, 0.5, 0.5],
        [2.0, 0.5, 0.5],
        [3.0, 0.5, 0.5],
    ]
    assert combined["meta"]["runs"] == 3
    assert combined["meta"]["duration_minutes"] == 60.0


def test_an_even_count_shows_the_lower_middle_run() -> None:
    combined = spread.combine(RUNS[:2], "cmd")
    files = next(r for r in combined["results"] if r["target"] == "files" and r["partitions"] == 2)
    assert files["ratio"] == 1.10
    line = next(s for s in combined["spread"] if s["target"] == "files" and s["partitions"] == 2)
    assert line["median"] == 1.2  # the median itself is the mean of the middle two


def test_a_target_missing_from_a_run_counts_the_runs_that_measured_it() -> None:
    partial = _run(4, files=1.0, kafka=1.0, scaling=1.0, overhead=1.0)
    partial["results"] = partial["results"][:1]
    combined = spread.combine([*RUNS[:2], partial], "cmd")
    kafka = next(s for s in combined["spread"] if s["target"] == "kafka_atomic")
    assert kafka["ratios"] == [0.70, 1.40, None]
    assert kafka["median"] == 1.05


def test_the_docs_table_puts_the_runs_side_by_side() -> None:
    combined = spread.combine(RUNS, "python -m benchmarks.spark_writers --runs 3")
    combined["overhead"] = None  # the overhead table has its own test (tests/e2e)
    page = report.render(combined)
    assert "### Goals: the median of 3 full runs" in page
    assert "run 1: [1.0, 0.5, 0.5]; run 2: [2.0, 0.5, 0.5]; run 3: [3.0, 0.5, 0.5]" in page
    files_row = next(row for row in page.splitlines() if row.startswith("| files | 1,000 | 2 "))
    assert "| 1.30 | 1.10 | 1.25 | **1.25** | 1.10-1.30 | met |" in files_row
    kafka_row = next(row for row in page.splitlines() if row.startswith("| kafka_atomic |"))
    assert "| **0.90** | 0.70-1.40 | **missed** |" in kafka_row
    assert "the run whose ratio is the median" in page


def test_no_runs_is_an_error() -> None:
    with pytest.raises(ValueError, match="no runs"):
        spread.combine([], "cmd")
