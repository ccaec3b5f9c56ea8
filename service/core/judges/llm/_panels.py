"""Judge panels (data under models/panels/), model-family detection and self-scoring exclusion."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from service.core.judges.llm._client import Endpoint
from service.platform.errors import InputError, NotReady

if TYPE_CHECKING:
    from service.platform.settings import LLMSettings

__all__ = [
    "KNOWN_FAMILIES",
    "ExcludedJudge",
    "Judge",
    "JudgeSelection",
    "JudgeSpec",
    "Panel",
    "available_panels",
    "choose_panel",
    "family_of",
    "inline_panel",
    "load_panel",
    "resolve_endpoint",
    "select_judges",
]

# the model families a judge or a producing model may belong to (self-scoring exclusion compares them); a panel may
# declare more in its own "families" list (an in-house or local model's family), so the list is open but declared:
# a family nobody declared is a typo, refused
KNOWN_FAMILIES: frozenset[str] = frozenset(
    {
        "anthropic",
        "openai",
        "google",
        "meta",
        "qwen",
        "deepseek",
        "moonshot",
        "xai",
        "zhipu",
        "mistral",
        "cohere",
        # open models that run locally (llama.cpp, a laptop): SmolLM, Phi, Granite, Nemotron, OLMo
        "huggingface",
        "microsoft",
        "ibm",
        "nvidia",
        "allenai",
    }
)


class Judge(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One judge: ``model`` is the name on the provider; base URL and key come from LLMSettings unless overridden."""

    id: str
    model: str
    family: str
    base_url: str | None = None
    # name of the environment variable holding this judge's key (never the key itself in data)
    api_key_env: str | None = None
    # replaces the max_tokens of every call type for this judge (a reasoning model spends tokens before answering)
    max_tokens: int | None = None


class Panel(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Judges in priority order; ``judges_per_candidate`` caps how many eligible ones score one candidate."""

    name: str
    version: str
    judges: list[Judge]
    description: str = ""
    judges_per_candidate: int | None = None
    # families beyond KNOWN_FAMILIES that this panel's judges belong to (declared here, so a typo still fails)
    families: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        ids = [j.id for j in self.judges]
        if len(set(ids)) != len(ids):
            raise ValueError(f"panel {self.name}: duplicate judge ids")
        unknown = sorted({j.family for j in self.judges} - KNOWN_FAMILIES - set(self.families))
        if unknown:
            raise ValueError(
                f"panel {self.name}: unknown families {unknown}; known: {sorted(KNOWN_FAMILIES)} (declare another "
                'in the panel\'s "families" list)'
            )
        if self.judges_per_candidate is not None and not 1 <= self.judges_per_candidate <= len(self.judges):
            raise ValueError(f"panel {self.name}: judges_per_candidate out of range")


class ExcludedJudge(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    judge_id: str
    model: str
    family: str
    reason: str


class JudgeSelection(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The judges that score one candidate, and the ones left out with the reason."""

    panel: str
    panel_version: str
    candidate_model: str | None
    candidate_family: str | None
    judges: list[Judge]
    excluded: list[ExcludedJudge]


# vendor prefixes as providers/routers write them ("vendor/model"), then name patterns for bare model names
_VENDORS: dict[str, str] = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google": "google",
    "meta-llama": "meta",
    "meta": "meta",
    "facebook": "meta",
    "qwen": "qwen",
    "alibaba": "qwen",
    "deepseek": "deepseek",
    "deepseek-ai": "deepseek",
    "moonshotai": "moonshot",
    "moonshot": "moonshot",
    "x-ai": "xai",
    "xai": "xai",
    "z-ai": "zhipu",
    "zai-org": "zhipu",
    "zhipuai": "zhipu",
    "thudm": "zhipu",
    "mistralai": "mistral",
    "mistral": "mistral",
    "cohere": "cohere",
    "huggingfacetb": "huggingface",
    "huggingface": "huggingface",
    "microsoft": "microsoft",
    "ibm-granite": "ibm",
    "ibm": "ibm",
    "nvidia": "nvidia",
    "allenai": "allenai",
}
_NAME_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), family)
    for pattern, family in (
        (r"claude", "anthropic"),
        (r"(?:^|[^a-z])(?:gpt|chatgpt|o[134])(?:[^a-z]|$)|davinci", "openai"),
        (r"gemini|gemma|palm", "google"),
        (r"llama", "meta"),
        (r"qwen|qwq", "qwen"),
        (r"deepseek", "deepseek"),
        (r"kimi|moonshot", "moonshot"),
        (r"grok", "xai"),
        (r"(?:^|[^a-z])(?:chat)?glm", "zhipu"),
        (r"mistral|mixtral|codestral|magistral|ministral", "mistral"),
        (r"command-r|aya", "cohere"),
        (r"smollm", "huggingface"),
        (r"(?:^|[^a-z])phi-?[0-9]", "microsoft"),
        (r"granite", "ibm"),
        (r"nemotron", "nvidia"),
        (r"olmo", "allenai"),
    )
)


def family_of(model_name: str | None) -> str | None:
    """The family of a producing model, e.g. "meta-llama/llama-3.3-70b-instruct" -> "meta"; None if unknown.

    A known vendor prefix wins; otherwise the model part is matched against name patterns (so fine-tunes
    named after their base, like "hermes-3-llama-3.1-405b", count as that base's family).
    """
    if not model_name:
        return None
    name = model_name.strip().lower()
    vendor, _, model = name.rpartition("/")
    if vendor:
        family = _VENDORS.get(vendor.split("/")[-1])
        if family is not None:
            return family
    for pattern, family in _NAME_PATTERNS:
        if pattern.search(model or name):
            return family
    return None


