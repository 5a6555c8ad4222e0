"""The real ``twopc`` command line (``twopc status``, ``twopc recover``), run in its own
process from the repository root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.harness.processes import REPO


def twopc_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command line, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "twopc.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        check=False,
    )


def status_json(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = twopc_cli("status", *args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result
