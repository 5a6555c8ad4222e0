"""Optional extras, imported when an exporter is created, with an install hint."""

from __future__ import annotations

import importlib
from types import ModuleType

from twopc.errors import ConfigurationError, ExtraNotInstalledError

__all__ = ["not_shippable", "require"]


def require(module: str, package: str, extra: str) -> ModuleType:
    """Import ``module`` or say which extra brings its ``package``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ExtraNotInstalledError(
            f'this exporter needs {package}: pip install "twopc[{extra}]"'
        ) from exc


def not_shippable(what: str) -> ConfigurationError:
    """An exporter holds its process's collectors: pickled elsewhere (Spark Connect ships
    the writer next to the server), it would report nowhere, so pickling is refused."""
    return ConfigurationError(
        f"a {what} reports from the process that created it and cannot be pickled: over "
        "Spark Connect on_metrics runs next to the server, so create the exporter there "
        "(see the metrics page of the docs)"
    )
