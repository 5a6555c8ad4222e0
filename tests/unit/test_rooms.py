"""The core's rooms (docs/design/architecture.md) and their one-way imports.

``twopc._contract`` (with the public contract modules) is below ``twopc._coordination``,
which is below ``twopc._engines``, which is below ``twopc._operations``: no module imports
a room above its own, and the modules' imports have no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import twopc

pytestmark = pytest.mark.unit

CORE = Path(twopc.__file__).parent

CONTRACT_MODULES = frozenset(
    {
        "protocol",
        "errors",
        "faults",
        "progress",
        "storage",
        "secrets",
        "strict_json",
        "retrying",
        "table_formats",
        "plugins",
        "_version",
    }
)
ROOMS = ("_contract", "_coordination", "_engines", "_operations")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(CORE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def room_of(module: str) -> int | None:
    """The room's level of a ``twopc`` module (``None``: above the rooms, e.g. the package,
    the local engine, the command line, the kit and the metrics exporters)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "twopc":
        return None
    if parts[1] in CONTRACT_MODULES:
        return 0
    if parts[1] in ROOMS:
        return ROOMS.index(parts[1])
    return None


def imports_of(path: Path, *, top_level_only: bool) -> set[str]:
    """The ``twopc`` modules ``path`` imports; ``top_level_only``: those run at import time
    (not inside functions, not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text())
    nodes: list[ast.AST] = []
    if top_level_only:
        nodes = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    else:
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("twopc.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "twopc":
                found |= {f"twopc.{a.name}" for a in node.names}
            elif node.module.startswith("twopc."):
                found.add(node.module)
    return found


MODULES = {module_name(p): p for p in sorted(CORE.rglob("*.py"))}


def test_no_room_imports_a_room_above_it() -> None:
    wrong = []
    for name, path in MODULES.items():
        level = room_of(name)
        if level is None:
            continue
        for imported in imports_of(path, top_level_only=False):
            target = room_of(imported)
            if target is not None and target > level:
                wrong.append(f"{name} ({ROOMS[level] if level else 'contract'}) imports {imported}")
    assert wrong == [], "an arrow back up:\n" + "\n".join(wrong)


def test_the_import_graph_has_no_cycle() -> None:
    graph = {
        name: {m for m in imports_of(path, top_level_only=True) if m in MODULES}
        for name, path in MODULES.items()
    }
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*trail[trail.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_every_private_module_lives_in_a_room() -> None:
    """New private modules go into a room, not beside the public ones."""
    loose = [
        name
        for name in MODULES
        if name.count(".") == 1
        and name.split(".")[1].startswith("_")
        and name.split(".")[1] not in {*ROOMS, "_version", "_internal"}
    ]
    assert loose == []


@pytest.mark.parametrize(
    ("module", "level"),
    [
        ("twopc._engines.spark", 2),
        ("twopc.protocol", 0),
        ("twopc._contract.boundary", 0),
        ("twopc._operations.recover", 3),
        ("twopc.local", None),
    ],
)
def test_rooms_are_told_apart(module: str, level: int | None) -> None:
    assert room_of(module) == level


def test_an_import_of_a_room_above_is_seen(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from twopc._engines.spark import foreach_batch\n")
    imported = imports_of(source, top_level_only=False)
    assert imported == {"twopc._engines.spark"}
    assert imports_of(source, top_level_only=True) == set()


MODULE_LINES = 520
FUNCTION_LINES = 60
"""About 500 lines a module and 60 a function (docstrings not counted): past that, a part
has more than one job (issue 31)."""


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    start = (first.end_lineno or first.lineno) + 1 if docstring else first.lineno
    return (node.end_lineno or node.lineno) - start + 1


def test_modules_and_functions_stay_small() -> None:
    big = []
    for name, path in MODULES.items():
        source = path.read_text()
        if source.count("\n") > MODULE_LINES:
            big.append(f"{name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and (length := _body_lines(node)) > FUNCTION_LINES:
                big.append(f"{name}.{node.name}: {length} lines")
    assert big == [], "split these:\n" + "\n".join(big)
