"""Rows as strict JSON: NaN and infinity, which Python's ``json`` writes as ``NaN`` and
``Infinity`` and strict readers refuse, either fail the row with a message that names the
column, or become ``null``. For sinks that write JSON (the Kafka sink's ``json`` values, the
files sink's JSON lines), under one option name and one rule::

    from twopc.strict_json import NON_FINITE_CHOICES, non_finite_problem, without_non_finite

    try:
        text = json.dumps(row, allow_nan=False)
    except ValueError:
        if non_finite == "error":
            raise PermanentSinkError(non_finite_problem(row, n) or "not JSON") from None
        text = json.dumps(without_non_finite(row))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["NON_FINITE_CHOICES", "OPTION", "non_finite_problem", "without_non_finite"]

OPTION = "json_non_finite"
"""The sinks' option that chooses what a NaN or an infinity becomes."""
NON_FINITE_CHOICES = ("error", "null")
"""Its values: fail the row (the default), or write ``null``."""


def without_non_finite(value: Any) -> Any:
    """``value`` with every NaN and infinity, at any depth, replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: without_non_finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_non_finite(v) for v in value]
    return value


def _first_non_finite(value: Any) -> float | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        for item in value:
            found = _first_non_finite(item)
            if found is not None:
                return found
    return None


def non_finite_problem(row: Mapping[str, Any], number: int | None = None) -> str | None:
    """``"column 'reading' of row 3 holds NaN, which JSON cannot represent ..."`` for the
    row's first column that holds a NaN or an infinity (at any depth), with what to do
    (``number``: the row's number, if the message should say it); ``None`` when it holds
    none."""
    for column, value in row.items():
        found = _first_non_finite(value)
        if found is not None:
            shown = "NaN" if math.isnan(found) else ("Infinity" if found > 0 else "-Infinity")
            where = f"column {column!r}" + ("" if number is None else f" of row {number}")
            return (
                f"{where} holds {shown}, which JSON cannot represent (strict JSON "
                f"readers refuse it); clean or filter the data, or pass {OPTION}='null' to "
                "write null instead"
            )
    return None
