"""Options of the SQL sinks checked when the sink is created: wrong types and ranges, and
combinations in which an option would silently do nothing. Each error is a
``ConfigurationError`` naming the backend and the option and saying what to do.

Types are checked by the sink classes themselves, so that building ``PostgresSink`` or
``MySQLSink`` directly (without ``create_sink``) is checked the same way. Creating a sink
opens no connection."""

from __future__ import annotations

import math
from typing import Any

import pytest

import twopc
from twopc_jdbc.mysql import MySQLSink
from twopc_jdbc.postgres import PostgresSink

pytestmark = pytest.mark.unit

SINKS = [
    ("postgres", PostgresSink, "postgresql://u:p@127.0.0.1:5432/db"),
    ("mysql", MySQLSink, "mysql://u:p@127.0.0.1:3306/db"),
]


def refused(kind: type[Any], dsn: str, **options: Any) -> str:
    options.setdefault("table", "t")
    with pytest.raises(twopc.ConfigurationError) as caught:
        kind(dsn, **options)
    return str(caught.value)


@pytest.mark.parametrize(("backend", "kind", "dsn"), SINKS)
@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            {"key_columns": 5},
            "key_columns must be a column name or a list of column names, not 5 (int)",
        ),
        (
            {"key_columns": ["id", 3]},
            "key_columns must be a column name or a list of column names, not ['id', 3] (list)",
        ),
        (
            {"key_columns": {"id"}},
            "key_columns must be a column name or a list of column names, not {'id'} (set)",
        ),
        (
            {"lock_timeout_seconds": "abc"},
            "lock_timeout_seconds must be a number of seconds, not 'abc' (str)",
        ),
        (
            {"read_timeout_seconds": True},
            "read_timeout_seconds must be a number of seconds, not True (bool)",
        ),
        (
            {"lock_timeout_seconds": 0},
            "lock_timeout_seconds must be positive (a number of seconds), not 0",
        ),
        (
            {"connect_timeout_seconds": -1.5},
            "connect_timeout_seconds must be positive (a number of seconds), not -1.5",
        ),
        (
            {"read_timeout_seconds": math.nan},
            "read_timeout_seconds must be positive (a number of seconds), not nan",
        ),
        (
            {"read_timeout_seconds": math.inf},
            "read_timeout_seconds must be a finite number of seconds up to 1000000000, not inf",
        ),
        ({"create_table": "false"}, "create_table must be True or False, not 'false' (str)"),
        (
            {"mode": "upsert", "key_columns": "id", "shuffle_by_key": 0},
            "shuffle_by_key must be True or False, not 0 (int)",
        ),
        ({"mode": "Upsert"}, "mode must be one of append, upsert, not 'Upsert'"),
        (
            {"transaction_mode": ["two_phase"]},
            "transaction_mode must be one of transaction, two_phase, not ['two_phase']",
        ),
        ({"schema_evolution": None}, "schema_evolution must be one of none, add_columns, not None"),
        (
            {"mode": "upsert", "key_columns": "id", "order_column": 5},
            "order_column must be a column name or None, not 5 (int)",
        ),
        (
            {"table": ""},
            "table must be a table name ('name' or 'schema.name'), not '' (str)",
        ),
        (
            {"table": None},
            "table must be a table name ('name' or 'schema.name'), not None (NoneType)",
        ),
        (
            {"marker_table": 7},
            "marker_table must be a table name ('name' or 'schema.name'), not 7 (int)",
        ),
        (
            {"connect_options": "sslmode=require"},
            "connect_options must be a dict of the driver's keyword arguments (string keys), "
            "not str",
        ),
        (
            {"mode": "upsert", "key_columns": ["id", ""]},
            "key_columns has an invalid column name '' (1 to 63 characters, no NUL)",
        ),
        (
            {"mode": "upsert", "key_columns": ["id", "id"]},
            "key_columns has duplicates; name each key column once",
        ),
    ],
)
def test_wrong_types_and_ranges(
    backend: str, kind: type[Any], dsn: str, options: dict[str, Any], problem: str
) -> None:
    assert refused(kind, dsn, **options) == f"the {backend} backend's option {problem}"


@pytest.mark.parametrize(("backend", "kind", "dsn"), SINKS)
def test_the_lock_timeout_fits_the_database_setting(
    backend: str, kind: type[Any], dsn: str
) -> None:
    most = {"postgres": "2147483", "mysql": "1073741824"}[backend]
    assert refused(kind, dsn, lock_timeout_seconds=1e10) == (
        f"the {backend} backend's option lock_timeout_seconds must be a finite number of "
        f"seconds up to {most}, not 10000000000.0"
    )


