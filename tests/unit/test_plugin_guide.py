"""The two complete sinks of the plugin guide (docs/plugins.md, "Two complete sinks, one per
role") run as printed: the guide's code is executed here, with both sinks."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from tests.helpers import REPO

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
