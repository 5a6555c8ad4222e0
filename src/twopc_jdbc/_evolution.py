"""Schema evolution of the SQL sinks: which columns a batch adds, and which changes it
cannot follow.

The sink compares a batch's Arrow schema with the target table's columns (read from
``information_schema``) before it writes a row. With ``schema_evolution="add_columns"``
columns of the data that the table lacks are added as nullable columns; a change the
sink cannot follow fails the batch first, naming the column:

* a column whose data type the table's column cannot hold without changing its type
  (integers into a ``double`` column are fine, doubles into an ``integer`` column are
  not: twopc adds columns, it never alters a column's type);
* a ``NOT NULL`` column without a default that the data no longer has.

Unknown database types (``json``, ``uuid``, enums ...) and unknown Arrow types are not
judged here; the database still checks each value when it is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from twopc import PermanentSinkError

__all__ = ["TableColumn", "arrow_kind", "new_columns", "sql_kind"]


@dataclass(frozen=True)
class TableColumn:
    """One column of the target table, as ``information_schema.columns`` shows it."""

    name: str
    data_type: str
    nullable: bool
    has_default: bool


# information_schema data_type (lower case) -> kind, for both databases
_SQL_KINDS = {
    "integer": (
        "smallint", "integer", "int", "bigint", "tinyint", "mediumint", "int2", "int4", "int8",
    ),
    "float": ("real", "double precision", "double", "float", "float4", "float8"),
    "decimal": ("numeric", "decimal"),
    "string": (
        "text", "character varying", "varchar", "character", "char", "tinytext",
        "mediumtext", "longtext",
    ),
    "binary": (
        "bytea", "blob", "tinyblob", "mediumblob", "longblob", "binary", "varbinary",
    ),
    "boolean": ("boolean", "bool"),
    "date": ("date",),
    "timestamp": (
        "timestamp", "timestamp without time zone", "timestamp with time zone", "datetime",
    ),
    "time": ("time", "time without time zone", "time with time zone"),
}  # fmt: skip
_KIND_OF = {name: kind for kind, names in _SQL_KINDS.items() for name in names}

# kind of a table column -> kinds of data it holds without a change of type
_HOLDS = {
    "integer": {"integer", "boolean"},  # MySQL's BOOLEAN is TINYINT(1)
    "float": {"integer", "float", "decimal"},
    "decimal": {"integer", "decimal"},
    "string": {"string"},
    "binary": {"binary"},
    "boolean": {"boolean"},
    "date": {"date"},
    "timestamp": {"timestamp"},
    "time": {"time"},
}


def sql_kind(data_type: str) -> str | None:
    """The kind of a database type name, or None when twopc does not judge it."""
    return _KIND_OF.get(data_type.strip().lower())


def arrow_kind(t: pa.DataType) -> str | None:
    """The kind of an Arrow type, or None when twopc does not judge it."""
    checks = (
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_integer, "integer"),
        (pa.types.is_floating, "float"),
        (pa.types.is_decimal, "decimal"),
        (lambda x: pa.types.is_string(x) or pa.types.is_large_string(x), "string"),
        (lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x), "binary"),
        (pa.types.is_date, "date"),
        (pa.types.is_timestamp, "timestamp"),
        (pa.types.is_time, "time"),
    )
    for matches, kind in checks:
        if matches(t):
            return kind
    return None


def new_columns(
    fields: Sequence[pa.Field], columns: Sequence[TableColumn], table: str
) -> list[pa.Field]:
    """The fields of the data that ``table`` lacks, after checking that every other change
    can be followed; raises :class:`~twopc.PermanentSinkError` naming the column if not."""
    existing = {c.name: c for c in columns}
    names = {f.name for f in fields}
    for f in fields:
        column = existing.get(f.name)
        if column is not None:
            _check_type(f, column, table)
    for column in columns:
        if column.name not in names and not column.nullable and not column.has_default:
            raise PermanentSinkError(
                f"column {column.name!r} of table {table} is NOT NULL without a default, and "
                "the data no longer has it: schema evolution cannot follow a dropped NOT NULL "
                "column (add it back to the query, or give the column a default or drop "
                "NOT NULL)"
            )
    return [f for f in fields if f.name not in existing]


def _check_type(f: pa.Field, column: TableColumn, table: str) -> None:
    table_kind, data_kind = sql_kind(column.data_type), arrow_kind(f.type)
    if table_kind is None or data_kind is None or data_kind in _HOLDS[table_kind]:
        return
    raise PermanentSinkError(
        f"column {f.name!r} is {f.type} in the data but {column.data_type} in table {table}: "
        "the table would have to change the column's type (a narrowing or incompatible "
        "change), and schema evolution only adds nullable columns; cast the column in the "
        "query or alter the table yourself"
    )