NOTHING = [
    (
        {"key_columns": ["id"]},
        "key_columns does nothing with mode='append' (only upserts and delete_column use "
        "keys): use mode='upsert' to update rows by key, or leave key_columns out",
    ),
    (
        {"order_column": "ts"},
        "order_column does nothing with mode='append': it only picks one row among rows with "
        "the same key, for mode='upsert' or a delete_column; use mode='upsert' with "
        "key_columns, or leave order_column out",
    ),
    (
        {"mode": "append", "key_columns": ["id"], "order_column": "ts"},
        "key_columns does nothing with mode='append' (only upserts and delete_column use "
        "keys): use mode='upsert' to update rows by key, or leave key_columns out",
    ),
    (
        {"mode": "upsert", "key_columns": ["id", "ts"], "order_column": "ts"},
        "order_column 'ts' is one of key_columns: rows with the same key have the same value "
        "in it, so it decides nothing; name another column (an event time, a version), or "
        "leave order_column out",
    ),
    (
        {"mode": "upsert", "key_columns": ["id"], "delete_column": "id"},
        "delete_column 'id' is one of key_columns; the delete flag must be a boolean column "
        "of its own",
    ),
    (
        {"mode": "upsert", "key_columns": ["id"], "delete_column": "d", "order_column": "d"},
        "delete_column and order_column are the same column; name two columns",
    ),
    (
        {"table": "orders", "marker_table": "orders"},
        "marker_table is the target table orders itself; name another table",
    ),
    ({"mode": "upsert"}, "mode 'upsert' needs key_columns: the columns that identify a row"),
    (
        {"shuffle_by_key": False},
        "shuffle_by_key does nothing with mode='append': only upserts and a delete_column "
        "shuffle the batch by key; leave shuffle_by_key out",
    ),
    ({"delete_column": "gone"}, "delete_column needs key_columns to find the rows to delete"),
]


@pytest.mark.parametrize(("backend", "kind", "dsn"), SINKS)
@pytest.mark.parametrize(("options", "problem"), NOTHING)
def test_options_that_would_do_nothing_are_refused(
    backend: str, kind: type[Any], dsn: str, options: dict[str, Any], problem: str
) -> None:
    expected = f"the {backend} backend's option {problem}"
    assert refused(kind, dsn, **options) == expected
    with pytest.raises(twopc.ConfigurationError) as caught:
        twopc.create_sink(backend, dsn=dsn, **{"table": "t", **options})
    assert str(caught.value) == expected


@pytest.mark.parametrize(("backend", "kind", "dsn"), SINKS)
@pytest.mark.parametrize(
    "options",
    [
        {"mode": "append", "key_columns": ["id"], "delete_column": "gone"},
        {"mode": "append", "key_columns": "id", "delete_column": "gone", "order_column": "ts"},
        {"mode": "upsert", "key_columns": ("id",), "order_column": "ts", "delete_column": "d"},
        {"lock_timeout_seconds": 0.0001, "connect_timeout_seconds": 1, "read_timeout_seconds": 2},
    ],
)
def test_meaningful_combinations_pass(
    backend: str, kind: type[Any], dsn: str, options: dict[str, Any]
) -> None:
    sink = kind(dsn, table="t", **options)
    assert sink.options.key_columns == tuple(
        [options["key_columns"]] if isinstance(options.get("key_columns"), str)
        else options.get("key_columns", ())
    )  # fmt: skip


@pytest.mark.parametrize(("backend", "kind", "dsn"), SINKS)
@pytest.mark.parametrize(
    ("options", "columns"),
    [
        ({"mode": "upsert", "key_columns": ["k1", "k2"]}, ("k1", "k2")),
        ({"mode": "upsert", "key_columns": ["k1", "k2"], "shuffle_by_key": False}, ()),
        ({"key_columns": "k", "delete_column": "gone"}, ("k",)),
        ({"key_columns": "k", "delete_column": "gone", "shuffle_by_key": False}, ()),
        ({}, ()),
    ],
)
def test_shuffle_by_key_decides_the_partition_columns(
    backend: str, kind: type[Any], dsn: str, options: dict[str, Any], columns: tuple[str, ...]
) -> None:
    """The engines shuffle a batch by the sink's partition columns before phase 1;
    ``shuffle_by_key=False`` names none, so the batch keeps its partitions."""
    assert kind(dsn, table="t", **options).partition_columns() == columns
