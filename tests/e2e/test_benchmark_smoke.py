"""The benchmark command (``python -m benchmarks.spark_writers``) at tiny sizes, so it cannot rot.

It runs as its own process against the real services, exactly as documented in
docs/benchmarks.md, and the test reads the JSON it writes: every target measured with each
of its writers (the upsert alternatives, Spark's file sink), sane numbers, the goals, the
scaling and overhead sections, the throughput table once more on a standalone cluster (two
targets, to keep it short), and the docs table rendered from it. The benchmark itself
checks the row count on every target after every run and fails otherwise.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from benchmarks.spark_writers.config import GOALS, TARGETS, UPSERT_ALTERNATIVES
from benchmarks.spark_writers.overhead import VARIANTS
from benchmarks.spark_writers.report import BEGIN, END
from benchmarks.spark_writers.runner import balanced_orders

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ROWS = 3_000
STANDALONE = ("files", "postgres_upsert_existing")


def _sane(side: dict[str, Any]) -> None:
    seconds = side["seconds"]
    assert len(seconds) == 1
    assert all(0 < s < 300 for s in seconds), side
    assert side["min_seconds"] <= side["median_seconds"] <= side["max_seconds"]
    assert side["median_rows_per_s"] > 0
    assert side["first_batch_median_seconds"] > 0


def _env(kafka_bootstrap: str, postgres_dsn: str, mysql_dsn: str) -> dict[str, str]:
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "POSTGRES_DSN": postgres_dsn,
        "MYSQL_DSN": mysql_dsn,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


@pytest.mark.timeout(900)
def test_issue_18s_new_paths_at_tiny_sizes(
    kafka_bootstrap: str, postgres_dsn: str, mysql_dsn: str, tmp_path: Path
) -> None:
    """CI's smoke run: the paths issue 18 added (the files sink's Spark write path against
    ``df.write.parquet`` and Spark's file sink, both upsert alternatives on an empty and on a
    full table, the overhead variants, a standalone cluster), one run each."""
    output = tmp_path / "bench.json"
    targets = ("files", "postgres_upsert_existing", "mysql_upsert_empty")
    command = [
        sys.executable, "-m", "benchmarks.spark_writers",
        "--rows", "2000", "--reps", "1", "--warmup-runs", "0", "--targets", ",".join(targets),
        "--scaling-targets", "", "--scaling-rows", "", "--scaling-partitions", "",
        "--overhead-batches", "2", "--long-run-batches", "0",
        "--master", "local[2]", "--driver-memory", "1g", "--standalone-targets", "files",
        "--work-dir", str(tmp_path / "work"),
        "--output", str(output), "--no-docs", "--no-start-services",
    ]  # fmt: skip
    done = subprocess.run(
        command,
        cwd=REPO,
        env=_env(kafka_bootstrap, postgres_dsn, mysql_dsn),
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    payload = json.loads(output.read_text())
    main = {r["target"]: r for r in payload["results"] if r["workload"] == "main"}
    assert sorted(main) == sorted(targets)
    assert main["files"]["twopc"]["writer"] == "twopc files (parquet, Spark's writer)"
    assert set(main["files"]["alternatives"]) == {"spark", "stream"}
    for target in targets[1:]:
        assert set(main[target]["alternatives"]) == {"jdbc_staging", "executemany"}
    for result in payload["results"]:
        _sane(result["twopc"])
        for side in result["alternatives"].values():
            _sane(side)
        assert math.isfinite(result["ratio"]) and result["ratio"] > 0
    assert [s["target"] for s in payload["summary"]] == list(targets)
    assert {r["warmup_runs"] for r in payload["results"]} == {0}
    assert list(payload["overhead"]["median_ms"]) == list(VARIANTS)
    standalone = payload["standalone"]
    assert standalone["cluster"]["workers"] == 2
    assert [r["target"] for r in standalone["results"]] == ["files"]
    _sane(standalone["results"][0]["twopc"])


# a few minutes of Spark sessions, one run per writer and target: --extended (scripts/bench
# runs the same command at full size for every recorded result)
@pytest.mark.extended
@pytest.mark.timeout(1500)  # the run and the standalone cluster's, at a load average of ~5
def test_benchmark_command_at_tiny_sizes(
    kafka_bootstrap: str, postgres_dsn: str, mysql_dsn: str, tmp_path: Path
) -> None:
    output = tmp_path / "bench.json"
    env = _env(kafka_bootstrap, postgres_dsn, mysql_dsn)
    command = [
        sys.executable, "-m", "benchmarks.spark_writers",
        "--rows", str(ROWS), "--reps", "1",
        "--scaling-partitions", "1", "--scaling-rows", "4000",
        "--overhead-batches", "2",
        "--long-run-batches", "30", "--long-run-at", "10,20,30",
        "--plots-dir", str(tmp_path / "plots"),
        "--master", "local[2]", "--driver-memory", "1g",
        "--standalone-targets", ",".join(STANDALONE),
        "--work-dir", str(tmp_path / "work"),
        "--output", str(output), "--no-docs", "--no-start-services",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    payload = json.loads(output.read_text())

    main = {r["target"]: r for r in payload["results"] if r["workload"] == "main"}
    assert sorted(main) == sorted(TARGETS)
    for result in payload["results"]:
        _sane(result["twopc"])
        for side in result["alternatives"].values():
            _sane(side)
        assert result["spark"] == result["alternatives"][result["compared_with"]]
        assert result["warmup_runs"] == 1  # the default below 3 repetitions
        assert math.isfinite(result["ratio"]) and result["ratio"] > 0
    assert set(main["files"]["alternatives"]) == {"spark", "stream"}
    for target in UPSERT_ALTERNATIVES:
        assert set(main[target]["alternatives"]) == {"jdbc_staging", "executemany"}
    scaling = {
        (r["target"], r["rows"], r["partitions"])
        for r in payload["results"]
        if r["workload"] != "main"
    }
    for target in ("files", "postgres_append"):
        assert (target, ROWS, 1) in scaling
        assert (target, 4000, 2) in scaling
    assert [s["target"] for s in payload["summary"]] == list(TARGETS)
    for goal in payload["summary"]:
        assert goal["goal"] == GOALS[goal["target"]].minimum
        assert goal["met"] == (goal["ratio"] >= goal["goal"])

    standalone = payload["standalone"]
    assert standalone["cluster"]["workers"] == 2
    assert standalone["cluster"]["url"].startswith("spark://")
    assert [r["target"] for r in standalone["results"]] == list(STANDALONE)
    for result in standalone["results"]:
        _sane(result["twopc"])
        assert result["ratio"] > 0

    overhead = payload["overhead"]
    assert list(overhead["median_ms"]) == list(VARIANTS)
    assert overhead["median_ms"]["twopc_null"] > 0
    assert overhead["batches"] == len(balanced_orders(VARIANTS))  # 2, in whole cycles
    assert set(overhead["twopc_null_phases_median_ms"]) == {
        "recover", "write", "decide", "commit", "total"
    }  # fmt: skip

    floor = payload["floor"]
    assert floor["rows"] == ROWS
    assert sorted(floor["median_seconds"]) == ["python_job", "spark_noop_job", "twopc_null"]
    assert all(v > 0 for v in floor["median_seconds"].values())

    long_run = payload["long_run"]
    assert [m["batch"] for m in long_run["marks"]] == [10, 20, 30]
    assert all(m["median_ms"] > 0 and m["log"]["files"] > 0 for m in long_run["marks"])
    assert isinstance(long_run["time_flat"], bool) and isinstance(long_run["log_flat"], bool)
    for figure in ("benchmarks-scaling.png", "benchmarks-long-run.png"):
        assert (tmp_path / "plots" / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    meta = payload["meta"]
    assert meta["machine"]["cores"] >= 1 and meta["machine"]["cpu"]
    assert {"postgres", "mysql", "kafka"} <= set(meta["servers"])

    # the docs table is rendered from the JSON
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\nhand-written\n\n{BEGIN}\nold\n{END}\n\ntail\n")
    subprocess.run(
        [sys.executable, "-m", "benchmarks.spark_writers", "render",
         "--output", str(output), "--docs", str(docs)],
        cwd=REPO, check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    page = docs.read_text()
    assert page.startswith("# Benchmarks\n\nhand-written\n") and page.endswith("\ntail\n")
    assert "old" not in page
    for target in TARGETS:
        assert main[target]["twopc"]["writer"] in page
    assert "Overhead per micro-batch" in page and "### Scaling" in page
    assert "### The floor" in page and "### Goals" in page
    assert "standalone cluster" in page
    assert "### Cost over time: 30 micro-batches" in page and "### Scaling, plotted" in page


def test_the_iceberg_commit_growth_benchmark_at_a_tiny_size(tmp_path: Path) -> None:
    """``benchmarks/iceberg_commit_growth.py`` as documented, at 6 snapshots: a mark per 3
    snapshots with both writers' times (it checks both tables' rows itself)."""
    output = tmp_path / "growth.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "iceberg_commit_growth.py"),
            "--snapshots",
            "6",
            "--every",
            "3",
            "--window",
            "3",
            "--output",
            str(output),
        ],
        check=True,
        cwd=REPO,
        timeout=300,
    )
    result = json.loads(output.read_text())
    assert [mark["snapshots"] for mark in result["marks"]] == [3, 6]
    for mark in result["marks"]:
        assert all(0 < ms < 10_000 for ms in mark["median_ms"].values()), mark
        assert mark["ratio_twopc_vs_pyiceberg"] > 0
