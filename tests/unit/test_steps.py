"""Progress of long operator commands (``twopc._coordination.steps``): one line on a terminal,
redrawn in place and erased at the end; nothing on a pipe, a file or in ``--json`` mode."""

from __future__ import annotations

import io
import os
import termios
from collections.abc import Iterator

import pytest

from twopc._coordination.steps import QUIET, Steps, TerminalSteps, counted, steps_on

pytestmark = pytest.mark.unit


def screen(written: str) -> str:
    """What a terminal shows after ``written``: a carriage return moves back to the start of
    the line, and what follows overwrites it."""
    rows = []
    for row in written.split("\n"):
        cells: list[str] = []
        cursor = 0
        for char in row:
            if char == "\r":
                cursor = 0
                continue
            if cursor < len(cells):
                cells[cursor] = char
            else:
                cells.append(char)
            cursor += 1
        rows.append("".join(cells).rstrip())
    return "\n".join(rows)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pty_pair() -> Iterator[tuple[int, int]]:
    master, slave = os.openpty()
    yield master, slave
    os.close(master)
    os.close(slave)


def test_a_count_is_drawn_in_place_and_erased_at_the_end() -> None:
    stream = io.StringIO()
    steps = TerminalSteps(stream, interval=0.0)
    steps.count("checked", 0, 400, "prepared transactions")
    steps.count("checked", 120, 400, "prepared transactions")
    assert screen(stream.getvalue()) == "checked 120/400 prepared transactions"
    steps.note("inspecting the target")
    assert screen(stream.getvalue()) == "inspecting the target ..."
    steps.close()
    assert screen(stream.getvalue()) == ""  # the report that follows starts on a clean line
    assert "\n" not in stream.getvalue()


def test_counts_of_one_step_are_drawn_at_most_once_per_interval() -> None:
    stream, clock = io.StringIO(), Clock()
    steps = TerminalSteps(stream, interval=0.1, clock=clock)
    steps.count("checked", 0, 400, "prepared transactions")  # a new step: drawn at once
    for done in range(1, 400):
        steps.count("checked", done, 400, "prepared transactions")  # no time passed
    assert screen(stream.getvalue()) == "checked 0/400 prepared transactions"
    clock.now += 0.25
    steps.count("checked", 300, 400, "prepared transactions")
    assert screen(stream.getvalue()) == "checked 300/400 prepared transactions"
    steps.count("checked", 400, 400, "prepared transactions")  # the last count, at once
    assert screen(stream.getvalue()) == "checked 400/400 prepared transactions"
    steps.count("aborted", 0, 7, "prepared transactions")  # the next step, at once
    assert screen(stream.getvalue()) == "aborted 0/7 prepared transactions"
    assert stream.getvalue().count("\r") == 4


def test_nothing_to_count_draws_nothing() -> None:
    stream = io.StringIO()
    with TerminalSteps(stream, interval=0.0) as steps:
        steps.count("checked", 0, 0, "prepared transactions")
    assert stream.getvalue() == ""


def test_a_line_never_wraps_on_a_narrow_terminal(pty_pair: tuple[int, int]) -> None:
    master, slave = pty_pair
    termios.tcsetwinsize(slave, (24, 20))
    with os.fdopen(os.dup(slave), "w") as tty:
        steps = TerminalSteps(tty, interval=0.0)
        steps.count("checked", 120, 400, "prepared transactions")
        steps.close()
    drawn = os.read(master, 4096).decode()
    assert drawn.startswith("\rchecked 120/400 pre")
    assert max(len(part) for part in drawn.split("\r")) == 19


def test_progress_only_on_a_terminal_and_never_for_json(pty_pair: tuple[int, int]) -> None:
    _, slave = pty_pair
    with os.fdopen(os.dup(slave), "w") as tty:
        assert isinstance(steps_on(tty, json=False), TerminalSteps)
        assert steps_on(tty, json=True) is QUIET
    read_end, write_end = os.pipe()
    with os.fdopen(read_end) as _reader, os.fdopen(write_end, "w") as pipe:
        assert steps_on(pipe, json=False) is QUIET
    assert steps_on(io.StringIO(), json=False) is QUIET
    closed = io.StringIO()
    closed.close()
    assert steps_on(closed, json=False) is QUIET


def test_counted_counts_each_item_once_the_loop_handled_it() -> None:
    seen: list[tuple[int, int]] = []

    class Recording(Steps):
        def count(self, verb: str, done: int, total: int, noun: str) -> None:
            seen.append((done, total))

    handled = []
    for item in counted(Recording(), ["a", "b", "c"], "finished", "decided batches"):
        assert len(seen) == len(handled) + 1  # the count so far is out before the item
        handled.append(item)
    assert handled == ["a", "b", "c"]
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)]


def test_quiet_shows_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with QUIET as steps:
        steps.count("checked", 1, 2, "prepared transactions")
        steps.note("inspecting the target")
    assert capsys.readouterr() == ("", "")
