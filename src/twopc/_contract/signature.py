"""What a backend factory's signature says about its options: their names, and the kind of
value each takes. :func:`twopc.create_sink` checks keyword options against it (a misspelt
name gets a "did you mean", a value of the wrong type names the option), and
``format("twopc")`` converts its string options with it."""

from __future__ import annotations

import difflib
import inspect
import numbers
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from twopc.errors import ConfigurationError

__all__ = [
    "annotation_kind",
    "check_options",
    "is_option",
    "parameters_of",
    "suggestion",
    "unknown_option",
]


def parameters_of(factory: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """The factory's parameters; for a class, its ``__init__``'s (a ``__new__`` that takes
    ``*args, **kwargs`` would hide them)."""
    target: Callable[..., Any] = factory
    if inspect.isclass(factory):
        target = factory.__init__
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check against
        return {}
    return {
        name: parameter
        for name, parameter in signature.parameters.items()
        if name != "self" and parameter.kind is not inspect.Parameter.VAR_POSITIONAL
    }


def is_option(parameter: inspect.Parameter) -> bool:
    return parameter.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)


def annotation_kind(annotation: Any) -> tuple[str, bool]:
    """The annotation's first base type name (``int``, ``dict``, ``Sequence``...) and
    whether it admits ``None``; from a type or from its text (``from __future__ import
    annotations``)."""
    choices, optional = _choices(annotation)
    return (choices[0] if choices else ""), optional


def suggestion(name: str, known: list[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest known name, or nothing."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if not close:
        close = [k for k in known if k.lower() == name.lower()]
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_option(backend: str, name: str, known: list[str]) -> str:
    """The message for an option the backend does not take."""
    return (
        f"the {backend} backend has no option {name!r}{suggestion(name, known)}; "
        f"its options are: {', '.join(known)}"
    )


def check_options(backend: str, factory: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """Refuse keyword options the factory does not take, and values whose Python type its
    annotations rule out, with a message that names the backend and the option.

    Only what the signature says for sure is checked: annotations this cannot read
    (``Literal``, classes, ``Any``) let every value through to the factory."""
    parameters = parameters_of(factory)
    if not parameters:
        return
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    known = sorted(n for n, p in parameters.items() if is_option(p))
    for name, value in options.items():
        parameter = parameters.get(name)
        if parameter is None or not is_option(parameter):
            if accepts_any:
                continue
            raise ConfigurationError(unknown_option(backend, name, known))
        expected = _mismatch(parameter.annotation, value)
        if expected is not None:
            raise ConfigurationError(
                f"the {backend} backend's option {name!r} takes {expected}, not "
                f"{type(value).__name__} {_shown(value)}"
            )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_ACCEPTS: dict[str, tuple[tuple[type, ...], str]] = {
    "bool": ((bool,), "true or false"),
    "int": ((numbers.Integral,), "a whole number"),
    "float": ((numbers.Real,), "a number"),
    "str": ((str,), "a string"),
    "Sequence": ((list, tuple, str), "a list"),
    "list": ((list, tuple), "a list"),
    "tuple": ((list, tuple), "a list"),
    "dict": ((Mapping,), "a mapping (dict)"),
    "Mapping": ((Mapping,), "a mapping (dict)"),
}


def _mismatch(annotation: Any, value: Any) -> str | None:
    """What the annotation takes, when ``value`` is not that; ``None`` when it fits or the
    annotation cannot be read."""
    choices, optional = _choices(annotation)
    if not choices:
        return None
    if value is None:
        return None if optional else _described(choices)
    for choice in choices:
        base, _, inner = choice.partition("[")
        if base not in _ACCEPTS:
            return None  # a type this check does not know: the factory decides
        types_, _ = _ACCEPTS[base]
        if isinstance(value, bool) and bool not in types_:
            continue  # True is an int to Python, never to an option
        if isinstance(value, types_) and _elements_fit(base, inner, value):
            return None
    return _described(choices)


def _elements_fit(base: str, inner: str, value: Any) -> bool:
    """For a ``Sequence[str]``-like annotation, every element is a string."""
    if base not in ("Sequence", "list", "tuple") or isinstance(value, str):
        return True
    if inner.rstrip("]") == "str":
        return all(isinstance(item, str) for item in value)
    return True


def _described(choices: list[str]) -> str:
    words = []
    for choice in choices:
        base, _, inner = choice.partition("[")
        word = _ACCEPTS.get(base, ((), base))[1]
        if base in ("Sequence", "list", "tuple") and inner.rstrip("]") == "str":
            word = "a list of strings"
        words.append(word)
    return " or ".join(words)


def _choices(annotation: Any) -> tuple[list[str], bool]:
    if annotation is inspect.Parameter.empty:
        return [], False
    text = annotation if isinstance(annotation, str) else _type_text(annotation)
    text = text.replace(" ", "").replace("typing.", "").replace("collections.abc.", "")
    if text.startswith("Optional[") and text.endswith("]"):
        text = text[len("Optional[") : -1] + "|None"
    parts = _top_level(text)
    optional = "None" in parts
    return [part for part in parts if part != "None"], optional


def _top_level(text: str) -> list[str]:
    """``a|b[c|d]`` split at its top-level ``|`` only."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "|" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p]


def _type_text(annotation: Any) -> str:
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return "|".join(_type_text(arg) for arg in args)
    if annotation is type(None):
        return "None"
    named = origin if origin is not None else annotation
    name = str(getattr(named, "__name__", named))
    if args and origin is not None:
        return f"{name}[{','.join(_type_text(a) for a in args)}]"
    return name
