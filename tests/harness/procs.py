"""Processes of a chaos run: fork the local driver, find its tasks or executor JVMs, kill.

Every query attempt runs in its own session (process group), so killing "the driver" kills
it with everything it started, as a crashed driver host would, and nothing of an attempt
outlives it. Descendants are found by scanning ``/proc`` (Linux only).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tests.harness.processes import REPO

T = TypeVar("T")


@dataclass
class Attempt:
    """One query process: local (forked) or Spark (a subprocess)."""

    pid: int
    started: float
    popen: subprocess.Popen[bytes] | None = None
    returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self.popen is not None:
            self.returncode = self.popen.poll()
            return self.returncode
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill_group(self) -> None:
        """SIGKILL the attempt's whole process group (the driver and all it started)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def wait(self, timeout: float, tick: Callable[[], None] = lambda: None) -> int | None:
        """Wait for the exit (calling ``tick`` meanwhile); ``None`` on timeout."""
        return wait_for(self.poll, timeout, tick, interval=0.02)

    def finish(self) -> None:
        """Kill what is left of the attempt and reap the driver."""
        self.kill_group()
        if self.poll() is None:
            if self.popen is not None:
                self.returncode = self.popen.wait()
            else:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)


def wait_for(
    poll: Callable[[], int | None],
    timeout: float,
    tick: Callable[[], None],
    *,
    interval: float,
) -> int | None:
    """Poll until ``poll`` returns an exit code, calling ``tick`` between polls; ``None``
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (code := poll()) is None:
        if time.monotonic() > deadline:
            return None
        tick()
        time.sleep(interval)
    return code


def fork_driver(body: Callable[[], None], log: Path, environ: dict[str, str | None]) -> Attempt:
    """Run ``body`` in a forked driver process (own session, output to ``log``).

    Exit status: 0 when ``body`` returns, 1 when it raises (traceback in the log).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the driver
        code = 1
        try:
            os.setsid()
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            for key, value in environ.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            body()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    return Attempt(pid, time.monotonic())


def spawn(args: Sequence[str], log: Path, environ: dict[str, str | None]) -> Attempt:
    """Start ``python ARGS`` from the repository in its own session, output to ``log``."""
    env = dict(os.environ)
    for key, value in environ.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        popen = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
    return Attempt(popen.pid, time.monotonic(), popen)


class ForkedCallError(RuntimeError):
    """The function :func:`call_in_fork` ran raised, or its process died or hung."""


def call_in_fork(function: Callable[[], T], timeout: float = 120.0) -> T:
    """``function()`` run in a forked child process; its (pickled) result returned.

    For a library that must never start in the calling process: deltalake's Rust runtime
    panics in a process forked from one that used it, and the chaos campaign forks every
    local-engine driver from its own process, so it reads Delta tables in a child that
    exits after the read. An exception in the child raises :class:`ForkedCallError` with
    the child's traceback.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, report, exit without the parent's exit handlers
        os.close(read_end)
        try:
            answer: tuple[str, object] = ("ok", function())
        except BaseException:
            answer = ("error", traceback.format_exc())
        try:
            payload = pickle.dumps(answer)
        except Exception:
            payload = pickle.dumps(("error", traceback.format_exc()))
        with contextlib.suppress(Exception), os.fdopen(write_end, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([read_end], [], [], remaining)[0]:
                raise ForkedCallError(f"the forked call did not answer in {timeout:.0f}s")
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if not chunks:
        raise ForkedCallError("the forked call died without an answer")
    status, value = pickle.loads(b"".join(chunks))
    if status != "ok":
        raise ForkedCallError(f"the forked call failed:\n{value}")
    return value  # type: ignore[no-any-return]


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # the command name in parentheses may hold spaces: split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        found[int(entry)] = int(fields[1])
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, in pid order."""
    parents = _parents()
    below: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        children = [p for p, parent in parents.items() if parent == current]
        below.extend(children)
        frontier.extend(children)
    return sorted(below)


def children(pid: int) -> list[int]:
    parents = _parents()
    return sorted(p for p, parent in parents.items() if parent == pid)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def executor_jvms(pid: int) -> list[int]:
    """The executor JVMs of a ``local-cluster`` Spark driver started as ``pid``."""
    return [p for p in descendants(pid) if "CoarseGrainedExecutorBackend" in cmdline(p)]


def sigkill(pid: int) -> bool:
    """SIGKILL one process; False if it was already gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True
