"""The Kafka sink waits out a group coordinator that is not ready, and nothing else."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from twopc_kafka._coordinator_wait import retry_while_coordinator_busy

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(codes: list[int], result: str = "marker") -> Callable[[], str]:
    remaining = list(codes)

    def call() -> str:
        if remaining:
            raise KafkaException(KafkaError(remaining.pop(0)))
        return result

    return call


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    ],
)
def test_a_busy_coordinator_is_waited_out(code: int) -> None:
    clock = Clock()
    call = failing([code, code, code])
    result = retry_while_coordinator_busy(
        call,
        10.0,
        "test",
        sleep=clock.sleep,
        clock=lambda: clock.now,
    )
    assert result == "marker"
    # twopc.retrying.POLLING: 0.1 s doubling, each wait in the upper half (jitter)
    assert len(clock.sleeps) == 3
    for wait, ceiling in zip(clock.sleeps, (0.1, 0.2, 0.4), strict=True):
        assert ceiling / 2 <= wait <= ceiling


def test_other_errors_raise_at_once() -> None:
    clock = Clock()
    call = failing([KafkaError.GROUP_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException) as raised:
        retry_while_coordinator_busy(
            call,
            10.0,
            "test",
            sleep=clock.sleep,
            clock=lambda: clock.now,
        )
    assert raised.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert clock.sleeps == []


def test_the_timeout_bounds_the_wait() -> None:
    clock = Clock()
    call = failing([KafkaError.NOT_COORDINATOR] * 100)
    with pytest.raises(KafkaException) as raised:
        retry_while_coordinator_busy(
            call,
            3.0,
            "test",
            sleep=clock.sleep,
            clock=lambda: clock.now,
        )
    assert raised.value.args[0].code() == KafkaError.NOT_COORDINATOR
    assert sum(clock.sleeps) <= 3.0
    assert len(clock.sleeps) >= 4
