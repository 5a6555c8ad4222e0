"""Every line of ``tests/extended.txt`` names a test that exists: a renamed test or
parameter would otherwise slip back into CI's subset unnoticed, or stay out of it."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import EXTENDED_LIST, extended_patterns, listed
from tests.harness.processes import REPO


def test_every_line_of_the_extended_list_names_a_collected_test() -> None:
    patterns = extended_patterns()
    files = sorted({pattern.split("::", 1)[0].rstrip("*") for pattern in patterns})
    if not files:
        return
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--extended",
         "-p", "no:cacheprovider", *files],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    nodeids = [line for line in collected.stdout.splitlines() if "::" in line]
    assert nodeids, collected.stdout + collected.stderr
    unmatched = [p for p in patterns if not any(listed(n, p) for n in nodeids)]
    assert not unmatched, f"lines of {EXTENDED_LIST.name} that name no test: {unmatched}"


def test_a_line_is_a_node_id_or_a_prefix() -> None:
    assert listed("tests/e2e/test_x.py::test_y[a-b]", "tests/e2e/test_x.py::test_y[a-b]")
    assert not listed("tests/e2e/test_x.py::test_y[a-bc]", "tests/e2e/test_x.py::test_y[a-b]")
    assert listed("tests/e2e/test_x.py::test_y[a-b]", "tests/e2e/test_x.py::test_y[*")
    assert not listed("tests/e2e/test_x.py::test_z", "tests/e2e/test_x.py::test_y*")
