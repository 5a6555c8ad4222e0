"""What the kit quotes when a check fails: the exception, and the frames of the plugin.

A plugin author wants the error their sink raised and where in their own code, not the
kit's or twopc's frames around it, nor the last screenful of a subprocess's stderr. The
"plugin" is every module that defines the sink's classes (twopc's own contract classes
aside) and the module of ``sink_factory``: for a package, the whole package.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["PluginCode", "describe", "explain_output", "frames_of", "plugin_code"]

# twopc modules that hold only the contract (base classes), never a sink's own code
_CONTRACT = ("twopc.protocol", "twopc.progress")
_NOT_CODE = ("builtins", "abc", "typing")
_FRAMES_SHOWN = 3
_MESSAGE_CHARS = 600


@dataclass(frozen=True)
class PluginCode:
    """Where a plugin's code lives: path prefixes, each with the directory its paths are
    shown relative to (the one holding the top-level package)."""

    roots: tuple[tuple[str, str], ...] = ()

    def owns(self, filename: str) -> bool:
        path = os.path.realpath(filename)
        return any(path == root or path.startswith(root + os.sep) for root, _ in self.roots)

    def shown(self, filename: str) -> str:
        path = os.path.realpath(filename)
        for root, base in self.roots:
            if path == root or path.startswith(root + os.sep):
                return os.path.relpath(path, base)
        return filename


def plugin_code(factory: str = "", sink_types: Iterable[type] = ()) -> PluginCode:
    """The plugin's code: the modules of the sink classes (and their bases) and of
    ``factory`` (``"module:function"``). Never raises: what cannot be found is left out."""
    names = [factory.partition(":")[0]] if factory else []
    for sink_type in sink_types:
        names += [cls.__module__ for cls in sink_type.__mro__]
    roots: dict[str, str] = {}
    for name in names:
        found = _root(name)
        if found is not None:
            roots.setdefault(*found)
    return PluginCode(tuple(roots.items()))


def _root(name: str) -> tuple[str, str] | None:
    top = name.split(".", maxsplit=1)[0]
    if not name or top in _NOT_CODE or name in _CONTRACT or name == "twopc":
        return None
    try:
        module = sys.modules.get(name) or importlib.import_module(name)
        owner = module if top == "twopc" else sys.modules.get(top) or importlib.import_module(top)
    except Exception:  # a factory that does not import fails elsewhere, with its own error
        return None
    paths = list(getattr(owner, "__path__", ()))
    file = getattr(owner, "__file__", None)
    if top != "twopc" and paths:  # a package (namespace packages have no __file__)
        root = os.path.realpath(paths[0])
        return root, os.path.dirname(root)
    if not file:
        return None
    path = os.path.realpath(file)
    # a module of its own, or twopc's reference sinks (twopc.testing): that file, not twopc
    levels = name.count(".") + 1 if top == "twopc" else 1
    return path, _above(path, levels)


def _above(path: str, levels: int) -> str:
    for _ in range(levels):
        path = os.path.dirname(path)
    return path


# -- an exception in this process ---------------------------------------------------------


def describe(exc: BaseException, code: PluginCode) -> str:
    """``Type: message``, then the plugin's frames where the exception (or its cause)
    passed, innermost last."""
    text = _one_line_or_few(str(exc))
    head = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return head + frames_of(exc, code)


def frames_of(exc: BaseException, code: PluginCode) -> str:
    """The lines ``at <file>:<line> in <function>: <source>`` of :func:`describe`: the
    plugin's frames of the innermost exception in the chain that passed through the
    plugin (where the error began), innermost last."""
    chain = _chain(exc)
    for link in reversed(chain):  # the root cause first
        frames = _summary(link)
        if any(code.owns(f[0]) for f in frames):
            return _frames(frames, code)
    return ""


def _summary(exc: BaseException) -> list[tuple[str, int, str, str]]:
    return [
        (f.filename, f.lineno or 0, f.name, f.line or "")
        for f in traceback.extract_tb(exc.__traceback__)
    ]


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in seen:
        seen.append(link)
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    return seen


def _frames(frames: Sequence[tuple[str, int, str, str]], code: PluginCode) -> str:
    """The last few of ``frames`` that are the plugin's (none when none is: twopc's and
    the libraries' frames would only hide where the plugin comes in)."""
    own = [f for f in dict.fromkeys(frames) if code.owns(f[0])]
    lines = []
    for filename, line, name, source in own[-_FRAMES_SHOWN:]:
        where = code.shown(filename)
        code_line = f": {source.strip()}" if source else ""
        lines.append(f"\n    at {where}:{line} in {name}{code_line}")
    return "".join(lines)


def _one_line_or_few(text: str) -> str:
    text = text.strip()
    if len(text) > _MESSAGE_CHARS:
        text = text[: _MESSAGE_CHARS - 3] + "..."
    return text


# -- a traceback printed by another process -----------------------------------------------

_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>.+)$')
_STARTS = ("Traceback (most recent call last):",)
_BETWEEN = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)


@dataclass
class _Printed:
    frames: list[tuple[str, int, str, str]]
    exception: list[str]


def explain_output(output: str, code: PluginCode, *, tail_lines: int = 8) -> str:
    """The exceptions in a process's stderr, each with the plugin's frames, in the order
    they were printed (a cause before what it caused); without a traceback, its last
    lines. Tasks of twopc's local engine print theirs too, so a task that could not report
    back still shows its cause here. (Tracebacks of processes that printed at the same
    time may interleave: a block whose exception line is lost is left out.)"""
    printed = [b for b in _tracebacks(output.splitlines()) if b.exception]
    if not printed:
        lines = [line for line in output.splitlines() if line.strip()]
        if not lines:
            return "(it printed nothing on stderr)"
        return "\n".join(f"  {line}" for line in lines[-tail_lines:])
    shown: list[str] = []
    for block in printed[-6:]:
        head = _one_line_or_few("\n".join(block.exception))
        entry = "  " + head.replace("\n", "\n  ") + _frames(block.frames, code)
        if entry not in shown:
            shown.append(entry)
    return "\n".join(shown)


def _tracebacks(lines: list[str]) -> list[_Printed]:
    blocks: list[_Printed] = []
    index = 0
    while index < len(lines):
        if lines[index].strip() not in _STARTS:
            index += 1
            continue
        index += 1
        frames: list[tuple[str, int, str, str]] = []
        while index < len(lines) and (lines[index].startswith(" ") or not lines[index]):
            match = _FRAME.match(lines[index])
            if match:
                source = ""
                following = lines[index + 1] if index + 1 < len(lines) else ""
                if following.startswith("    ") and not _FRAME.match(following):
                    source = following.strip()
                frames.append((match["file"], int(match["line"]), match["name"].strip(), source))
            index += 1
        exception: list[str] = []
        while index < len(lines) and lines[index].strip() and not _boundary(lines[index]):
            exception.append(lines[index].rstrip())
            index += 1
            if len(exception) >= 5:
                break
        blocks.append(_Printed(frames, exception))
    return blocks


def _boundary(line: str) -> bool:
    text = line.strip()
    return text in _STARTS or text in _BETWEEN or _is_process_header(text)


def _is_process_header(text: str) -> bool:
    """``Process ForkProcess-3:``, what multiprocessing prints before a child's traceback."""
    return bool(re.fullmatch(r"Process [\w-]+:", text))
