"""The index at the top of docs/design/decisions.md lists every decision, in order, linked
to its heading (``scripts/decisions-index`` writes it; ``mkdocs build --strict`` checks
that the anchors exist)."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

# scripts/decisions-index uses mkdocs' Markdown, a dev dependency: the lowest-versions
# passes install the extras only
pytest.importorskip("markdown", reason="Markdown comes with the docs tools (the dev extra)")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "decisions-index"
PAGE = REPO / "docs" / "design" / "decisions.md"


def test_the_index_is_up_to_date() -> None:
    checked = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr


def test_the_index_links_every_decision_in_order() -> None:
    text = PAGE.read_text()
    headings = re.findall(r"^## (\d+)\. (.+)$", text, flags=re.MULTILINE)
    listed = re.findall(r"^(\d+)\. \[(.+)\]\(#[^)]+\)$", text, flags=re.MULTILINE)
    assert listed == headings
    assert [int(n) for n, _ in headings] == list(range(1, len(headings) + 1))
    assert text.index("](#1-") < text.index("\n## 1. ")  # at the top


def test_a_new_decision_makes_the_index_stale() -> None:
    script = runpy.run_path(str(SCRIPT))
    text = PAGE.read_text() + "\n## 47. A `new` decision\n\nText.\n"
    assert script["with_index"](text) != text
    assert "47. [A `new` decision](#47-a-new-decision)" in script["with_index"](text)
