"""One rule for numbers that do not fit their column, for both SQL backends.

PostgreSQL rounds ``1.239`` into ``numeric(5,2)`` silently, and MariaDB's ``LOAD DATA``
rounds ``1.239`` into an ``INT`` column without a warning; both lose data. The rule:
a decimal, floating-point or integer value is written only if the column holds it
**exactly**. A value with non-zero digits beyond the column's scale (an integer column's
scale is 0), with more digits before the decimal point than ``precision - scale``, or
that is not a finite number, fails the batch with a :class:`~twopc.PermanentSinkError`
naming the column, the table, the value and its row, before anything is written.

A float's digits are those of its shortest round-trip form (``repr``): ``1.24`` has two
fractional digits, ``0.1 + 0.2`` (``0.30000000000000004``) has seventeen.

The check is vectorized where it is exact (decimals; floats against integer columns) and
runs per value otherwise, and always per value to find the row it reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from twopc import PermanentSinkError

__all__ = ["NumericColumn", "check_fit", "fractional_digits"]


@dataclass(frozen=True)
class NumericColumn:
    """A column that holds numbers of limited scale: ``numeric(p,s)`` / ``DECIMAL(p,s)``
    (``precision`` set) or an integer column (``precision`` None, scale 0: its range is
    the database's or the encoder's check)."""

    type_name: str
    precision: int | None
    scale: int


def check_fit(
    batch: pa.RecordBatch, columns: Mapping[str, NumericColumn], table: str, first_row: int
) -> None:
    """Raise :class:`~twopc.PermanentSinkError` for the first value of ``batch`` that its
    column cannot hold exactly; ``first_row`` is the batch's first row in the partition."""
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        spec = columns.get(name)
        if spec is None or not _judged(column.type, spec):
            continue
        for index in _suspects(column, spec):
            value = column[index].as_py()
            problem = _problem(value, spec)
            if problem is not None:
                raise PermanentSinkError(
                    f"column {name!r} of table {table} is {spec.type_name}: the value "
                    f"{_show(value)} (row {first_row + index} of the partition) {problem}"
                )


def _judged(t: pa.DataType, spec: NumericColumn) -> bool:
    if pa.types.is_decimal(t) or pa.types.is_floating(t):
        return True
    return pa.types.is_integer(t) and spec.precision is not None


def _suspects(column: pa.Array, spec: NumericColumn) -> Iterator[int]:
    """Rows that may not fit, in order: every row whose check cannot be vectorized
    exactly, and none of a column that surely fits."""
    masks = _vector_masks(column, spec)
    if masks is None:
        yield from (i for i in range(len(column)) if column[i].is_valid)
        return
    for mask in masks:
        if pc.any(mask).as_py():
            yield from pc.indices_nonzero(mask.fill_null(False)).to_pylist()
            return


def _vector_masks(column: pa.Array, spec: NumericColumn) -> list[pa.Array] | None:
    """Boolean arrays, true where a value does not fit (none: every value fits); None
    when only the per-value check is exact."""
    t = column.type
    try:
        if pa.types.is_floating(t):
            if spec.scale != 0 or spec.precision is not None:
                return None  # the fractional digits of a float: its repr decides
            finite = pc.is_finite(column)
            return [pc.or_(pc.invert(finite), pc.not_equal(pc.floor(column), column))]
        if spec.scale < 0:
            return None
        masks = []
        if pa.types.is_decimal(t) and t.scale > spec.scale:
            masks.append(pc.not_equal(pc.round(column, ndigits=spec.scale), column))
        if spec.precision is not None and _integer_digits(t) > spec.precision - spec.scale:
            bounds = pc.min_max(column).as_py()
            limit = Decimal(10) ** (spec.precision - spec.scale)
            if any(v is not None and abs(Decimal(v)) >= limit for v in bounds.values()):
                return None  # a value is too large; the per-value check finds the first
        return masks
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _integer_digits(t: pa.DataType) -> int:
    if pa.types.is_decimal(t):
        return int(t.precision - t.scale)
    return len(str(2 ** (t.bit_width - (0 if pa.types.is_unsigned_integer(t) else 1))))


def fractional_digits(value: Decimal) -> int:
    """Digits after the decimal point of a finite decimal, trailing zeros aside:
    ``1.2300`` -> 2, ``0.05`` -> 2, ``1200`` -> -2 (a multiple of 100), ``0`` -> 0."""
    _sign, numerals, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    figures = list(numerals)
    while len(figures) > 1 and figures[-1] == 0:
        figures.pop()
        exponent += 1
    return 0 if figures == [0] else -exponent


def _problem(value: object, spec: NumericColumn) -> str | None:
    """Why the column cannot hold ``value`` exactly, or None."""
    number = _decimal(value)
    if number is None:
        return None
    if not number.is_finite():
        return f"is not a finite number, which {spec.type_name} cannot hold"
    fractional = fractional_digits(number)
    if fractional > spec.scale and spec.precision is None:
        return (
            "is not a whole number, and an integer column cannot hold it without rounding; "
            "round the value in the query, or make the column a decimal one"
        )
    if fractional > spec.scale:
        where = (
            f"has more fractional digits than the column's scale {spec.scale}"
            if spec.scale >= 0
            else f"is not a multiple of {10**-spec.scale}, as the column's scale "
            f"{spec.scale} requires"
        )
        return (
            f"{where} (writing it would round it); round the value in the query (e.g. "
            f"F.round(column, {spec.scale})), or give the column a larger scale"
        )
    if spec.precision is not None and number and number.adjusted() >= spec.precision - spec.scale:
        return (
            f"is too large: {spec.type_name} holds less than "
            f"{Decimal(10) ** (spec.precision - spec.scale)} in absolute value; give the "
            "column a larger precision, or filter or scale the value in the query"
        )
    return None


def _decimal(value: object) -> Decimal | None:
    if value is None:
        return None
    if isinstance(value, Decimal):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return Decimal(value)
        return Decimal(repr(value))
    if isinstance(value, int):
        return Decimal(value)
    return None


def _show(value: object) -> str:
    return repr(value) if isinstance(value, float) else str(value)
