"""The API reference (``docs/reference``) documents every public name.

The pages list ``::: identifier`` directives by hand, grouped for a reader; this test
keeps them complete: a name added to a package's ``__all__`` without a place in the
reference fails here, before the site ships without it. ``mkdocs build --strict`` (run by
``scripts/test``) checks the other direction: every directive names something real."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
PUBLIC = [
    "twopc",
    "twopc.metrics",
    "twopc.testing",
    "twopc_files",
    "twopc_kafka",
    "twopc_jdbc",
    "twopc_iceberg",
]
"""The packages whose ``__all__`` the reference covers."""
WHOLE_MODULES = {"twopc.protocol", "twopc.errors", "twopc.progress", "twopc.faults"}
"""Modules the reference shows whole: the plugin contract among them."""


def _directives() -> set[str]:
    found: set[str] = set()
    for page in REFERENCE.glob("*.md"):
        found.update(re.findall(r"^::: ([\w.]+)$", page.read_text(), flags=re.MULTILINE))
    return found


def _documented(package: str, name: str, directives: set[str]) -> bool:
    """Shown with its package (a package shown whole shows its ``__all__``), under its
    public name or the module that defines it (lazily imported backends), or as a member
    of a module the reference shows whole."""
    for directive in directives:
        if directive == package:
            return True
        if directive.startswith(f"{package}.") and directive.endswith(f".{name}"):
            return True
        shown_whole = directive in WHOLE_MODULES and directive.startswith(f"{package}.")
        if shown_whole and name in importlib.import_module(directive).__all__:
            return True
    return False


@pytest.mark.unit
@pytest.mark.parametrize("package", PUBLIC)
def test_every_public_name_is_in_the_reference(package: str) -> None:
    directives = _directives()
    names = [n for n in importlib.import_module(package).__all__ if not n.startswith("__")]
    missing = [n for n in names if not _documented(package, n, directives)]
    assert not missing, f"add to a page of docs/reference: {package}.{missing}"


@pytest.mark.unit
def test_the_plugin_contract_is_shown_whole() -> None:
    assert _directives() >= WHOLE_MODULES
