"""What counts as Redis unavailable (service/platform/redis_client.py): each "cannot write now" answer has its class, is
a 503 with a Retry-After for its cause, and the API maps every one of them in one place (service/app/problems.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import redis.exceptions
from redis._parsers.base import BaseParser

from service.app.problems import problem_for
from service.platform.redis_client import REDIS_REFUSING, REDIS_UNAVAILABLE, redis_unavailable

# what Redis answers when it takes no write for now (the code is the error's first word)
REFUSALS = {
    "OOM command not allowed when used memory > 'maxmemory'.": "full",
    "READONLY You can't write against a read only replica.": "read-only",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.": "primary",
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.": "snapshot",
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.": "script",
    "NOREPLICAS Not enough good replicas to write.": "replicas",
    "TRYAGAIN Multiple keys request during rehashing of slot": "moving",
    "CLUSTERDOWN The cluster is down": "cluster",
}


@pytest.mark.parametrize("answer", list(REFUSALS))
def test_each_refusal_is_a_503_with_retry_after_mapped_once(answer: str) -> None:
    exc = BaseParser.parse_error(answer)
    assert isinstance(exc, REDIS_REFUSING) and isinstance(exc, redis.exceptions.ResponseError), type(exc)
    error = redis_unavailable(exc)
    assert error.status_code == 503 and error.retry_after and error.retry_after >= 2
    assert REFUSALS[answer] in error.detail, error.detail
    request = SimpleNamespace(url=SimpleNamespace(path="/v1/assessments"))
    response = problem_for(request, exc)  # type: ignore[arg-type]
    assert response.status_code == 503 and int(response.headers["Retry-After"]) >= 2


def test_other_errors_keep_their_meaning() -> None:
    # whole first words: BUSYKEY (RESTORE) and BUSYGROUP (XGROUP) are not BUSY, WRONGTYPE is a bug of ours (a 500)
    for answer in ("BUSYKEY Target key name already exists.", "BUSYGROUP Consumer Group name already exists"):
        assert type(BaseParser.parse_error(answer)) is redis.exceptions.ResponseError
    wrong = BaseParser.parse_error("WRONGTYPE Operation against a key holding the wrong kind of value")
    assert not isinstance(wrong, REDIS_UNAVAILABLE)
    request = SimpleNamespace(url=SimpleNamespace(path="/v1/assessments"))
    assert problem_for(request, wrong).status_code == 500  # type: ignore[arg-type]
    # a full Redis waits longer than a restart
    assert redis_unavailable(BaseParser.parse_error("OOM x")).retry_after == 30.0
    assert redis_unavailable(redis.exceptions.ConnectionError("refused")).retry_after == 2.0
