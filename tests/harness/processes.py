"""Query processes of the tests: the repository root, a query script's command line, and
running it in its own session with its JSON events read back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


@dataclass
class RunResult:
    returncode: int
    events: list[dict[str, Any]] = field(default_factory=list)
    stderr: str = ""

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]


def local_query(script: str, **options: object) -> list[str]:
    """The command line of a local-engine query script in ``tests/harness`` (``local_query``,
    ``local_sql_query``, ``local_kafka_query``): each keyword becomes ``--name value``, with
    dashes for underscores. For :func:`run_process`."""
    argv = [f"tests/harness/{script}.py"]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


def run_process(
    args: list[str], *, faults: str | None = None, timeout: float = 300, cwd: Path = REPO
) -> RunResult:
    """Run a query process in its own session; kill whatever of it survives (the JVM)."""
    env = dict(os.environ)
    env.pop("TWOPC_FAULTS", None)
    if faults:
        env["TWOPC_FAULTS"] = faults
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    events = []
    for line in out.decode(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return RunResult(process.returncode, events, err.decode(errors="replace"))
