"""The runner's side of ``tests.chaos.spark_host``: one long-lived Spark driver per master,
started on first use, and attempts that look like any other query process to the runner.

An attempt's log is the slice of the host's output between its request and its
``attempt-exit`` line, copied to the attempt's own log as it grows, so the runner's checks
(the query started, a fault fired, a replay was refused) read it as before. An attempt that
times out or is cut short takes the host with it: the next attempt starts a new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.chaos.spark_host import EXIT_EVENT
from tests.harness import procs
from tests.harness.processes import REPO
from tests.harness.sink_recipe import SinkRecipe

_EXIT_CODE = re.compile(r'"code": (-?\d+)\}')
HOST_GONE = 70
"""An attempt's exit code when its host died under it (not a query's own exit code)."""


class _Host:
    """One ``spark_host`` process and its output file."""

    def __init__(self, master: str, log: Path, *, speculation: bool = False) -> None:
        env = dict(os.environ)
        env.pop("TWOPC_FAULTS", None)  # each request carries its own plan
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        with log.open("ab") as out:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.chaos.spark_host",
                    "--master",
                    master,
                    *(["--speculation"] if speculation else []),
                ],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=out,
                env=env,
                cwd=REPO,
                start_new_session=True,
            )
        self.attempts = 0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def send(self, request: dict[str, object]) -> int:
        """Send one attempt; the host log's size before it (where its output starts)."""
        offset = self.log.stat().st_size
        assert self.popen.stdin is not None
        self.popen.stdin.write((json.dumps(request) + "\n").encode())
        self.popen.stdin.flush()
        self.attempts += 1
        return offset

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


class HostAttempt:
    """One query attempt inside a host, with ``procs.Attempt``'s interface."""

    def __init__(self, pool: WarmSpark, host: _Host, request_id: str, offset: int, log: Path):
        self.pool, self.host, self.request_id = pool, host, request_id
        self.pid = host.pid  # executor JVMs are found below it
        self.started = time.monotonic()
        self.returncode: int | None = None
        self._offset = offset
        self._log = log
        self._exit_line = f'"event": "{EXIT_EVENT}", "id": "{request_id}"'
        self._tail = ""

    def _copy(self) -> None:
        with self.host.log.open("rb") as source:
            source.seek(self._offset)
            chunk = source.read()
        if not chunk:
            return
        end = chunk.rfind(b"\n") + 1  # copy whole lines only
        if not end:
            return
        text = chunk[:end].decode(errors="replace")
        self._offset += end
        with self._log.open("a") as out:
            out.write(text)
        for line in text.splitlines():
            # the host's stderr (its Python workers') may share the line: read just the code
            at = line.find(self._exit_line)
            found = _EXIT_CODE.search(line, at) if at >= 0 else None
            if found:
                self.returncode = int(found.group(1))

    def poll(self) -> int | None:
        if self.returncode is None:
            self._copy()
        if self.returncode is None and not self.host.alive():
            self._copy()
            if self.returncode is None:
                self.returncode = HOST_GONE
        return self.returncode

    def wait(self, timeout: float, tick: Callable[[], None] = lambda: None) -> int | None:
        return procs.wait_for(self.poll, timeout, tick, interval=0.05)

    def kill_group(self) -> None:
        self.pool.discard(self.host)

    def finish(self) -> None:
        """An attempt that did not end by itself takes its host down with it."""
        if self.poll() is None:
            self.pool.discard(self.host)
            self.returncode = HOST_GONE


class WarmSpark:
    """Long-lived Spark drivers, one per master (and speculation setting), for the
    campaign's Spark attempts."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._hosts: dict[tuple[str, bool], _Host] = {}
        self.started = 0

    def start(
        self,
        master: str,
        spec: SinkRecipe,
        *,
        checkpoint: str,
        source: str,
        partitions: int,
        log: Path,
        faults: str | None,
        stop_after: float | None,
        speculation: bool = False,
    ) -> HostAttempt:
        key = (master, speculation)
        host = self._hosts.get(key)
        if host is None or not host.alive():
            name = re.sub(r"[^A-Za-z0-9.]+", "-", master).strip("-")
            if speculation:
                name += "-speculation"
            log_path = self.workdir / f"spark-host-{name}-{self.started}.log"
            host = _Host(master, log_path, speculation=speculation)
            self._hosts[key] = host
            self.started += 1
        request_id = uuid.uuid4().hex[:12]
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()  # the runner reads it before the host has written anything
        offset = host.send(
            {
                "id": request_id,
                "spec": spec.dumps(),
                "checkpoint": checkpoint,
                "input": source,
                "partitions": partitions,
                "faults": faults,
                "stop_after": stop_after,
            }
        )
        return HostAttempt(self, host, request_id, offset, log)

    def discard(self, host: _Host) -> None:
        host.kill()
        for key, known in list(self._hosts.items()):
            if known is host:
                del self._hosts[key]

    def close(self) -> None:
        for host in list(self._hosts.values()):
            if host.alive() and host.popen.stdin is not None:
                with contextlib.suppress(OSError):
                    host.popen.stdin.close()
                try:
                    host.popen.wait(30)
                except subprocess.TimeoutExpired:
                    host.kill()
            else:
                host.kill()
        self._hosts.clear()
