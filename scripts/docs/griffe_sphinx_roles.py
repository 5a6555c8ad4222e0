"""A griffe extension for the docs site: Sphinx roles in docstrings become links.

twopc's docstrings name other objects the Sphinx way (``:class:`~twopc.Sink```,
``:meth:`commit```). mkdocstrings reads docstrings as Markdown, where such a role would show
as ``:class:`` followed by a code span. This extension rewrites each role, when the docs are
built, into an optional cross-reference to the object's canonical path: a link where the
site documents the object, plain code where it does not (private modules). It also turns a
paragraph's closing ``::`` (reST's "a literal block follows") into ``:``; the indented block
after it is a code block in Markdown too.

Used from ``mkdocs.yml`` (``plugins.mkdocstrings.handlers.python.options.extensions``);
the source files are not changed.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const):`(~?)([^`<>]+)`")
_LITERAL_BLOCK = re.compile(r"(\S)::(\n[ \t]*\n)")


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **_: Any) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = _rewrite(obj.docstring.value, obj, loader)


def _objects(obj: griffe.Object) -> list[griffe.Object]:
    """``obj`` and everything defined in it (imported names are their modules' business)."""
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found.extend(_objects(member))  # type: ignore[arg-type]
    return found


def _rewrite(text: str, obj: griffe.Object, loader: griffe.GriffeLoader) -> str:
    def link(match: re.Match[str]) -> str:
        short, target = match.group(1) == "~", match.group(2).strip()
        shown = html.escape(target.rsplit(".", 1)[-1] if short else target)
        identifier = _canonical(target, obj, loader)
        if identifier is None:
            return f"<code>{shown}</code>"
        return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'

    return _LITERAL_BLOCK.sub(r"\1:\2", _ROLE.sub(link, text))


def _canonical(target: str, obj: griffe.Object, loader: griffe.GriffeLoader) -> str | None:
    """Where ``target``, as written in ``obj``'s docstring, is defined; None if unknown."""
    head, _, rest = target.partition(".")
    candidates = [target]
    try:
        resolved = obj.resolve(head)
    except (griffe.NameResolutionError, ValueError):
        resolved = None
    if resolved is not None:
        candidates.insert(0, f"{resolved}.{rest}" if rest else resolved)
    for path in candidates:
        try:
            found = loader.modules_collection[path]
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        try:
            return str(found.canonical_path)
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
    return None
