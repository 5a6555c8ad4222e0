"""Checks of the files sink's options that its signature cannot express: value ranges,
element types, the filesystem package a path needs, and options that contradict each other
or would do nothing. Each raises :class:`~twopc.ConfigurationError` naming the option (also
when the sink is built directly, without :func:`twopc.create_sink`'s checks)."""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping, Sequence
from typing import Any

import fsspec
from fsspec.registry import known_implementations

from twopc import ConfigurationError, ExtraNotInstalledError

__all__ = [
    "MIN_FILE_SIZE",
    "check_filesystem",
    "check_flag",
    "check_mapping",
    "check_partition_by",
    "check_target_file_size",
]

MIN_FILE_SIZE = 1024
_S3 = ("s3", "s3a")
_S3FS_MINIMUM = (2025, 7, 0)
"""s3fs 2025.7.0 made small exclusive writes exclusive (``twopc[s3]`` requires it)."""
_S3_HINT = 'pip install "twopc[s3]"'


def check_filesystem(path: str) -> None:
    """The fsspec filesystem of every protocol ``path`` names (``a::b://...`` chains) is
    known and installed; for ``s3://`` also new enough. Checked now, so that a missing
    package is not first met by the first batch."""
    parts = path.split("::")
    for index, part in enumerate(parts):
        protocol = fsspec.core.split_protocol(part)[0]
        if protocol is None:
            protocol = part if index < len(parts) - 1 else "file"
        _check_protocol(protocol)
    if fsspec.core.split_protocol(parts[-1])[0] in _S3:
        _check_s3fs_version()


def _check_protocol(protocol: str) -> None:
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError:
        package = str(known_implementations[protocol]["class"]).split(".", 1)[0]
        hint = _S3_HINT if protocol in _S3 else f"pip install {package}"
        raise ExtraNotInstalledError(
            f"files sink: {protocol}:// paths need {package}, fsspec's filesystem for "
            f"{protocol}://, which is not installed: {hint}"
        ) from None
    except ValueError:
        raise ConfigurationError(
            f"files sink: path: fsspec knows no filesystem for {protocol}:// (a typo in the "
            "path's scheme, or a filesystem package that registers it is not installed)"
        ) from None


def _check_s3fs_version() -> None:
    try:
        found = importlib.metadata.version("s3fs")
    except importlib.metadata.PackageNotFoundError:
        return  # imported from a source tree: nothing to compare
    numbers = tuple(int(n) for n in re.findall(r"\d+", found)[:3])
    if numbers < _S3FS_MINIMUM:
        raise ExtraNotInstalledError(
            f"files sink: s3:// paths need s3fs 2025.7.0 or newer (exclusive writes of "
            f"small files), found s3fs {found}: {_S3_HINT}"
        )


def check_target_file_size(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= MIN_FILE_SIZE:
        return value
    raise ConfigurationError(
        f"files sink: target_file_size must be a whole number of bytes, at least "
        f"{MIN_FILE_SIZE}, not {value!r}"
    )


def check_partition_by(value: object) -> tuple[str, ...]:
    """``partition_by`` as a tuple of column names: a name, or a list of distinct names
    whose directories readers do not skip."""
    columns = (value,) if isinstance(value, str) else value
    if not isinstance(columns, Sequence) or not all(isinstance(c, str) and c for c in columns):
        raise ConfigurationError(
            f"files sink: partition_by must be a list of column names, not {value!r}"
        )
    hidden = [c for c in columns if c.startswith(("_", "."))]
    if hidden:
        raise ConfigurationError(
            f"files sink: partition_by columns {hidden} start with '_' or '.', so their "
            "directories would be hidden from readers such as pyarrow.dataset"
        )
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise ConfigurationError(f"files sink: partition_by names {twice} more than once")
    return tuple(columns)


def check_mapping(name: str, value: object) -> dict[str, Any]:
    """An optional dict option (``None`` is an empty one), with string keys."""
    if value is None:
        return {}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return dict(value)
    raise ConfigurationError(  # never the value: storage_options hold credentials
        f"files sink: {name} must be a dict with string keys, not {type(value).__name__}"
    )


def check_flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigurationError(f"files sink: {name} must be True or False, not {value!r}")