def select_judges(
    panel: Panel,
    candidate_model: str | None,
    *,
    candidate_family: str | None = None,
    exclude_same_family: bool = True,
) -> JudgeSelection:
    """Drop judges of the candidate's own family, then keep at most ``judges_per_candidate`` in panel order.

    ``exclude_same_family=False`` keeps same-family judges (the caller flags them instead, as MATA grading does
    unless the request asks for exclusion).
    """
    family = candidate_family or family_of(candidate_model)
    chosen: list[Judge] = []
    excluded: list[ExcludedJudge] = []
    for judge in panel.judges:
        if exclude_same_family and family is not None and judge.family == family:
            reason = f"self-scoring: judge family {judge.family} produced the candidate"
            excluded.append(ExcludedJudge(judge.id, judge.model, judge.family, reason))
        elif panel.judges_per_candidate is not None and len(chosen) >= panel.judges_per_candidate:
            reason = f"reserve: panel size {panel.judges_per_candidate} already reached"
            excluded.append(ExcludedJudge(judge.id, judge.model, judge.family, reason))
        else:
            chosen.append(judge)
    return JudgeSelection(panel.name, panel.version, candidate_model, family, chosen, excluded)


class JudgeSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A judge named in a request: a model on the configured provider (never a URL or a key from the request).

    ``family`` is read from the model name (``family_of``) unless given; ``id`` defaults to the model name.
    """

    model: str
    family: str | None = None
    id: str | None = None


# a request names at most this many judges inline; a longer model name is not a model name
MAX_INLINE_JUDGES = 16
_MAX_MODEL_NAME = 200


def inline_panel(specs: Sequence[JudgeSpec], *, name: str = "inline") -> Panel:
    """A panel from judges given in a request; its version is a hash of the judges, so a result names them exactly."""
    if not specs:
        raise InputError("judges: give at least one judge")
    if len(specs) > MAX_INLINE_JUDGES:
        raise InputError(f"judges: at most {MAX_INLINE_JUDGES} judges", extra={"limit": MAX_INLINE_JUDGES})
    judges: list[Judge] = []
    for i, spec in enumerate(specs):
        model = spec.model.strip()
        if not model or len(model) > _MAX_MODEL_NAME:
            raise InputError(f"judges[{i}].model must be 1-{_MAX_MODEL_NAME} characters", extra={"field": "model"})
        family = spec.family if spec.family is not None else family_of(model)
        if family is None:
            raise InputError(
                f"judges[{i}]: cannot tell the family of model {model!r}; give its family",
                extra={"known_families": sorted(KNOWN_FAMILIES)},
            )
        if family not in KNOWN_FAMILIES:
            known = sorted(KNOWN_FAMILIES)
            raise InputError(f"judges[{i}]: unknown family {family!r}", extra={"known_families": known})
        judges.append(Judge(id=spec.id or model, model=model, family=family))
    ids = [j.id for j in judges]
    if len(set(ids)) != len(ids):
        raise InputError("judges: two judges have the same id (give distinct ids)")
    material = msgspec.json.encode([[j.id, j.model, j.family] for j in judges])
    return Panel(name=name, version="sha256:" + hashlib.sha256(material).hexdigest()[:16], judges=judges)


def choose_panel(
    panel: str | None,
    judges: Sequence[JudgeSpec] | None,
    *,
    default: str,
    panels_dir: str | Path | None = None,
) -> Panel:
    """A request's judges: a named panel or an inline list (not both); neither means the ``default`` panel."""
    if panel is not None and judges is not None:
        raise InputError("give either a panel or judges, not both")
    if judges is not None:
        return inline_panel(judges)
    return load_panel(panel if panel is not None else default, panels_dir=panels_dir)


def _panels_dir(panels_dir: str | Path | None) -> Path:
    if panels_dir is not None:
        return Path(panels_dir)
    from service.platform.settings import get_settings

    return get_settings().risk.panels_dir


_PANEL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def available_panels(panels_dir: str | Path | None = None) -> list[str]:
    return sorted(p.stem for p in _panels_dir(panels_dir).glob("*.json"))


def load_panel(name: str, *, panels_dir: str | Path | None = None) -> Panel:
    """Load ``models/panels/<name>.json``; an unknown name is bad input, a malformed file is a deployment fault."""
    if not _PANEL_NAME.match(name):
        raise InputError(f"judge panel name {name!r} is not valid")
    path = _panels_dir(panels_dir) / f"{name}.json"
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise InputError(f"no judge panel {name!r}", extra={"available": available_panels(panels_dir)}) from exc
    try:
        return msgspec.json.decode(raw, type=Panel)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise NotReady(f"judge panel {name!r} is malformed: {exc}") from exc


def resolve_endpoint(judge: Judge, settings: LLMSettings, env: Mapping[str, str] | None = None) -> Endpoint:
    """The judge's own base URL / key variable when the panel sets them, else the provider from LLMSettings."""
    env = os.environ if env is None else env
    api_key = settings.api_key
    if judge.api_key_env:
        api_key = env.get(judge.api_key_env, "")
    return Endpoint(base_url=judge.base_url or settings.base_url, api_key=api_key, model=judge.model)
