"""Stall a real service at one step of the protocol, and let it come back later.

:class:`StallAt` is a fault plan whose rule pauses a service (``scripts/services pause``:
SIGSTOP of its process tree) instead of crashing, when a task or the driver reaches a
crash point. It runs where the point runs (a forked task of the local engine, a Spark
Python worker, or the driver). :class:`Stall` runs in the test: it waits until the
service is paused, keeps it paused for a while, resumes it, and always resumes it when the
test ends, so no service stays stopped.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

import pyarrow as pa
import pytest

from tests.harness.services import ServiceControl, Services
from twopc.faults import CrashPoint, FaultPlan
from twopc_kafka.sink import KafkaSink, KafkaTransaction


@dataclass(frozen=True)
class StallAt(FaultPlan):
    """Pause ``service`` when the first attempt of ``partition`` (any on the driver) of
    ``batch_id`` reaches ``point``, once: the first process to create ``once`` (a file
    path) pauses, every later match does nothing (a point can fire once per Arrow batch,
    and tasks run in separate processes). Picklable, like every plan."""

    once: str = ""
    point: CrashPoint = CrashPoint.AFTER_INVOKE
    service: str = "kafka"
    batch_id: int = 1
    partition: int = 0

    def __bool__(self) -> bool:
        return True

    def fire(
        self,
        point: CrashPoint,
        *,
        sink_id: str,
        batch_id: int,
        partition: int | None = None,
        attempt: int | None = None,
        rows: int | None = None,
    ) -> None:
        if point is not self.point or batch_id != self.batch_id:
            return
        if partition not in (None, self.partition) or attempt not in (None, 0):
            return
        try:
            os.close(os.open(self.once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        Services().pause(self.service)


class Stall:
    """Keep ``service`` paused for ``seconds`` from the moment something paused it.

    Use as a context manager around the code that reaches the stall point; ``resumed`` is
    set once the service runs again. Leaving the block waits for the resume (or does it at
    once when the block raised), and fails the test if nothing ever paused the service.
    """

    def __init__(self, services: ServiceControl, service: str, seconds: float) -> None:
        self.services = services
        self.service = service
        self.seconds = seconds
        self.paused = threading.Event()
        self.resumed = threading.Event()
        self.paused_at = 0.0
        self.resumed_at = 0.0
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _is_paused(self) -> bool:
        return f"{self.service}: paused" in self.services.status()

    def _run(self) -> None:
        deadline = time.monotonic() + 120
        while not self._is_paused():
            if self._cancel.is_set() or time.monotonic() > deadline:
                return
            time.sleep(0.1)
        self.paused_at = time.monotonic()
        self.services.paused.add(self.service)
        self.paused.set()
        self._cancel.wait(self.seconds)
        self.services.resume(self.service)
        self.resumed_at = time.monotonic()
        self.resumed.set()

    def elapsed(self) -> float:
        """Seconds since the service was seen paused."""
        return time.monotonic() - self.paused_at

    def fails(
        self, run: Callable[[], object], expected: type[BaseException] = Exception
    ) -> BaseException:
        """Run ``run``, which must raise ``expected`` while the service is still stopped:
        its timeouts and retries are bounded, not waiting for the service to return."""
        with pytest.raises(expected) as failed:
            run()
        assert not self.resumed.is_set(), f"the run waited for {self.service} to come back"
        print(f"failed {self.elapsed():.1f}s into the stall: {str(failed.value)[-300:]}")
        return failed.value

    def __enter__(self) -> Stall:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None or not self.paused.is_set():
            self._cancel.set()
        self._thread.join()
        if self._is_paused():  # paused after the thread gave up: never leave it stopped
            self.services.resume(self.service)
        if exc_type is None:
            assert self.paused.is_set(), f"nothing paused {self.service}: stall point not reached"


class FlushingKafkaSink(KafkaSink):
    """Waits for the records' acknowledgement in ``invoke``, so that a stall after it finds
    them in the broker's log, inside the still open transaction. (What a stalled broker
    leaves unacknowledged, ``pre_commit``'s own flush reports.)"""

    def invoke(self, txn: KafkaTransaction, batch: pa.RecordBatch) -> None:
        super().invoke(txn, batch)
        if not txn.skip:
            txn.producer.flush(self.timeout)
