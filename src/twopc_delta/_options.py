"""Checks of the Delta sink's options that its signature cannot express. Each problem is a
:class:`~twopc.ConfigurationError` naming the option."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from twopc import ConfigurationError

__all__ = ["MODES", "SCHEMA_EVOLUTION", "WRITE_PATHS", "check_options"]

MODES = ("append", "upsert")
"""What the sink does with a batch's rows (``DeltaSink(mode=...)``)."""
SCHEMA_EVOLUTION = ("none", "add_columns")
"""Whether the sink adds the data's new columns to the table (``schema_evolution=``)."""
WRITE_PATHS = ("auto", "spark", "python")
"""Where phase 1 runs (``write_path=``): Spark's own Parquet writer where it can write the
table (``auto``), always (``spark``), or Python tasks (``python``)."""


def _choice(name: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigurationError(
            f"delta sink: {name} must be one of {', '.join(map(repr, choices))}, not {value!r}"
        )


def _names(name: str, value: object) -> None:
    if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):  # type: ignore[attr-defined]
        raise ConfigurationError(
            f"delta sink: {name} must be a list of column names, not {value!r}"
        )


def check_options(
    *,
    table_uri: object,
    mode: object,
    key_columns: Sequence[str],
    partition_by: Sequence[str],
    create_table: bool,
    schema_evolution: object,
    storage_options: object,
    commit_retries: object,
    configuration: object,
    write_path: object = "auto",
) -> None:
    """Every option on its own and together; raises the first problem found."""
    if not isinstance(table_uri, str) or not table_uri.strip():
        raise ConfigurationError(
            f"delta sink: table_uri must be the table's path or URL, not {table_uri!r}"
        )
    _choice("mode", mode, MODES)
    _choice("schema_evolution", schema_evolution, SCHEMA_EVOLUTION)
    _choice("write_path", write_path, WRITE_PATHS)
    _names("key_columns", key_columns)
    _names("partition_by", partition_by)
    if mode == "upsert" and not key_columns:
        raise ConfigurationError("delta sink: mode='upsert' needs key_columns")
    if key_columns and mode != "upsert":
        raise ConfigurationError("delta sink: key_columns only apply to mode='upsert'")
    if partition_by and not create_table:
        raise ConfigurationError(
            "delta sink: partition_by is the partitioning of a table the sink creates; it "
            "needs create_table=True (an existing table keeps its own)"
        )
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise ConfigurationError(
            f"delta sink: storage_options must be a mapping, not {type(storage_options).__name__}"
        )
    if configuration is not None and not isinstance(configuration, Mapping):
        raise ConfigurationError(
            f"delta sink: configuration must be a mapping, not {type(configuration).__name__}"
        )
    if (
        not isinstance(commit_retries, int)
        or isinstance(commit_retries, bool)
        or commit_retries < 0
    ):
        raise ConfigurationError(
            f"delta sink: commit_retries must be 0 or more, not {commit_retries!r}"
        )
