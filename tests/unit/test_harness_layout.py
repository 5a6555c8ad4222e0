"""The test harness has one home: code the test folders share lives in ``tests/harness``.

Read from the imports of every module under ``tests`` (with ``ast``, nothing imported):
no module imports a test module (``test_*.py``), and a test folder (``tests/unit``,
``tests/e2e``, ``tests/crash``, ``tests/integration``, ``tests/chaos``, ``tests/kit``)
imports shared code only from ``tests.harness`` or from its own folder; the harness imports
no test folder. ``tests/conftest.py`` is the suite's own configuration."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]
FOLDERS = ("unit", "e2e", "crash", "integration", "chaos", "kit")
ALLOWED_TOP = {"tests.harness", "tests.conftest"}
"""Modules of ``tests`` that any folder may import besides its own (``tests.conftest``:
``tests/unit/test_extended_list.py`` checks the extended selection it implements)."""


def _module_of(path: Path) -> str:
    parts = path.relative_to(TESTS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of a ``tests`` module in ``path`` (relative
    imports resolved; ``from package import module`` counted as the module)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module_of(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *filter(None, [base])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name == "tests" or name.startswith("tests.")]


def _is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (TESTS.parent / relative).with_suffix(".py").is_file() or (
        TESTS.parent / relative / "__init__.py"
    ).is_file()


def _sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_imports_a_test_module() -> None:
    wrong = [
        f"{path.relative_to(TESTS.parent)}:{line} imports {name}"
        for path in _sources()
        for line, name in _imports(path)
        if _is_module(name) and name.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert not wrong, "move what is shared into tests/harness:\n" + "\n".join(wrong)


def test_folders_share_code_only_through_the_harness() -> None:
    wrong = []
    for path in _sources():
        parts = path.relative_to(TESTS).parts
        if len(parts) == 1:
            continue  # tests/conftest.py, tests/__init__.py
        own = f"tests.{parts[0]}"
        allowed = (own, *ALLOWED_TOP) if own != "tests.harness" else (own,)
        for line, name in _imports(path):
            if not _is_module(name) or name == "tests":
                continue
            if not any(name == a or name.startswith(f"{a}.") for a in allowed):
                wrong.append(f"{path.relative_to(TESTS.parent)}:{line} imports {name}")
    assert not wrong, "import shared code from tests.harness:\n" + "\n".join(wrong)


def test_every_test_folder_is_known() -> None:
    """A new folder of tests is added to :data:`FOLDERS` (and docs/development.md)."""
    folders = {p.parent.name for p in TESTS.glob("*/__init__.py")} - {"harness"}
    assert folders == set(FOLDERS)
