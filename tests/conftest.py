"""Suite-wide pytest configuration: the conformance kit's closing summary, the shared
fixtures of ``tests/harness`` (the real services, the suite's SparkSession), assertion
rewriting for the harness (registered here, before any test module imports it), and the
``extended`` selection.

Tests marked ``extended`` (the backend-by-case combinations of the long matrices beyond a
representative subset) are deselected unless ``--extended`` is given or
``TWOPC_TEST_EXTENDED=1`` is set: CI runs the subset, ``scripts/test --extended`` all.
A test is marked ``extended`` either where it is defined or by a line of
``tests/extended.txt``, the list that keeps CI's time budget in one place.
"""

import os
from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.harness")

pytest_plugins = [
    "twopc.testing.plugin",
    "pytester",
    "tests.harness.service_fixtures",
    "tests.harness.spark_fixtures",
]

EXTENDED_ENV = "TWOPC_TEST_EXTENDED"
EXTENDED_LIST = Path(__file__).with_name("extended.txt")


def extended_patterns(path: Path = EXTENDED_LIST) -> list[str]:
    """The lines of ``tests/extended.txt``: a pytest node id, or a prefix of node ids
    ending in ``*``; ``#`` starts a comment."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--extended",
        action="store_true",
        help="also run the tests marked 'extended' (the long matrices' other combinations)",
    )


def _extended(config: pytest.Config) -> bool:
    return bool(config.getoption("--extended")) or os.environ.get(EXTENDED_ENV) == "1"


def listed(nodeid: str, pattern: str) -> bool:
    """Whether a line of ``tests/extended.txt`` names this test."""
    if pattern.endswith("*"):
        return nodeid.startswith(pattern[:-1])
    return nodeid == pattern


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    patterns = extended_patterns()
    for item in items:
        if any(listed(item.nodeid, pattern) for pattern in patterns):
            item.add_marker(pytest.mark.extended)
    if _extended(config):
        return
    dropped = [item for item in items if item.get_closest_marker("extended")]
    if not dropped:
        return
    config.hook.pytest_deselected(items=dropped)
    gone = {id(item) for item in dropped}
    items[:] = [item for item in items if id(item) not in gone]


def pytest_report_header(config: pytest.Config) -> str:
    if _extended(config):
        return "extended matrices: on (every combination)"
    return f"extended matrices: off (representative subset; --extended or {EXTENDED_ENV}=1)"
