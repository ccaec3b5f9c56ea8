"""Panels as data, family detection and self-scoring exclusion."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from service.core.judges.llm import (
    KNOWN_FAMILIES,
    Judge,
    Panel,
    available_panels,
    family_of,
    load_panel,
    resolve_endpoint,
    select_judges,
)
from service.platform.errors import InputError, NotReady
from service.platform.settings import LLMSettings

PALIBENCH_TRANSLATORS = {
    "anthropic/claude-opus-4.5": "anthropic",
    "deepseek/deepseek-v3.2": "deepseek",
    "google/gemini-3-flash-preview": "google",
    "google/gemini-3-pro-preview": "google",
    "meta-llama/llama-3.3-70b-instruct": "meta",
    "moonshotai/kimi-k2.5": "moonshot",
    "openai/gpt-5.2": "openai",
    "qwen/qwen3-235b-a22b-2507": "qwen",
    "x-ai/grok-4.1-fast": "xai",
    "z-ai/glm-4.7": "zhipu",
}


@pytest.mark.parametrize(
    ("model", "family"),
    [
        *PALIBENCH_TRANSLATORS.items(),
        ("claude-3-5-sonnet-20241022", "anthropic"),
        ("gpt-4o-mini", "openai"),
        ("o3-mini", "openai"),
        ("gemma-3-27b-it", "google"),
        ("Meta-Llama/Llama-3.1-8B-Instruct", "meta"),
        ("deepseek-ai/DeepSeek-R1", "deepseek"),
        ("Qwen/QwQ-32B", "qwen"),
        ("kimi-k2-instruct", "moonshot"),
        ("grok-4", "xai"),
        ("THUDM/glm-4-9b-chat", "zhipu"),
        ("chatglm3-6b", "zhipu"),
        ("nousresearch/hermes-3-llama-3.1-405b", "meta"),  # a fine-tune counts as its base family
        ("openrouter/auto", None),
        ("my-inhouse-model", None),
        ("", None),
        (None, None),
    ],
)
def test_family_of(model: str | None, family: str | None) -> None:
    assert family_of(model) == family


def test_shipped_panels_load_and_use_known_families() -> None:
    assert {"strong", "peer"} <= set(available_panels())
    for name in ("strong", "peer"):
        panel = load_panel(name)
        assert panel.name == name and panel.judges_per_candidate == 3
        assert all(j.family in KNOWN_FAMILIES and family_of(j.model) == j.family for j in panel.judges)


@pytest.mark.parametrize("panel_name", ["strong", "peer"])
@pytest.mark.parametrize("model", sorted(PALIBENCH_TRANSLATORS))
def test_every_translator_gets_three_judges_none_of_its_family(panel_name: str, model: str) -> None:
    selection = select_judges(load_panel(panel_name), model)
    assert len(selection.judges) == 3
    assert all(j.family != PALIBENCH_TRANSLATORS[model] for j in selection.judges)


def test_self_exclusion_is_reported_with_reason() -> None:
    selection = select_judges(load_panel("strong"), "anthropic/claude-opus-4.5")
    assert selection.candidate_family == "anthropic"
    assert [j.id for j in selection.judges] == ["gpt", "gemini-pro", "grok-reserve"]
    (excluded,) = selection.excluded
    assert excluded.judge_id == "claude-opus" and excluded.family == "anthropic"
    assert excluded.reason.startswith("self-scoring")


def test_reserve_judge_is_reported_when_unused() -> None:
    selection = select_judges(load_panel("strong"), "qwen/qwen3-235b-a22b-2507")
    assert [j.id for j in selection.judges] == ["claude-opus", "gpt", "gemini-pro"]
    assert [(e.judge_id, e.reason.split(":")[0]) for e in selection.excluded] == [("grok-reserve", "reserve")]


def test_unknown_candidate_family_excludes_nobody_and_explicit_family_wins() -> None:
    panel = Panel(name="p", version="1", judges=[Judge("a", "gpt-4o", "openai"), Judge("b", "claude", "anthropic")])
    assert [j.id for j in select_judges(panel, "mystery-model").judges] == ["a", "b"]
    assert select_judges(panel, "mystery-model").candidate_family is None
    assert [j.id for j in select_judges(panel, "mystery-model", candidate_family="openai").judges] == ["b"]


def test_load_panel_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        load_panel("no-such-panel")
    with pytest.raises(InputError):
        load_panel("../etc/passwd")
    (tmp_path / "bad.json").write_text('{"name": "bad", "version": "1", "judges": [], "colour": "red"}')
    with pytest.raises(NotReady):
        load_panel("bad", panels_dir=tmp_path)
    (tmp_path / "fam.json").write_text(
        '{"name": "fam", "version": "1", "judges": [{"id": "x", "model": "m", "family": "acme"}]}'
    )
    with pytest.raises(NotReady, match="unknown families"):
        load_panel("fam", panels_dir=tmp_path)


def test_resolve_endpoint_overrides() -> None:
    settings = LLMSettings(base_url="http://provider/v1", api_key="global")
    plain = Judge("a", "m", "openai")
    own = Judge("b", "m2", "openai", base_url="http://other/v1", api_key_env="OTHER_KEY")
    assert msgspec.structs.astuple(resolve_endpoint(plain, settings)) == ("http://provider/v1", "global", "m")
    assert msgspec.structs.astuple(resolve_endpoint(own, settings, env={"OTHER_KEY": "k2"})) == (
        "http://other/v1",
        "k2",
        "m2",
    )


def test_inline_panel_reads_families_and_versions_by_content() -> None:
    from service.core.judges.llm import JudgeSpec, inline_panel

    panel = inline_panel([JudgeSpec("openai/gpt-5.2"), JudgeSpec("my-finetune", family="qwen", id="ft")])
    assert [(j.id, j.model, j.family) for j in panel.judges] == [
        ("openai/gpt-5.2", "openai/gpt-5.2", "openai"),
        ("ft", "my-finetune", "qwen"),
    ]
    assert panel.version.startswith("sha256:")
    assert inline_panel([JudgeSpec("openai/gpt-5.2")]).version != panel.version


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ([], "at least one judge"),
        ([{"model": "mystery-model"}], "cannot tell the family"),
        ([{"model": "x", "family": "acme"}], "unknown family"),
        ([{"model": "openai/gpt-5.2"}, {"model": "openai/gpt-5.2"}], "same id"),
        ([{"model": " "}], "model must be"),
    ],
)
def test_inline_panel_refuses_unusable_judges(specs: list[dict[str, str]], message: str) -> None:
    from service.core.judges.llm import JudgeSpec, inline_panel

    with pytest.raises(InputError, match=message):
        inline_panel([msgspec.convert(s, JudgeSpec) for s in specs])


def test_choose_panel_named_inline_or_default() -> None:
    from service.core.judges.llm import JudgeSpec, choose_panel

    assert choose_panel(None, None, default="strong").name == "strong"
    assert choose_panel("peer", None, default="strong").name == "peer"
    assert choose_panel(None, [JudgeSpec("qwen/qwen3")], default="strong").name == "inline"
    with pytest.raises(InputError, match="not both"):
        choose_panel("peer", [JudgeSpec("qwen/qwen3")], default="strong")


def test_same_family_judges_kept_when_exclusion_is_off() -> None:
    panel = Panel(
        name="p",
        version="1",
        judges=[Judge("a", "meta-llama/llama-3.3-70b-instruct", "meta"), Judge("g", "google/gemma-3-27b", "google")],
    )
    kept = select_judges(panel, "meta-llama/llama-3.1-8b", exclude_same_family=False)
    assert [j.id for j in kept.judges] == ["a", "g"] and kept.excluded == [] and kept.candidate_family == "meta"
    dropped = select_judges(panel, "meta-llama/llama-3.1-8b")
    assert [j.id for j in dropped.judges] == ["g"] and [e.judge_id for e in dropped.excluded] == ["a"]


def test_the_shipped_local_panel_loads_with_the_local_models_real_family() -> None:
    panel = load_panel("local")
    (judge,) = panel.judges
    assert judge.family == "qwen" == family_of(judge.model)


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "huggingface"),
        ("smollm2-135m", "huggingface"),
        ("microsoft/phi-4", "microsoft"),
        ("granite-3.1-2b-instruct", "ibm"),
    ],
)
def test_local_model_families(model: str, family: str) -> None:
    assert family_of(model) == family


def test_model_families_are_an_open_declared_list(tmp_path: Path) -> None:
    def panel_file(name: str, **extra: object) -> None:
        body = {"name": name, "version": "1", "judges": [{"id": "j", "model": "m", "family": extra.pop("family")}]}
        (tmp_path / f"{name}.json").write_text(json.dumps({**body, **extra}))

    panel_file("smol", family="huggingface")  # a local model's real family is known
    assert load_panel("smol", panels_dir=tmp_path).judges[0].family == "huggingface"
    panel_file("inhouse", family="acme", families=["acme"])  # another one, declared by the panel
    assert load_panel("inhouse", panels_dir=tmp_path).judges[0].family == "acme"
    panel_file("typo", family="opneai")  # declared nowhere: a typo, refused with what is known and how to declare
    with pytest.raises(NotReady, match=r"unknown families \['opneai'\].*huggingface.*\"families\" list"):
        load_panel("typo", panels_dir=tmp_path)
