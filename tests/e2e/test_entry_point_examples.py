"""The runnable examples of docs/entry-points.md run as a user runs them: classic PySpark,
and from a Spark Connect client. Each runs its write twice and reads the output back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ["orders_foreach_batch", "orders_format_stream", "orders_batch_write"]


def _run(name: str, workdir: Path, *extra: str) -> list[dict[str, Any]]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), str(workdir), "--rows", "300", *extra],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize(
    "name",
    [  # CI runs the format example classic and over Connect; --extended all of them
        pytest.param(n, marks=[] if n == "orders_format_stream" else [pytest.mark.extended])
        for n in NAMES
    ],
)
def test_the_example_writes_every_order_once(name: str, tmp_path: Path) -> None:
    reports = _run(name, tmp_path / "work")
    assert reports and all(r == {"rows": 900, "duplicates": 0, "missing": 0} for r in reports)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=[] if n == "orders_format_stream" else [pytest.mark.extended])
        for n in NAMES
    ],
)
def test_the_example_from_a_spark_connect_client(name: str, connect: Any, tmp_path: Path) -> None:
    reports = _run(name, tmp_path / "work", "--remote", connect.url)
    assert reports and all(r == {"rows": 900, "duplicates": 0, "missing": 0} for r in reports)
