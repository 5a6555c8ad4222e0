"""pytest plugin of the conformance kit: prints which guarantees a sink passed.

Enable it in the plugin's ``conftest.py``::

    pytest_plugins = ["twopc.testing.plugin"]
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from twopc.testing._base import GUARANTEES, NOT_APPLICABLE

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
            if outcomes:
                terminalreporter.write_line(_line(words, outcomes))


def _line(words: str, outcomes: list[str]) -> str:
    """One guarantee's summary line. Cases skipped because they belong to the other commit
    role (their reason starts with "not applicable to this role: ") are not coverage the
    sink lacks: they are counted apart, as such."""
    cases = [tuple(o.split("|", 1)) for o in outcomes]
    states = [state for state, _ in cases]
    if "failed" in states:
        return f"FAILED   {words}"
    if "xfailed" in states:
        return f"xfailed  {words} ({cases[states.index('xfailed')][1]})"
    other_role = [r for s, r in cases if s == "skipped" and r.startswith(NOT_APPLICABLE)]
    applicable = [(s, r) for s, r in cases if s != "skipped" or not r.startswith(NOT_APPLICABLE)]
    if not applicable:
        return f"skipped  {words} ({other_role[0]})"
    if all(state == "skipped" for state, _ in applicable):
        return f"skipped  {words} ({applicable[0][1]})"
    passed = sum(state == "passed" for state, _ in applicable)
    notes = [f"{passed} of {len(applicable)} cases"] if len(applicable) > 1 else []
    if other_role:
        count = len(other_role)
        notes.append(f"{count} case{'s' if count > 1 else ''} not applicable to this role")
    return f"passed   {words}" + (f" ({'; '.join(notes)})" if notes else "")
