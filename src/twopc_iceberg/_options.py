"""Checks of the Iceberg sink's options that its signature cannot express, and the
``partition_by`` notation of a table the sink creates (``"day(ts)"``, ``"bucket(16, id)"``).
Each problem is a :class:`~twopc.ConfigurationError` naming the option."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twopc import ConfigurationError

__all__ = [
    "MODES",
    "SCHEMA_EVOLUTION",
    "PartitionField",
    "check_choice",
    "parse_partition_by",
    "s3_storage_options",
]

MODES = ("append", "upsert")
"""What the sink does with a batch's rows (``IcebergSink(mode=...)``)."""
SCHEMA_EVOLUTION = ("none", "add_columns")
"""Whether the sink adds the data's new columns to the table (``schema_evolution=``)."""

_TRANSFORM = re.compile(
    r"^\s*(?P<name>year|month|day|hour|bucket|truncate|identity)\s*\(\s*"
    r"(?:(?P<width>\d+)\s*,\s*)?(?P<column>[^\s(),]+)\s*\)\s*$"
)
_WIDTH_TRANSFORMS = ("bucket", "truncate")


@dataclass(frozen=True)
class PartitionField:
    """One field of the partition spec of a table the sink creates."""

    column: str
    transform: str
    """``identity``, ``year``, ``month``, ``day``, ``hour``, ``bucket`` or ``truncate``."""
    width: int | None = None
    """The number of buckets, or the truncation width."""

    @property
    def name(self) -> str:
        if self.transform == "identity":
            return self.column
        if self.width is not None:
            return f"{self.column}_{self.transform}_{self.width}"
        return f"{self.column}_{self.transform}"

    def iceberg_transform(self) -> Any:
        from pyiceberg import transforms

        if self.transform == "bucket":
            assert self.width is not None
            return transforms.BucketTransform(self.width)
        if self.transform == "truncate":
            assert self.width is not None
            return transforms.TruncateTransform(self.width)
        return {
            "identity": transforms.IdentityTransform,
            "year": transforms.YearTransform,
            "month": transforms.MonthTransform,
            "day": transforms.DayTransform,
            "hour": transforms.HourTransform,
        }[self.transform]()


def parse_partition_by(values: Sequence[str]) -> tuple[PartitionField, ...]:
    """``("region", "day(ts)", "bucket(16, id)")`` as partition fields."""
    if isinstance(values, str):
        raise ConfigurationError(
            f"iceberg sink: partition_by must be a list of fields, not the string {values!r}"
        )
    fields = []
    for value in values:
        if not isinstance(value, str) or not value.strip():
            raise ConfigurationError(
                f"iceberg sink: partition_by: {value!r} is not a column or transform"
            )
        match = _TRANSFORM.match(value)
        if match is None:
            if "(" in value or "," in value:
                raise ConfigurationError(
                    f"iceberg sink: partition_by: cannot read {value!r}; write a column "
                    "name, year|month|day|hour(column), bucket(N, column) or "
                    "truncate(W, column)"
                )
            fields.append(PartitionField(value.strip(), "identity"))
            continue
        name, width = match["name"], match["width"]
        if (name in _WIDTH_TRANSFORMS) != (width is not None):
            raise ConfigurationError(
                f"iceberg sink: partition_by: {value!r}: bucket and truncate take a width "
                "first (bucket(16, id)); the other transforms take the column only"
            )
        if width is not None and int(width) < 1:
            raise ConfigurationError(f"iceberg sink: partition_by: {value!r}: width below 1")
        fields.append(
            PartitionField(match["column"], name, int(width) if width is not None else None)
        )
    return tuple(fields)


def check_choice(option: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigurationError(
            f"iceberg sink: {option} must be one of {', '.join(map(repr, choices))}, not {value!r}"
        )


_S3_KEYS = {
    "s3.access-key-id": "key",
    "s3.secret-access-key": "secret",
    "s3.session-token": "token",
}


def s3_storage_options(properties: Mapping[str, str]) -> dict[str, Any]:
    """fsspec (s3fs) options for the data files from the catalog's ``s3.*`` properties,
    the same store pyiceberg itself writes metadata to."""
    options: dict[str, Any] = {}
    for key, name in _S3_KEYS.items():
        if properties.get(key):
            options[name] = properties[key]
    client: dict[str, Any] = {}
    if properties.get("s3.endpoint"):
        client["endpoint_url"] = properties["s3.endpoint"]
    if properties.get("s3.region"):
        client["region_name"] = properties["s3.region"]
    if client:
        options["client_kwargs"] = client
    return options
