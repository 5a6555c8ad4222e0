"""Suite-wide pytest configuration: the conformance kit's closing summary, assertion
rewriting for the shared test helpers (registered here, before any test module imports
them: tests/chaos imports them too, and it is collected before tests/integration), and the
``extended`` selection.

Tests marked ``extended`` (the backend-by-case combinations of the long matrices beyond a
representative subset) are deselected unless ``--extended`` is given or
``TWOPC_TEST_EXTENDED=1`` is set: CI runs the subset, ``scripts/test --extended`` all.
"""

import os

import pytest

pytest.register_assert_rewrite("tests.integration.jdbc_support")

pytest_plugins = ["twopc.testing.plugin", "pytester"]

EXTENDED_ENV = "TWOPC_TEST_EXTENDED"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--extended",
        action="store_true",
        help="also run the tests marked 'extended' (the long matrices' other combinations)",
    )


def _extended(config: pytest.Config) -> bool:
    return bool(config.getoption("--extended")) or os.environ.get(EXTENDED_ENV) == "1"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
