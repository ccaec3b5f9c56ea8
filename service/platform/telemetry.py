"""What ops watch: Prometheus metrics of the API and the workers, and structured JSON logs with request, tenant and
assessment ids (never a key, never a text body).

Metrics live in the process that counts them (one registry per process): the API serves them on ``/metrics``
(admin scope) or on its own port (``TRISK_METRICS_PORT``), each worker on ``TRISK_WORKER_METRICS_PORT``. Log context
comes from context variables that the request middleware and the jobs set, so every log line of a request or a job
carries them without being passed around.
"""

from __future__ import annotations

import contextvars
import json
import logging
import logging.config
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from service.platform.redact import scrub

__all__ = [
    "ASSESSMENT_ID",
    "CHECK_FAILURES",
    "HTTP_DURATION",
    "HTTP_REQUESTS",
    "JOB_DURATION",
    "JUDGE_CALLS",
    "JUDGE_PARSE_FAILURES",
    "JUDGE_TOKENS",
    "LLM_CACHE_HITS",
    "QUEUE_DEPTH",
    "RATE_LIMITED",
    "REQUEST_ID",
    "TENANT",
    "WORKERS_LIVE",
    "JsonFormatter",
    "TextFormatter",
    "clean_message",
    "configure_logging",
    "log_context",
    "logging_config",
    "start_metrics_server",
    "timed_job",
]

# -- metrics (names follow Prometheus conventions: unit suffixes, _total for counters)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_JOB_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)

HTTP_REQUESTS = Counter("trisk_http_requests_total", "HTTP requests answered", ["method", "route", "status"])
HTTP_DURATION = Histogram(
    "trisk_http_request_duration_seconds", "HTTP request latency", ["method", "route"], buckets=_LATENCY_BUCKETS
)
RATE_LIMITED = Counter("trisk_rate_limited_total", "requests refused by a rate limit", ["limit"])
QUEUE_DEPTH = Gauge("trisk_queue_depth", "jobs waiting in a queue (read at scrape time)", ["queue"])
WORKERS_LIVE = Gauge(
    "trisk_workers_live",
    "workers with a live heartbeat in Redis, per queue and release (read at scrape time)",
    ["queue", "release"],
)
JOB_DURATION = Histogram("trisk_job_duration_seconds", "worker job run time", ["job", "outcome"], buckets=_JOB_BUCKETS)
CHECK_FAILURES = Counter(
    "trisk_check_failures_total", "assessment work that failed, per tier (cheap, llm, tail, callback)", ["check"]
)
JUDGE_CALLS = Counter(
    "trisk_judge_calls_total", "LLM judge calls, per model and outcome (ok, cached, error)", ["model", "outcome"]
)
LLM_CACHE_HITS = Counter("trisk_llm_cache_hits_total", "LLM answers served from the response cache", ["model"])
JUDGE_TOKENS = Counter("trisk_llm_tokens_total", "LLM tokens spent (cache hits cost none)", ["model", "kind"])
JUDGE_PARSE_FAILURES = Counter(
    "trisk_judge_parse_failures_total", "judge answers that did not parse, per prompt and error", ["prompt", "error"]
)


_serving: set[int] = set()


def start_metrics_server(port: int) -> None:
    """Serve this process's metrics on ``port`` (once per process and port)."""
    if port not in _serving:
        start_http_server(port)
        _serving.add(port)


@contextmanager
def timed_job(job: str) -> Iterator[dict[str, str]]:
    """Time a job; the caller sets ``outcome`` in the yielded dict (default ``error`` if it raises)."""
    started = time.perf_counter()
    state = {"outcome": "error"}
    try:
        yield state
    finally:
        JOB_DURATION.labels(job, state["outcome"]).observe(time.perf_counter() - started)


# -- structured logs
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("trisk_request_id", default=None)
TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("trisk_tenant", default=None)
ASSESSMENT_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("trisk_assessment_id", default=None)
_CONTEXT = {"request_id": REQUEST_ID, "tenant": TENANT, "assessment_id": ASSESSMENT_ID}


@contextmanager
def log_context(**values: str | None) -> Iterator[None]:
    """Set request_id / tenant / assessment_id for every log line inside the block."""
    tokens = [(_CONTEXT[k], _CONTEXT[k].set(v)) for k, v in values.items()]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


# C0 and C1 controls, DEL, and the characters that break or reorder a line on a terminal (line and paragraph
# separators, bidi embeddings, overrides and isolates): a message never forges a line or hides part of one
_CONTROLS = {
    cp: f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"
    for cp in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
}
_CONTROLS.update({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"})
# the query of a URL in a message (a callback URL's token, a signed link) is replaced: it may carry a secret
_URL_QUERY = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?#\"'<>]*)\?[^\s#\"'<>]*")


_CONTROLS_BUT_LINES = {cp: v for cp, v in _CONTROLS.items() if cp not in (0x0A, 0x09)}


def clean_message(text: str, *, lines: bool = False) -> str:
    """A log message as it may be written: credentials masked (service.platform.redact: URL passwords, the settings'
    secrets), URL queries dropped, control characters escaped (one record, one line). ``lines``: newlines and tabs
    kept (a traceback inside a JSON string, where the encoder escapes them)."""
    return _URL_QUERY.sub(r"\1?[query removed]", scrub(text)).translate(_CONTROLS_BUT_LINES if lines else _CONTROLS)


class TextFormatter(logging.Formatter):
    """``time level logger message`` on one line, for a terminal: the message and any exception escaped."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = f"{self.formatTime(record)} {record.levelname} {record.name} {clean_message(record.getMessage())}"
        if record.exc_info:
            line += " | " + clean_message(self.formatException(record.exc_info))
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context ids, and the exception if any."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": clean_message(record.getMessage()),
        }
        for key, var in _CONTEXT.items():
            value = var.get()
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = clean_message(self.formatException(record.exc_info), lines=True)
        return json.dumps(out, ensure_ascii=False)


# every library logger that sets up handlers of its own: its lines go through the one root handler instead
_SERVER_LOGGERS = ("uvicorn", "uvicorn.access", "uvicorn.error", "arq", "arq.worker", "arq.jobs", "litestar")


def logging_config(fmt: str = "json", level: int = logging.INFO) -> dict[str, Any]:
    """The process's logging as a ``logging.config.dictConfig`` dict: one stderr handler on the root, JSON lines
    (``fmt="json"``) or plain text, and every server library's logger sent to it. ``arq --custom-log-dict`` takes
    it too (workers/settings.py: ``LOG_CONFIG``), so even arq's lines before the worker's start are JSON."""
    formatter = f"{__name__}.JsonFormatter" if fmt == "json" else f"{__name__}.TextFormatter"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"trisk": {"()": formatter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "trisk"}},
        "root": {"handlers": ["stderr"], "level": logging.getLevelName(level)},
        # the servers' own loggers (uvicorn's, arq's, Litestar's) go through the same handler
        "loggers": {name: {"handlers": [], "propagate": True} for name in _SERVER_LOGGERS},
    }


def configure_logging(fmt: str = "json", level: int = logging.INFO) -> None:
    """Root logging for a process: JSON lines (``fmt="json"``) or plain text for a terminal."""
    logging.config.dictConfig(logging_config(fmt, level))
