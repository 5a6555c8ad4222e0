"""Running :mod:`tests.harness.entry_query` from a test: as a process that ends, or one that a
test SIGKILLs once the batch it stalls in has been decided."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.harness import procs
from tests.harness.sink_recipe import SinkRecipe

REPO = Path(__file__).resolve().parents[2]


def command(
    entry: str,
    spec: SinkRecipe,
    source: Path,
    checkpoint: Path,
    *,
    faults: str = "",
    remote: str | None = None,
    write_id: str = "w1",
    master: str = "local[2]",
    files_per_trigger: int = 1,
) -> list[str]:
    args = [
        sys.executable,
        "-m",
        "tests.harness.entry_query",
        "--entry",
        entry,
        "--spec",
        spec.dumps(),
        "--source",
        str(source),
        "--checkpoint",
        str(checkpoint),
        "--write-id",
        write_id,
        "--master",
        master,
        "--files-per-trigger",
        str(files_per_trigger),
    ]
    if faults:
        args += ["--faults", faults]
    if remote:
        args += ["--remote", remote]
    return args


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env=_env(), check=False, cwd=REPO
    )


def decision_file(root: Path, batch_id: int) -> Path | None:
    """The commit log's decision of ``batch_id`` anywhere under ``root``."""
    found = sorted(root.rglob(f"{batch_id:020d}.decision.json"))
    return found[0] if found else None


def kill_when_decided(
    args: list[str], roots: list[Path], batch_id: int, timeout: float = 240
) -> str:
    """Start the query, wait until ``batch_id`` is decided (the fault plan stalls it after
    the decision), then SIGKILL the query's whole process group. Returns its output."""
    return kill_when(
        args,
        roots[0],
        lambda: any(decision_file(root, batch_id) for root in roots),
        f"batch {batch_id} was decided",
        timeout,
    )


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start the query in a process group of its own, its output into ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
            cwd=REPO,
            start_new_session=True,
        )


def _wait_until(
    process: subprocess.Popen[bytes],
    log: Path,
    condition: Callable[[], bool],
    what: str,
    timeout: float,
) -> None:
    """Poll ``condition`` until it holds; fail if the query ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the query ended before {what}:\n" + log.read_text()[-3000:])
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout:.0f} s")
        time.sleep(0.2)


def kill_when(
    args: list[str], log_dir: Path, condition: Callable[[], bool], what: str, timeout: float = 240
) -> str:
    """Start the query, wait until ``condition()`` holds, then SIGKILL the query's whole
    process group. Returns its output."""
    log = log_dir / f"killed-{time.monotonic_ns()}.log"
    process = _start(args, log)
    try:
        _wait_until(process, log, condition, what, timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return log.read_text()


def kill_executors_when(
    args: list[str],
    log: Path,
    condition: Callable[[], bool],
    what: str,
    *,
    timeout: float = 240,
    finish: float = 400,
) -> tuple[int, str]:
    """Start the query (a ``local-cluster`` master), wait until ``condition()`` holds, then
    SIGKILL every executor JVM it started and let the query go on: Spark replaces them and
    runs the lost tasks again. Returns the query's exit code and output."""
    query = _start(args, log)
    try:
        _wait_until(query, log, condition, what, timeout)
        executors = procs.executor_jvms(query.pid)
        assert executors, "no executor JVM found"
        for pid in executors:
            procs.sigkill(pid)
        returncode = query.wait(timeout=finish)
    finally:
        if query.poll() is None:  # the driver and everything it started
            os.killpg(query.pid, signal.SIGKILL)
            query.wait()
    return returncode, log.read_text()


def wait_for_decided(roots: list[Path], batch_id: int, timeout: float = 240) -> Path:
    deadline = time.monotonic() + timeout
    while True:
        for root in roots:
            found = decision_file(root, batch_id)
            if found is not None:
                return found
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} was not decided in {timeout:.0f} s")
        time.sleep(0.2)
