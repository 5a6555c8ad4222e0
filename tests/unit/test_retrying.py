"""``twopc.retrying``: one policy for every retry and wait, with exponential backoff and
jitter, bounded by attempts or a deadline."""

from __future__ import annotations

import pytest

import twopc
from twopc.retrying import POLLING, RetryPolicy, retry_while, wait_until

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_backoff_grows_is_capped_and_jitter_takes_at_most_its_share() -> None:
    policy = RetryPolicy(initial_backoff_seconds=1.0, max_backoff_seconds=5.0, jitter=0.5)
    assert [policy.ceiling(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert policy.backoff(3, draw=lambda: 0.0) == 4.0
    assert policy.backoff(3, draw=lambda: 0.999) == pytest.approx(2.002)
    draws = [policy.backoff(2) for _ in range(200)]
    assert all(1.0 <= d <= 2.0 for d in draws)
    assert len(set(draws)) > 100, "no jitter"
    exact = RetryPolicy(initial_backoff_seconds=0.5, jitter=0.0)
    assert [exact.backoff(n) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]


@pytest.mark.parametrize(
    "bad",
    [{"max_attempts": 0}, {"initial_backoff_seconds": -1}, {"multiplier": 0.5}, {"jitter": 1.5}],
)
def test_a_bad_policy_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(twopc.ConfigurationError, match="RetryPolicy"):
        RetryPolicy(**bad)  # type: ignore[arg-type]


def test_retry_while_retries_only_what_it_is_told_until_the_deadline() -> None:
    clock = Clock()
    failures = [ConnectionError("busy")] * 3

    def call() -> str:
        if failures:
            raise failures.pop()
        return "done"

    def busy(exc: Exception) -> bool:
        return isinstance(exc, ConnectionError)

    assert retry_while(call, busy, timeout=10, what="t", sleep=clock.sleep, clock=clock) == "done"
    assert len(clock.sleeps) == 3
    assert all(0.05 <= s <= 0.4 for s in clock.sleeps)

    with pytest.raises(ValueError, match="other"):
        retry_while(
            lambda: (_ for _ in ()).throw(ValueError("other")),
            busy,
            timeout=10,
            what="t",
            sleep=clock.sleep,
            clock=clock,
        )

    stuck = Clock()
    with pytest.raises(ConnectionError):
        retry_while(
            lambda: (_ for _ in ()).throw(ConnectionError("still busy")),
            busy,
            timeout=5,
            what="t",
            sleep=stuck.sleep,
            clock=stuck,
        )
    assert 3 <= stuck.now <= 5  # gave up at the deadline, not before and not long after


def test_wait_until_polls_with_growing_waits_and_stops_at_the_deadline() -> None:
    clock = Clock()
    looks = iter([False, False, False, True])
    assert wait_until(lambda: next(looks), timeout=10, sleep=clock.sleep, clock=clock)
    assert len(clock.sleeps) == 3
    assert clock.sleeps[2] > clock.sleeps[0] / 2  # not shrinking: exponential with jitter

    never = Clock()
    assert not wait_until(lambda: False, timeout=3, sleep=never.sleep, clock=never)
    assert never.now == pytest.approx(3.0)
    assert max(never.sleeps) <= POLLING.max_backoff_seconds
