"""The house's one-way imports: the core (``src/twopc``) never imports a backend package.
Backends depend on the core; the core reaches them only through the plugin registry."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import twopc

pytestmark = pytest.mark.unit

BACKENDS = frozenset({"twopc_kafka", "twopc_jdbc", "twopc_files", "twopc_iceberg", "twopc_delta"})
CORE = Path(twopc.__file__).parent


def backend_imports(source: str) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every import of a backend in ``source``: ``import``, ``from
    ... import`` (also inside functions) and ``importlib.import_module("...")`` with a
    literal name."""
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and _is_import_call(node.func):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names = [first.value]
        for name in names:
            if name.split(".")[0] in BACKENDS:
                yield node.lineno, name


def _is_import_call(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def test_no_module_of_the_core_imports_a_backend() -> None:
    found = [
        f"{path.relative_to(CORE.parent)}:{line}: {module}"
        for path in sorted(CORE.rglob("*.py"))
        for line, module in backend_imports(path.read_text())
    ]
    assert found == [], "the core must not import backends:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "import twopc_kafka",
        "import os, twopc_jdbc.postgres as pg",
        "from twopc_files.sink import FilesSink",
        "def f():\n    from twopc_kafka import ConsumerGroup\n",
        "import importlib\nimportlib.import_module('twopc_kafka.progress')",
    ],
)
def test_the_scan_sees_every_form_of_import(source: str) -> None:
    assert list(backend_imports(source))


def test_the_scan_ignores_the_core_and_relative_imports() -> None:
    assert not list(backend_imports("import twopc\nfrom . import progress\nimport twopc_x"))
