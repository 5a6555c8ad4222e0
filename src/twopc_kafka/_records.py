"""Arrow record batches to Kafka records.

Two shapes of input:

* **Spark's Kafka sink columns**: ``value`` (required), and optionally ``key``, ``topic``,
  ``partition``, ``headers`` (a list of ``{key: string, value: binary}``). Strings are
  UTF-8 encoded, binary is sent as it is.
* **Any other schema**: each row becomes the value, serialized as ``json`` (default: one
  JSON object per row), ``string`` (a single string column) or ``bytes`` (a single binary
  column); ``key_column`` names the column used as the key.

A row serializer (a user's ``value_serializer``, or the Avro/Protobuf serializers of
``_registry``) replaces both: every row, whatever the shape, goes through it.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from twopc.strict_json import NON_FINITE_CHOICES, non_finite_problem, without_non_finite
from twopc_kafka._registry import REGISTRY_FORMATS, SerializerServiceError, registry_failure

__all__ = [
    "JSON_NON_FINITE",
    "VALUE_FORMATS",
    "Record",
    "RecordColumns",
    "RowSerializer",
    "record_columns",
    "records",
]

VALUE_FORMATS = ("json", "string", "bytes", *REGISTRY_FORMATS)
JSON_NON_FINITE = NON_FINITE_CHOICES
"""What a ``json`` value does with NaN and infinities, which JSON cannot hold: refuse the
row (the default), or write ``null`` in their place."""
_SPARK_COLUMNS = frozenset({"key", "value", "topic", "partition", "headers"})


@dataclass(frozen=True)
class Record:
    topic: str | None
    value: bytes | None
    key: bytes | None = None
    partition: int | None = None
    headers: list[tuple[str, bytes | None]] | None = None


def _to_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return str(value).encode()


def _json_default(value: object) -> object:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def is_spark_shape(schema: pa.Schema) -> bool:
    return "value" in schema.names and set(schema.names) <= _SPARK_COLUMNS


RowSerializer = Callable[[dict[str, Any], str], bytes]
"""``serialize(row, topic) -> bytes``: a user serializer, e.g. wrapping a schema registry's
Avro or Protobuf serializer."""


@dataclass(frozen=True)
class RecordColumns:
    """A batch's records as columns (one Python list per field), for a lean produce loop.

    ``keys``, ``topics``, ``partitions`` and ``headers`` are None when the batch has no
    such column.
    """

    values: list[bytes | None]
    keys: list[bytes | None] | None = None
    topics: list[str | None] | None = None
    partitions: list[int | None] | None = None
    headers: list[list[tuple[str, bytes | None]] | None] | None = None

    def __len__(self) -> int:
        return len(self.values)

    def record(self, index: int) -> Record:
        """Row ``index`` as a :class:`Record`."""
        return Record(
            topic=None if self.topics is None else self.topics[index],
            value=self.values[index],
            key=None if self.keys is None else self.keys[index],
            partition=None if self.partitions is None else self.partitions[index],
            headers=None if self.headers is None else self.headers[index],
        )


def records(
    batch: pa.RecordBatch,
    value_format: str = "json",
    key_column: str | None = None,
    serializer: RowSerializer | None = None,
    topic: str = "",
    *,
    serializer_label: str = "value_serializer",
    json_non_finite: str = "error",
    first_row: int = 0,
) -> Iterator[Record]:
    """The batch's rows as records.

    Raises ``ValueError`` on a shape or row it cannot send, and ``SerializerServiceError``
    when the serializer's schema registry fails; ``serializer_label`` names the serializer
    in messages, ``first_row`` is the number messages give the batch's first row.
    """
    columns = record_columns(
        batch,
        value_format,
        key_column,
        serializer,
        topic,
        serializer_label=serializer_label,
        json_non_finite=json_non_finite,
        first_row=first_row,
    )
    for index in range(len(columns)):
        yield columns.record(index)


def record_columns(
    batch: pa.RecordBatch,
    value_format: str = "json",
    key_column: str | None = None,
    serializer: RowSerializer | None = None,
    topic: str = "",
    *,
    serializer_label: str = "value_serializer",
    json_non_finite: str = "error",
    first_row: int = 0,
) -> RecordColumns:
    """The batch's records as columns; raises like :func:`records`."""
    if is_spark_shape(batch.schema) and serializer is None:
        return _spark_columns(batch)
    names = batch.schema.names
    keys = _bytes_column(batch.column(key_column)) if key_column else None
    values: list[bytes | None]
    if serializer is not None:
        values = [
            _serialize(serializer, row, topic, i, serializer_label)
            for i, row in enumerate(batch.to_pylist())
        ]
    elif value_format in REGISTRY_FORMATS:
        raise ValueError(f"value_format={value_format!r} needs its schema registry serializer")
    elif value_format == "json":
        values = _json_values(batch.to_pylist(), json_non_finite, first_row)
    else:
        data_columns = [n for n in names if n != key_column]
        if len(data_columns) != 1:
            raise ValueError(
                f"value_format={value_format!r} needs exactly one value column besides the "
                f"key, found {data_columns}"
            )
        values = _bytes_column(batch.column(data_columns[0]))
    return RecordColumns(values, keys)


def _json_values(rows: list[dict[str, Any]], non_finite: str, first_row: int) -> list[bytes | None]:
    """One compact JSON object per row; NaN and infinities (which ``json`` would write as
    ``NaN``/``Infinity``, refused by strict readers) fail the row or become ``null``."""
    values: list[bytes | None] = []
    for index, row in enumerate(rows):
        try:
            text = _dumps(row)
        except ValueError:  # a float JSON cannot hold
            if non_finite != "null":
                raise ValueError(_non_finite_message(row, first_row + index)) from None
            text = _dumps(without_non_finite(row))
        values.append(text.encode())
    return values


def _dumps(value: object) -> str:
    return json.dumps(value, default=_json_default, separators=(",", ":"), allow_nan=False)


def _non_finite_message(row: dict[str, Any], number: int) -> str:
    problem = non_finite_problem(row, number) or f"row {number} cannot be written as JSON"
    return f"value_format='json': {problem}"


def _bytes_column(column: pa.Array) -> list[bytes | None]:
    """Strings and binary straight from Arrow as bytes (no Python str per value)."""
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        column = column.cast(pa.large_binary())
    elif not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        return [_to_bytes(v) for v in column.to_pylist()]
    values: list[bytes | None] = column.to_pylist()
    return values


def _serialize(
    serializer: RowSerializer, row: dict[str, Any], topic: str, index: int, label: str
) -> bytes:
    try:
        return serializer(row, topic)
    except SerializerServiceError:
        raise
    except Exception as exc:
        failure = registry_failure(exc)  # a user's serializer calling a registry
        if failure is not None:
            raise failure from exc
        # a row the schema rejects: bad input, not a crash
        raise ValueError(
            f"{label} rejected row {index} of the batch: {type(exc).__name__}: {exc}"
        ) from exc


def _spark_columns(batch: pa.RecordBatch) -> RecordColumns:
    names = batch.schema.names
    headers = None
    if "headers" in names:
        headers = [
            [(str(h["key"]), _to_bytes(h["value"])) for h in row] if row else None
            for row in batch.column("headers").to_pylist()
        ]
    return RecordColumns(
        values=_bytes_column(batch.column("value")),
        keys=_bytes_column(batch.column("key")) if "key" in names else None,
        topics=batch.column("topic").to_pylist() if "topic" in names else None,
        partitions=batch.column("partition").to_pylist() if "partition" in names else None,
        headers=headers,
    )
