"""The benchmark's long run and figures at tiny sizes, without Spark or services, so that CI
covers them (the benchmark command's smoke tests need both: issue 18's new paths run in
CI, the whole command with ``--extended``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from benchmarks import long_run
from benchmarks.spark_writers import over_time, plots
from benchmarks.spark_writers.report import BEGIN, END

pytestmark = pytest.mark.unit

PNG = b"\x89PNG\r\n\x1a\n"


def test_long_run_records_the_marks_and_computes_the_verdicts(tmp_path: Path) -> None:
    result = long_run.measure(
        batches=24, marks=(10, 20, 24, 99), window=5, samples=6, work_dir=tmp_path
    )
    assert [m["batch"] for m in result["marks"]] == [10, 20, 24]  # 99 is past the run
    for mark in result["marks"]:
        assert mark["median_ms"] > 0 and mark["window"] == 5
        assert mark["fsyncs_per_batch"] >= 1  # the decision's, at least
        assert mark["log"]["files"] > 0 and mark["log"]["bytes"] > 0
    # batch 10's log holds 10 batches (3 files each) and the liveness record
    assert result["marks"][0]["log"]["files"] == 31
    assert [s["batch"] for s in result["series"]] == [4, 8, 12, 16, 20, 24]
    assert isinstance(result["time_flat"], bool) and isinstance(result["log_flat"], bool)
    assert result["log_compared"] == []  # no mark is past the retention of 100 batches
    assert list(tmp_path.iterdir()) == []  # the scratch directory is gone


def _mark(batch: int, ms: float, files: int, size: int) -> dict[str, Any]:
    return {
        "batch": batch,
        "median_ms": ms,
        "without_fsync_median_ms": ms / 2,
        "fsyncs_per_batch": 7,
        "log": {"files": files, "bytes": size},
    }


def test_verdicts_compare_the_marks() -> None:
    flat = long_run.verdicts(
        [
            _mark(10, 4.0, 31, 17_000),
            _mark(1_000, 5.0, 301, 167_000),
            _mark(10_000, 6.5, 301, 168_000),
        ]
    )
    assert flat["time_flat"] and flat["log_flat"] and flat["log_compared"] == [1_000, 10_000]
    assert flat["time_limit_ms"] == 7.0
    grown = long_run.verdicts(
        [
            _mark(10, 4.0, 31, 17_000),
            _mark(1_000, 5.0, 301, 167_000),
            _mark(10_000, 9.0, 302, 200_000),
        ]
    )
    assert not grown["time_flat"] and not grown["log_flat"]


def test_long_run_command_writes_its_json(tmp_path: Path) -> None:
    output = tmp_path / "long_run.json"
    assert long_run.main(["--batches", "12", "--at", "10,12", "--output", str(output)]) == 0
    document = json.loads(output.read_text())
    assert [m["batch"] for m in document["result"]["marks"]] == [10, 12]
    assert document["command"].endswith("--batches 12 --at 10,12 --output " + str(output))


def _side(rate: float) -> dict[str, float]:
    return {"median_rows_per_s": rate, "min_rows_per_s": rate * 0.9, "max_rows_per_s": rate * 1.1}


def _payload() -> dict[str, Any]:
    results = [
        {"target": target, "rows": rows, "partitions": parts, "twopc": _side(1e6 * parts),
         "spark": _side(8e5 * parts), "workload": "main" if (rows, parts) == (1000, 2) else "s"}
        for target in ("files", "postgres_append")
        for rows, parts in ((1000, 1), (1000, 2), (1000, 4), (1000, 8), (5000, 2), (20000, 2))
    ]  # fmt: skip
    return {
        "meta": {
            "date": "2026-11-26T08:00:00+00:00",
            "machine": {"cores": 2},
            "config": {
                "rows": 1000, "partitions": 2, "reps": 1, "master": "local[2]",
                "scaling_targets": ["files", "postgres_append"],
            },
        },
        "results": results,
    }  # fmt: skip


def test_figures_and_the_docs_block(tmp_path: Path) -> None:
    payload = _payload()
    series = plots.scaling_series(payload)
    assert [r["partitions"] for r in series["files"]["partitions"]] == [1, 2, 4, 8]
    assert [r["rows"] for r in series["files"]["rows"]] == [1000, 5000, 20000]
    payload["long_run"] = long_run.measure(
        batches=12, marks=(10, 12), window=5, samples=4, work_dir=tmp_path
    )
    written = over_time.write_plots(payload, tmp_path / "figures")
    assert [p.name for p in written] == [plots.SCALING_PNG, plots.LONG_RUN_PNG]
    assert all(p.read_bytes()[:8] == PNG for p in written)

    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\n{BEGIN}\nresults\n{END}\n\ntail\n")
    over_time.write_docs(payload, docs)
    over_time.write_docs(payload, docs)  # replaces its own block
    page = docs.read_text()
    assert page.count(over_time.BEGIN) == 1 and page.endswith("\ntail\n")
    assert page.index(END) < page.index(over_time.BEGIN)
    assert "### Cost over time: 12 micro-batches of one query" in page
    assert f"]({plots.LONG_RUN_PNG})" in page and f"]({plots.SCALING_PNG})" in page
    assert "From this run" in page


def test_issue_18s_overhead_goals_are_computed_and_rendered() -> None:
    from benchmarks.spark_writers import overhead
    from benchmarks.spark_writers.report import _overhead_goals

    medians = {
        "empty": 2.0,
        "spark_noop_job": 60.0,
        "python_job": 85.0,
        "twopc_null": 93.5,
        "spark_parquet": 80.0,
        "twopc_files": 110.0,
        "twopc_files_python": 130.0,
    }
    goals = overhead.issue_18_goals(medians)
    assert goals["coordination_ms"] == 8.5 and goals["coordination_met"]
    assert goals["files_overhead_ms"] == 108.0 and not goals["files_met"]
    assert goals["files_beyond_spark_parquet_ms"] == 30.0
    page = "\n".join(_overhead_goals(goals))
    assert "| 8.5 ms | ≤ 10 ms | met |" in page
    assert "| 108.0 ms | ≤ 100 ms | **missed** |" in page
