"""The rule both SQL backends apply to numbers (``twopc_jdbc._values``): a value is written
only if its column holds it exactly. Against the real servers, with the tables read back:
``tests/integration/test_sql_bad_input.py``."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

import twopc
from twopc_jdbc._values import NumericColumn, check_fit, fractional_digits

pytestmark = pytest.mark.unit

DEC_10_3 = pa.decimal128(10, 3)
NUMERIC_5_2 = NumericColumn("numeric(5,2)", 5, 2)
INTEGER = NumericColumn("integer", None, 0)


def problem(values: pa.Array, spec: NumericColumn, first_row: int = 0) -> str | None:
    batch = pa.RecordBatch.from_pydict({"c": values})
    try:
        check_fit(batch, {"c": spec}, "t", first_row)
    except twopc.PermanentSinkError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1.2300", 2), ("0.05", 2), ("1200", -2), ("0", 0), ("0.000", 0), ("-7.5", 1), ("1E+3", -3)],
)
def test_fractional_digits(value: str, expected: int) -> None:
    assert fractional_digits(Decimal(value)) == expected


FITS: list[tuple[Any, NumericColumn]] = [
    (pa.array([Decimal("1.230"), Decimal("-999.990"), None], pa.decimal128(10, 3)), NUMERIC_5_2),
    (pa.array([1.24, -999.99, None, 0.1]), NUMERIC_5_2),
    (pa.array([999, -999], pa.int64()), NUMERIC_5_2),
    (pa.array([Decimal("2.00")], pa.decimal128(5, 2)), INTEGER),
    (pa.array([3.0, -2e9]), INTEGER),
    (pa.array([1200, -300], pa.int64()), NumericColumn("numeric(5,-2)", 5, -2)),
    (pa.array([Decimal("0.00099")], pa.decimal128(5, 5)), NumericColumn("numeric(2,5)", 2, 5)),
]


@pytest.mark.parametrize(("values", "spec"), FITS)
def test_values_the_column_holds_exactly_pass(values: pa.Array, spec: NumericColumn) -> None:
    assert problem(values, spec) is None


SCALE = (
    "has more fractional digits than the column's scale 2 (writing it would round it); round "
    "the value in the query (e.g. F.round(column, 2)), or give the column a larger scale"
)
TOO_LARGE = (
    "is too large: numeric(5,2) holds less than 1000 in absolute value; give the column a "
    "larger precision, or filter or scale the value in the query"
)
WHOLE = (
    "is not a whole number, and an integer column cannot hold it without rounding; round the "
    "value in the query, or make the column a decimal one"
)


@pytest.mark.parametrize(
    ("values", "spec", "shown", "row", "why"),
    [
        (pa.array([Decimal("1.2"), Decimal("1.239")], DEC_10_3), NUMERIC_5_2, "1.239", 1, SCALE),
        (pa.array([1.24, 1.239]), NUMERIC_5_2, "1.239", 1, SCALE),
        (pa.array([0.1 + 0.2]), NUMERIC_5_2, "0.30000000000000004", 0, SCALE),
        (pa.array([Decimal("1234.5")], pa.decimal128(10, 1)), NUMERIC_5_2, "1234.5", 0, TOO_LARGE),
        (pa.array([1, 1000], pa.int64()), NUMERIC_5_2, "1000", 1, TOO_LARGE),
        (pa.array([1e300]), NUMERIC_5_2, "1e+300", 0, TOO_LARGE),
        (
            pa.array([float("nan")]), NUMERIC_5_2, "nan", 0,
            "is not a finite number, which numeric(5,2) cannot hold",
        ),
        (pa.array([2.0, 2.5]), INTEGER, "2.5", 1, WHOLE),
        (pa.array([Decimal("7.10")], pa.decimal128(5, 2)), INTEGER, "7.10", 0, WHOLE),
        (
            pa.array([float("-inf")]), INTEGER, "-inf", 0,
            "is not a finite number, which integer cannot hold",
        ),
    ],
)  # fmt: skip
def test_values_the_column_would_change_are_refused(
    values: pa.Array, spec: NumericColumn, shown: str, row: int, why: str
) -> None:
    assert problem(values, spec, first_row=10) == (
        f"column 'c' of table t is {spec.type_name}: the value {shown} (row {10 + row} of the "
        f"partition) {why}"
    )


def test_other_columns_and_types_are_not_judged() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"i": pa.array([2**40], pa.int64()), "s": pa.array(["1.239"]), "f": pa.array([1.239])}
    )
    check_fit(batch, {"i": INTEGER, "s": NUMERIC_5_2}, "t", 0)
