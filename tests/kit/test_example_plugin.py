"""The example plugin installs with pip, is discovered by twopc, and passes the kit.

This is what a plugin author does, in a fresh virtualenv: install twopc, ``pip install`` the
example from its own directory (``examples/twopc-sqlite``, with its ``test`` extra), check
``twopc plugins``, then run the example's own test suite, which composes the conformance
kit's check classes for its two sinks (one per commit role). pyspark is not installed
there, so the kit's Spark tests must skip themselves cleanly.
pip uses its cache (``~/.cache/pip``); the whole test takes about 20-30 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "twopc-sqlite"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in (
        "PYTHONPATH",
        "TWOPC_FAULTS",
        "TWOPC_DISABLE_PLUGINS",
        "VIRTUAL_ENV",
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
    ):
        env.pop(name, None)
    env.update(extra)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in the example's source tree
    return env


def _run(
    args: list[str | Path], cwd: Path, timeout: float = 600, **env: str
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return result


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (
        f"{' '.join(map(str, result.args))} exited {result.returncode}\n"
        f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with twopc and the example plugin installed by pip."""
    root = tmp_path_factory.mktemp("example-plugin")
    venv = root / "venv"
    _ok(_run([sys.executable, "-m", "venv", venv], cwd=root))
    python = venv / "bin" / "python"
    _ok(_run([python, "-m", "pip", "install", "--quiet", REPO_ROOT], cwd=root))
    # the example is installed by pip from its own directory, with its test extra
    _ok(_run([python, "-m", "pip", "install", "--quiet", f"{EXAMPLE}[test]"], cwd=root))
    return venv


def test_twopc_plugins_lists_the_example_backend(venv: Path) -> None:
    twopc = venv / "bin" / "twopc"
    listing = json.loads(_ok(_run([twopc, "plugins", "--json"], cwd=venv.parent)))
    backends = {b["name"]: b for b in listing["backends"]}
    assert backends["sqlite"]["usable"], backends["sqlite"]
    assert backends["sqlite"]["distribution"] == "twopc-sqlite"
    assert backends["sqlite"]["plugin"] == "sqlite"
    assert backends["sqlite-task"]["usable"], backends["sqlite-task"]
    assert backends["sqlite-task"]["plugin"] == "sqlite"
    assert backends["files"]["usable"], backends["files"]
    assert listing["failures"] == []
    text = _ok(_run([twopc, "plugins"], cwd=venv.parent))
    rows = {line.split()[0]: line for line in text.splitlines()[1:] if line.strip()}
    assert "sqlite (twopc-sqlite)" in rows["sqlite"] and " yes " in rows["sqlite"], text
    assert " yes " in rows["files"], text


def test_the_example_passes_the_conformance_kit(venv: Path, tmp_path: Path) -> None:
    python = venv / "bin" / "python"
    assert _run([python, "-c", "import pyspark"], cwd=tmp_path).returncode != 0, (
        "pyspark is installed in the fresh virtualenv; this test checks the kit without it"
    )
    pytest_args: list[str | Path] = [
        python,
        "-m",
        "pytest",
        EXAMPLE / "tests",
        "-p",
        "no:cacheprovider",
    ]
    result = _run([*pytest_args, "-k", "not spark", "-q"], cwd=tmp_path)
    output = _ok(result)
    driver, in_task = output.split("twopc conformance: TestSqliteTaskConformance")
    assert "twopc conformance: TestSqliteConformance" in driver, output
    for words in (
        "passed   commit is idempotent",
        "passed   pre_commit is durable",
        "passed   commit refuses a payload version it cannot read",
        "passed   abort_prepared works on a payload it cannot read",
        "passed   attempt ids are Spark's task attempt ids (longs)",
        "passed   recovery commits decided work",
        "passed   SIGKILL at every crash point, restart: exactly-once (8 of 8 cases; 2 cases "
        "not applicable to this role)",
        'passed   format("twopc") options build the sink of sink_factory',
    ):
        assert words in driver, output
    for words in (
        "passed   a task whose marker shows its batch writes nothing",
        "passed   the target's markers show the committed partitions",
        "passed   attempt ids are Spark's task attempt ids (longs)",
        "passed   SIGKILL at every crash point, restart: exactly-once (9 of 9 cases; 1 case "
        "not applicable to this role)",
        'passed   format("twopc") options build the sink of sink_factory',
    ):
        assert words in in_task, output
    assert "FAILED" not in output, output

    # Without pyspark the kit's Spark tests skip themselves, with the install hint.
    spark = _ok(_run([*pytest_args, "-k", "spark", "-q", "-rs"], cwd=tmp_path))
    assert "6 skipped" in spark, spark
    assert "skipped  a real foreachBatch query is exactly-once (pyspark is not installed" in spark
    assert "pip install 'twopc[spark]'" in spark, spark


@pytest.mark.slow
def test_the_example_works_through_every_entry_point(venv: Path, tmp_path: Path) -> None:
    """With pyspark added, the example's own kit run drives its sinks through
    ``foreach_batch``, ``twopc.write_batch``, ``df.write.format("twopc")`` and
    ``writeStream.format("twopc")``: the plugin has no code for any of them. pyspark goes
    into a separate directory (``PYTHONPATH``), so the module's virtualenv stays without it."""
    python = venv / "bin" / "python"
    lib = tmp_path / "pyspark-lib"
    _ok(
        _run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--target",
                lib,
                "pyspark>=4.1",
                "pandas>=2.2,<3",
            ],
            tmp_path,
        )
    )
    env = {"PYTHONPATH": str(lib), "PYSPARK_PYTHON": str(python)}
    result = _run(
        [
            python,
            "-m",
            "pytest",
            EXAMPLE / "tests",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            "-k",
            "spark or batch or format",
        ],
        tmp_path,
        **env,
    )
    output = _ok(result)
    driver, in_task = output.split("twopc conformance: TestSqliteTaskConformance")
    for words in (
        "passed   a real foreachBatch query is exactly-once",
        "passed   a batch write is all or nothing, once per write_id (3 of 3 cases)",
        'passed   df.write.format("twopc") writes once per write_id',
        'passed   writeStream.format("twopc") is exactly-once, replays included (2 of 2 cases)',
    ):
        assert words in driver, output
    # a failed task, then the rerun: the partitions committed in their tasks are not written
    # twice
    stream = 'passed   writeStream.format("twopc") is exactly-once, replays included (2 of 2'
    assert stream in in_task, output
    assert "batch writes refuse this sink clearly" in in_task, output
    assert "FAILED" not in output, output
