"""What ops read: Prometheus metrics per route template and per job, structured JSON logs with the request, tenant
and assessment ids, and never a key or a text body in any log line."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import REGISTRY

from service.platform.settings import Settings
from service.platform.telemetry import JsonFormatter, configure_logging, log_context
from tests.conftest import TEST_TENANT
from tests.worker_support import CallbackReceiver, run_worker_burst

SECRET_TEXT = f"a candidate text nobody may log {uuid.uuid4().hex}"


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_metrics_per_route_template_and_queue_depth(client: Any) -> None:
    before = _sample(
        "trisk_http_requests_total", {"method": "GET", "route": "/v1/assessments/{assessment_id}", "status": "404"}
    )
    for _ in range(3):
        assert client.get(f"/v1/assessments/{uuid.uuid4().hex}").status_code == 404
    text = client.get("/metrics").text
    after = _sample(
        "trisk_http_requests_total", {"method": "GET", "route": "/v1/assessments/{assessment_id}", "status": "404"}
    )
    assert after - before == 3
    assert "trisk_http_request_duration_seconds_bucket" in text and "trisk_queue_depth{" in text
    assert "/v1/assessments/0" not in text  # ids never become labels


def test_job_metrics_count_outcomes(client: Any, test_settings: Settings) -> None:
    settings = replace(test_settings, redis=replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"))
    before = _sample("trisk_job_duration_seconds_count", {"job": "assess_cheap", "outcome": "done"})
    # the client's app enqueues on test_settings' queue: run a worker on that queue
    body = {
        "source": {"text": "Evaṃ me sutaṃ. Ekaṃ samayaṃ bhagavā.", "lang": "pli"},
        "candidates": [{"id": "a", "text": "Thus have I heard."}],
        "checks": ["hard_flags"],
    }
    client.post("/v1/assessments", json=body)
    run_worker_burst(test_settings)
    assert _sample("trisk_job_duration_seconds_count", {"job": "assess_cheap", "outcome": "done"}) >= before + 1
    del settings


def test_json_log_lines_carry_the_context() -> None:
    formatter = JsonFormatter()
    record = logging.LogRecord("trisk.test", logging.WARNING, __file__, 1, "job %s failed", ("x",), None)
    with log_context(request_id="r-1", tenant="t-1", assessment_id="a-1"):
        line = json.loads(formatter.format(record))
    assert line == {
        "ts": pytest.approx(record.created, abs=0.01),
        "level": "warning",
        "logger": "trisk.test",
        "msg": "job x failed",
        "request_id": "r-1",
        "tenant": "t-1",
        "assessment_id": "a-1",
    }
    assert "request_id" not in json.loads(formatter.format(record))  # outside the block: no stale context


def test_no_key_and_no_text_ever_reach_the_logs(
    client: Any, test_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    token = client.headers["Authorization"].removeprefix("Bearer ")
    with _captured(JsonFormatter()) as lines:
        body = {
            "source": {"text": "Evaṃ me sutaṃ.", "lang": "pli"},
            "candidates": [{"id": "a", "text": SECRET_TEXT}, {"id": "b", "text": "x" * 60_000}],
        }
        assert client.post("/v1/assessments", json=body).status_code == 422  # over-long: its detail names no text
        ok = client.post("/v1/assessments", json={**body, "candidates": body["candidates"][:1]})
        assert ok.status_code == 202
        client.get("/v1/review/queue", headers={"X-Request-ID": "trace-me"})
        run_worker_burst(test_settings)
    assert lines, "nothing was logged at all"
    blob = "\n".join(lines)
    assert token not in blob and token.split("_", 2)[2] not in blob  # the secret may itself hold "_"
    assert SECRET_TEXT not in blob and "x" * 200 not in blob
    parsed = [json.loads(line) for line in lines]
    worker = [p for p in parsed if p.get("assessment_id") == ok.json()["id"]]
    assert worker and {p["tenant"] for p in worker} == {TEST_TENANT}  # the job's lines say whose work it is
    access = [p for p in parsed if p["logger"] == "trisk.access" and p.get("request_id") == "trace-me"]
    assert [a["msg"].split(" ")[:3] for a in access] == [["GET", "/v1/review/queue", "200"]]
    assert access[0]["tenant"] == TEST_TENANT


def _formatter(fmt: str) -> logging.Formatter:
    """The formatter a process configured with TRISK_LOG_FORMAT=``fmt`` writes its lines with."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging(fmt)
        formatter = root.handlers[0].formatter
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert formatter is not None
    return formatter


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_message_cannot_forge_a_log_line(fmt: str) -> None:
    """The finding: in the text format a decoded path with %0a wrote a forged line into the log. Every record is one
    line in both formats, with control and bidi characters escaped."""
    formatter = _formatter(fmt)
    hostile = "/v1/x\nINFO trisk.access GET /v1/admin 200\r\x1b[2J\u202etxt.exe\u2028"
    record = logging.LogRecord("trisk.test", logging.WARNING, __file__, 1, "not found: %s", (hostile,), None)
    try:
        raise ValueError(hostile)
    except ValueError:
        import sys

        with_exc = logging.LogRecord("trisk.test", logging.ERROR, __file__, 1, "boom %s", (hostile,), sys.exc_info())
    for rec in (record, with_exc):
        line = formatter.format(rec)
        assert "\n" not in line and "\r" not in line and "\x1b" not in line
        assert "\u202e" not in line and "\u2028" not in line
        text = json.loads(line)["msg"] if isinstance(formatter, JsonFormatter) else line
        assert "\\n" in text and "\\x1b" in text  # escaped, still readable


def test_decoded_paths_and_callback_queries_stay_out_of_the_text_log(
    client: Any, test_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = CallbackReceiver([200])
    try:
        with _captured(_formatter("text")) as lines:
            _hostile_traffic(client, test_settings, receiver.url)
    finally:
        receiver.close()
    assert receiver.bodies, "the callback was not delivered"
    blob = "\n".join(lines)
    # the 503's warning names the decoded path: escaped, on its one line
    assert any("/v1/assessments/x\\nINFO trisk.access forged" in line for line in lines), lines
    assert "receiver-secret" not in blob  # httpx logs every request's URL: the query is dropped
    assert not any(line.startswith(("INFO trisk.access forged", "forged")) for line in blob.split("\n"))
    assert all("\n" not in line for line in lines)


@contextlib.contextmanager
def _captured(formatter: logging.Formatter) -> Iterator[list[str]]:
    """Every record logged inside the block (DEBUG and up), as ``formatter`` writes it."""
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(formatter.format(record))

    handler = Capture(level=logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def _hostile_traffic(client: Any, settings: Settings, receiver_url: str) -> None:
    resources = client.app.state.resources
    keys, resources.keys = resources.keys, None  # the key store "not open": a 503, logged with the request's path
    try:
        assert client.get("/v1/assessments/x%0aINFO%20trisk.access%20forged").status_code == 503
    finally:
        resources.keys = keys
    client.get("/v1/nowhere%0d%0aforged")
    body = {
        "source": {"text": "Evaṃ me sutaṃ.", "lang": "pli"},
        "candidates": [{"id": "a", "text": "Thus have I heard."}],
        "checks": ["hard_flags"],
        "callback_url": receiver_url + "?token=receiver-secret",
    }
    assert client.post("/v1/assessments", json=body).status_code == 202
    run_worker_burst(settings)
