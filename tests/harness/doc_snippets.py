"""The code blocks of the documentation (README.md and docs/): found, picked by a marker,
edited for a test run and executed; the commands of a shell block. Used by the unit tests
that claim every snippet (``tests/unit/test_doc_snippets.py``) and the ones that run them
against Spark and the services (``tests/e2e/test_doc_snippets_run.py``)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness.processes import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
CODE = {"python", "bash", "sh", "console", "sql", "toml"}
"""Languages of blocks that are code: each one must be claimed."""
OUTPUT = {"", "text", "json"}
"""Languages of blocks that show output or a layout: nothing to run."""

# -- the blocks ---------------------------------------------------------------------------

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository, e.g. "docs/quickstart.md"
    line: int
    lang: str
    code: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.lang})"


def _blocks_of(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        info = opening["info"].strip()
        lang = info.split()[0] if info else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        assert j < len(lines), f"{path}:{i + 1}: a code block that is never closed"
        found.append(Block(str(path.relative_to(REPO)), i + 1, lang, "\n".join(body) + "\n"))
        i = j + 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in _blocks_of(page)]


def code_blocks() -> list[Block]:
    return [block for block in all_blocks() if block.lang in CODE]


def find(page: str, marker: str) -> Block:
    """The one code block of ``page`` that contains ``marker``."""
    hits = [b for b in code_blocks() if b.page == page and marker in b.code]
    assert len(hits) == 1, f"{page}: {len(hits)} code blocks contain {marker!r}"
    return hits[0]


def replaced(code: str, replacements: Mapping[str, str]) -> str:
    """``code`` with each key replaced; a key that is no longer in the snippet fails, so
    a changed snippet is looked at again rather than run half-replaced."""
    for old, new in replacements.items():
        assert old in code, f"{old!r} is no longer in the snippet: update this test"
        code = code.replace(old, new)
    return code


def run(code: str, namespace: dict[str, Any], name: str) -> dict[str, Any]:
    exec(compile(code, name, "exec"), namespace)
    return namespace


def commands_of(block: Block) -> list[list[str]]:
    """The commands of a shell block (``$``-prompted lines of a console block), with
    continuation lines joined; ``...`` stands for elided arguments and is dropped."""
    lines = block.code.splitlines()
    if block.lang == "console":
        text, taking = [], False
        for line in lines:
            if line.startswith("$ "):
                text.append(line[2:])
                taking = line.endswith("\\")
            elif taking:
                text.append(line)
                taking = line.endswith("\\")
        lines = text
    joined = "\n".join(lines).replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append([w for w in words if w != "..."])
    return commands
