"""The report a phase-1 task sends the driver: read back exactly, or refused."""

from __future__ import annotations

import json

import pytest

from twopc import Committable, PermanentSinkError, UnsupportedFormatError
from twopc._coordination.reports import TaskOutcome, TaskReport, class_name

pytestmark = pytest.mark.unit


def report() -> TaskReport:
    committable = Committable("s", "q", 4, 1, 7, payload={"k": "v"})
    return TaskReport(1, 0, TaskOutcome.PREPARED, committable, rows=3, bytes=24, seconds=0.5)


def test_a_report_reads_back_as_written() -> None:
    assert TaskReport.loads(report().dumps()) == report()


def _with(**changes: object) -> str:
    body = json.loads(report().dumps())
    body.update(changes)
    return json.dumps({k: v for k, v in body.items() if v is not ...})


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{no json",
        "[1, 2]",
        "null",
        _with(format=1),
        _with(partition=...),
        _with(partition="one"),
        _with(outcome="exploded"),
        _with(committable=[1]),
        _with(committable={"format": 1}),
        _with(rows=None),
        _with(error=3),
    ],
)
def test_a_malformed_report_is_refused_as_an_unsupported_format(text: str) -> None:
    with pytest.raises(UnsupportedFormatError):
        TaskReport.loads(text)


class BadRow(PermanentSinkError):
    """A sink's own rejection."""


class BadRowAt(PermanentSinkError):
    """One whose constructor takes other arguments."""

    def __init__(self, row: int) -> None:
        super().__init__(f"row {row} is bad")


def rejected(error_type: str | None, error: str = "row 3 is bad") -> TaskReport:
    report = TaskReport(2, 0, TaskOutcome.REJECTED, None, error=error, error_type=error_type)
    return TaskReport.loads(report.dumps())


def test_a_rejection_is_rebuilt_as_the_sinks_own_class() -> None:
    error = rejected(class_name(BadRow)).rejection()
    assert type(error) is BadRow
    assert (error.cause_message, error.partition) == ("row 3 is bad", 2)


@pytest.mark.parametrize(
    ("error_type", "message"),
    [
        (None, "row 3 is bad"),  # a report of an older twopc
        ("elsewhere.NotLoadedHere", "elsewhere.NotLoadedHere: row 3 is bad"),
        (class_name(BadRowAt), f"{class_name(BadRowAt)}: row 3 is bad"),
        ("builtins.ValueError", "builtins.ValueError: row 3 is bad"),  # not a rejection class
    ],
)
def test_a_rejection_of_a_class_it_cannot_build_is_a_permanent_sink_error(
    error_type: str | None, message: str
) -> None:
    error = rejected(error_type).rejection()
    assert type(error) is PermanentSinkError
    assert (error.cause_message, error.partition) == (message, 2)
