"""The report a phase-1 task sends the driver: read back exactly, or refused."""

from __future__ import annotations

import json

import pytest

from twopc import Committable, UnsupportedFormatError
from twopc._reports import TaskOutcome, TaskReport

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
