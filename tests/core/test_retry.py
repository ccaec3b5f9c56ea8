"""The one outbound retry policy and the one queue backoff: attempt counts, Retry-After honoured and capped."""

from __future__ import annotations

import pytest

from service.platform.retry import RetryPolicy, callback_retry_delay, exponential, job_retry_delay, parse_retry_after


def test_a_failed_job_waits_two_four_eight_seconds_up_to_a_minute() -> None:
    assert [job_retry_delay(t) for t in range(1, 8)] == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


def test_a_callback_doubles_its_backoff_up_to_five_minutes() -> None:
    assert [callback_retry_delay(t, 5.0) for t in range(1, 8)] == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0]
    assert exponential(1, base=0.5, cap=20.0) == 0.5 and exponential(9, base=0.5, cap=20.0) == 20.0


def test_retries_stop_after_max_retries() -> None:
    policy = RetryPolicy(max_retries=3, backoff_base=0.01, backoff_max=0.05, jitter=0.0)
    assert [policy.delay(r) for r in range(5)] == [0.01, 0.02, 0.04, None, None]
    assert RetryPolicy(max_retries=0).delay(0) is None


@pytest.mark.parametrize("retry_after", [0.0, 1.5, 60.0])
def test_a_retry_after_within_the_cap_replaces_the_backoff(retry_after: float) -> None:
    policy = RetryPolicy(backoff_base=0.5, jitter=0.25)
    for _ in range(50):
        delay = policy.delay(0, retry_after=retry_after)
        assert delay is not None and retry_after <= delay <= retry_after + 0.125  # upward jitter only


def test_a_retry_after_beyond_the_cap_is_not_waited_for() -> None:
    assert RetryPolicy().delay(0, retry_after=60.5) is None
    assert RetryPolicy(max_retry_after=30.0).delay(0, retry_after=45.0) is None
    assert RetryPolicy(max_retry_after=30.0).delay(0, retry_after=30.0) is not None


def test_no_wait_passes_the_deadline() -> None:
    policy = RetryPolicy(backoff_base=1.0, jitter=0.0)
    assert policy.delay(0, deadline=10.5, clock=lambda: 10.0) is None
    assert policy.delay(0, deadline=11.5, clock=lambda: 10.0) == 1.0
    assert policy.delay(0, retry_after=2.0, deadline=11.5, clock=lambda: 10.0) is None


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "NaN", "1e999"])
def test_a_retry_after_that_is_no_number_of_seconds_is_none(value: str) -> None:
    assert parse_retry_after(value) is None
