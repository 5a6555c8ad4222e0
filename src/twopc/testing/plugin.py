"""pytest plugin of the conformance kit: prints which guarantees a sink passed.

Enable it in the plugin's ``conftest.py``::

    pytest_plugins = ["twopc.testing.plugin"]
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from twopc.testing._base import GUARANTEES

_RESULTS_KEY = pytest.StashKey[dict[str, dict[str, list[str]]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS_KEY] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, Any]:
    report = yield
    function = getattr(item, "function", None)
    key = getattr(function, "__twopc_guarantee__", None)
    if key is None or not isinstance(item, pytest.Function) or item.cls is None:
        return report
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = report.outcome
        detail = ""
        if report.skipped and hasattr(report, "wasxfail"):
            outcome, detail = "xfailed", str(report.wasxfail)  # a known failure, not a skip
        elif report.skipped and isinstance(report.longrepr, tuple):
            detail = str(report.longrepr[2]).removeprefix("Skipped: ")
        results = item.config.stash[_RESULTS_KEY].setdefault(item.cls.__name__, {})
        results.setdefault(key, []).append(f"{outcome}|{detail}")
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS_KEY, {})
    for suite, by_key in sorted(results.items()):
        terminalreporter.section(f"twopc conformance: {suite}")
        for key, words in GUARANTEES.items():
            outcomes = by_key.get(key)
            if not outcomes:
                continue
            states = [o.split("|", 1)[0] for o in outcomes]
            if "failed" in states:
                line = f"FAILED   {words}"
            elif "xfailed" in states:
                reason = outcomes[states.index("xfailed")].split("|", 1)[1]
                line = f"xfailed  {words} ({reason})"
            elif all(s == "skipped" for s in states):
                reason = outcomes[0].split("|", 1)[1]
                line = f"skipped  {words} ({reason})"
            else:
                passed = states.count("passed")
                line = f"passed   {words}" + (
                    f" ({passed} of {len(states)} cases)" if len(states) > 1 else ""
                )
            terminalreporter.write_line(line)
