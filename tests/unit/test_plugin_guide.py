"""The two complete sinks of the plugin guide (docs/plugins.md, "Two complete sinks, one per
role") run as printed: the guide's code is executed here, with both sinks, and both pass the
conformance kit's checks that run in one process."""

from __future__ import annotations

import functools
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.harness.processes import REPO
from twopc.testing import DriverCommitChecks, TaskCommitChecks, TaskSideChecks

pytestmark = pytest.mark.unit

SECTION = "### Two complete sinks, one per role"


def _guide_code() -> tuple[str, str]:
    text = (REPO / "docs" / "plugins.md").read_text()
    start = text.index(SECTION)
    end = text.index("\n### ", start + len(SECTION))
    sinks, run = re.findall(r"```python\n(.*?)```", text[start:end], re.S)
    return sinks, run


@pytest.mark.parametrize("sink", ["ListSink", "ListTaskSink"])
def test_the_guides_sinks_write_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sink: str
) -> None:
    sinks, run = _guide_code()
    run = run.replace("/tmp/chk", str(tmp_path / "chk")).replace("/tmp/log", str(tmp_path / "log"))
    run = run.replace("ListTaskSink()", f"{sink}()")
    module = types.ModuleType("plugin_guide")  # dataclasses look their module up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(sinks + "\n" + run, "docs/plugins.md", "exec"), module.__dict__)
    # run again from the same checkpoint: nothing new, nothing twice
    exec(compile(run, "docs/plugins.md", "exec"), module.__dict__)


# -- the guide's sinks through the conformance kit -------------------------------------------


@functools.cache
def _guide() -> types.ModuleType:
    """The guide's sinks as a module of their own, for the kit's sink factories."""
    sinks, _ = _guide_code()
    module = types.ModuleType("plugin_guide_kit")  # dataclasses look their module up
    sys.modules[module.__name__] = module
    exec(compile(sinks, "docs/plugins.md", "exec"), module.__dict__)
    return module


def list_sink(target: str) -> Any:
    return _guide().ListSink()


def list_task_sink(target: str) -> Any:
    return _guide().ListTaskSink()


class _GuideStore:
    """The guide's sinks keep one store per process: each test empties it."""

    large_rows = 20_000

    def new_target(self, tmp_path: Path) -> str:
        for kept in _guide().STORE.values():
            kept.clear()
        return str(tmp_path / "target")

    def read_committed(self, target: str) -> list[int]:
        return list(_guide().STORE["visible"])


class TestTheGuidesListSink(_GuideStore, TaskSideChecks, DriverCommitChecks):
    sink_factory = "tests.unit.test_plugin_guide:list_sink"

    def test_commit_from_a_fresh_process(self, target: str) -> None:
        pytest.skip("the guide's store lives in one process")

    def test_pre_commit_is_durable(self, target: str) -> None:
        pytest.skip("the guide's store lives in one process")


class TestTheGuidesListTaskSink(_GuideStore, TaskSideChecks, TaskCommitChecks):
    sink_factory = "tests.unit.test_plugin_guide:list_task_sink"
