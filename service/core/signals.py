"""Reference-free candidate signals and hard flags for one passage (pure numpy/text; no I/O except length models)."""

from __future__ import annotations

import json
import math
import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec
import numpy as np

from service.core.text import get_normaliser
from service.core.types import Flag, SignalResult, SignalSkipped, SignalValue

__all__ = [
    "PEER_SIGNALS",
    "SIGNAL_NAMES",
    "CandidateSignals",
    "LengthModel",
    "add_translator_signal",
    "candidate_flags",
    "chrf",
    "compute_signals",
    "fit_length_model",
    "length_model_json",
    "length_model_path",
    "letter_count",
    "load_length_model",
]

# Signals that need other candidates of the same passage; a model listing one of them has requires_peers = true.
PEER_SIGNALS: tuple[str, ...] = (
    "peer_centroid_distance",
    "peer_centroid_z",
    "peer_mean_distance",
    "peer_knn_distance",
    "peer_chrf_risk",
    "peer_length_z",
    "peer_length_short_z",
    "source_distance_peer_z",
    "translator_peer_distance",
)
SIGNAL_NAMES: tuple[str, ...] = (
    "source_distance",
    "length_ratio_z",
    "length_ratio_short_z",
    "source_copy_share",
    "novelty",
    *PEER_SIGNALS,
)

# Floors for spreads among peers: with near-identical peers a tiny sd would turn noise into huge z-scores.
_SD_FLOOR_DISTANCE = 0.005
_SD_FLOOR_LOG_LENGTH = 0.05
_KNN_K = 3

# Hard-flag thresholds. On the PaliBench dev half (7,630 candidates) the largest source-token share of a real
# translation is 0.21 and the longest run of source tokens is 13 (an untranslated Pali formula, a true partial copy).
_COPY_SHARE = 0.6
_COPY_RUN = 8
_MIN_LETTERS_SCRIPT = 10
_SCRIPT_SHARE = 0.5
# A generation loop compresses far better than its source (dev: loop 0.07, next lowest 0.48 of the source's ratio).
_LOOP_RELATIVE_ZLIB = 0.3
_LOOP_MIN_CHARS = 200

_PALI_DIACRITICS = frozenset("āīūṃṁṅñṭḍṇḷĀĪŪṂṀṄÑṬḌṆḶ")

# Languages whose output should be in one script (the first word of the Unicode character name).
_EXPECTED_SCRIPTS: dict[str, frozenset[str]] = {
    **{lang: frozenset({"LATIN"}) for lang in ("en", "de", "fr", "es", "it", "pt", "nl", "pl", "cs", "vi", "id")},
    "ru": frozenset({"CYRILLIC"}),
    "uk": frozenset({"CYRILLIC"}),
    "zh": frozenset({"CJK"}),
    "ja": frozenset({"CJK", "HIRAGANA", "KATAKANA"}),
    "ko": frozenset({"HANGUL"}),
    "hi": frozenset({"DEVANAGARI"}),
    "th": frozenset({"THAI"}),
    "my": frozenset({"MYANMAR"}),
    "si": frozenset({"SINHALA"}),
    "bo": frozenset({"TIBETAN"}),
    "te": frozenset({"TELUGU"}),
}

_JSON_DEBRIS = (
    re.compile(r"^\s*[\{\[]\s*\""),  # output starts like a JSON object or array of strings
    re.compile(r"\"\s*:\s*[\"\{\[]"),  # a key-value pair
    re.compile(r"\"?\b[a-z]{2,6}\d+(?:\.\d+)*:\d+(?:\.\d+)*\b\"?\s*:"),  # a bilara segment key used as a key
    re.compile(r"```"),  # a markdown code fence
    re.compile(r"\"\s*\}\s*$"),  # ends like a JSON object
)
_PROMPT_ECHO = re.compile(
    r"translate the following|return a json|output only the json|here is the (?:english )?translation|"
    r"as an ai\b|i cannot (?:translate|help)|i'm sorry, but|sure[,!] here",
    re.IGNORECASE,
)


class CandidateSignals(msgspec.Struct, forbid_unknown_fields=True):
    """Signals (name -> value or skip reason) and hard flags of one candidate."""

    signals: dict[str, SignalResult]
    flags: list[Flag]
    model: str | None = None


class LengthModel(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Distribution of log(target letters / source letters) in a corpus's own translations, per passage."""

    source_lang: str
    target_lang: str
    mean: float
    sd: float
    median: float
    robust_sd: float  # 1.4826 * MAD
    n: int
    quantiles: dict[str, float]
    built_from: str
    unit: str = "letters"
    version: str = "1"


def letter_count(text: str) -> int:
    """Letters (Unicode L*) plus combining marks: length that ignores spacing, punctuation and digits."""
    return sum(1 for ch in text if ch.isalpha() or unicodedata.category(ch) == "Mn")


def fit_length_model(
    pairs: Iterable[tuple[str, str]], *, source_lang: str, target_lang: str, built_from: str
) -> LengthModel:
    """Fit the log length-ratio distribution from (source, translation) passage pairs; empty sides are skipped."""
    vals = []
    for src, tgt in pairs:
        ls, lt = letter_count(src), letter_count(tgt)
        if ls > 0 and lt > 0:
            vals.append(math.log(lt / ls))
    if len(vals) < 2:
        raise ValueError("need at least two non-empty passage pairs to fit a length model")
    arr = np.asarray(vals)
    med = float(np.median(arr))
    qs = {f"{q:g}": float(np.quantile(arr, q)) for q in (0.001, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 0.999)}
    return LengthModel(
        source_lang=source_lang,
        target_lang=target_lang,
        mean=float(arr.mean()),
        sd=float(arr.std(ddof=1)),
        median=med,
        robust_sd=float(1.4826 * np.median(np.abs(arr - med))),
        n=int(arr.shape[0]),
        quantiles=qs,
        built_from=built_from,
    )


def length_model_path(source_lang: str, target_lang: str, models_dir: str | Path) -> Path:
    return Path(models_dir) / "length" / f"{source_lang}-{target_lang}.json"


def load_length_model(source_lang: str, target_lang: str, models_dir: str | Path) -> LengthModel | None:
    """The stored length model for a language pair, or None (the length signal is then skipped with a reason)."""
    path = length_model_path(source_lang, target_lang, models_dir)
    if not path.exists():
        return None
    return msgspec.json.decode(path.read_bytes(), type=LengthModel)


def _normalise_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms == 0.0, 1.0, norms)


def _peer_z(values: np.ndarray, i: int, floor: float) -> float:
    """z of values[i] against the other values (mean, sample sd floored)."""
    others = np.delete(values, i)
    sd = float(others.std(ddof=1)) if others.shape[0] >= 2 else 0.0
    return float((values[i] - others.mean()) / max(sd, floor))


def _char_ngrams(text: str, max_n: int = 6) -> list[Counter[str]]:
    s = re.sub(r"\s+", "", unicodedata.normalize("NFC", text))
    return [Counter(s[k : k + n] for k in range(len(s) - n + 1)) for n in range(1, max_n + 1)]


def _chrf_from_grams(hyp: list[Counter[str]], ref: list[Counter[str]], beta: float = 2.0) -> float:
    precs: list[float] = []
    recs: list[float] = []
    for h, r in zip(hyp, ref, strict=True):
        th, tr = sum(h.values()), sum(r.values())
        if th == 0 or tr == 0:
            continue
        match = sum((h & r).values())
        precs.append(match / th)
        recs.append(match / tr)
    if not precs:
        return 0.0
    prec, rec = sum(precs) / len(precs), sum(recs) / len(recs)
    if prec + rec == 0.0:
        return 0.0
    b2 = beta * beta
    return 100.0 * (1 + b2) * prec * rec / (b2 * prec + rec)


def chrf(hypothesis: str, reference: str, beta: float = 2.0) -> float:
    """chrF (Popović 2015): character 1-6-gram precision and recall averaged over orders, F-beta, 0-100, spaces
    removed. beta = 2 weighs recall, so a hypothesis that drops content the reference has scores low."""
    return _chrf_from_grams(_char_ngrams(hypothesis), _char_ngrams(reference), beta)


def _script_of(ch: str) -> str:
    try:
        return unicodedata.name(ch).split(" ", 1)[0]
    except ValueError:
        return "UNKNOWN"


def _copy_stats(source: str, candidate: str, source_lang: str) -> tuple[float, int, int]:
    """(share of candidate tokens that are source tokens, longest run of such tokens, candidate tokens).

    Tokens of at least three letters, normalised with the source language's rules so a copied ṁ/ṃ still matches.
    """
    norm = get_normaliser(source_lang)
    src_tokens = set(norm.word_tokens(source))
    cand = [t for t in norm.word_tokens(candidate) if len(t) >= 3]
    if not cand:
        return 0.0, 0, 0
    hits = [t in src_tokens for t in cand]
    run = best = 0
    for h in hits:
        run = run + 1 if h else 0
        best = max(best, run)
    return sum(hits) / len(hits), best, len(cand)


def _zlib_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    return len(zlib.compress(raw, 9)) / max(1, len(raw))


def candidate_flags(source: str, candidate: str, *, source_lang: str = "pli", target_lang: str = "en") -> list[Flag]:
    """Hard flags of one candidate: empty, copied source (whole or partial), wrong script, JSON debris, prompt echo,
    generation loop, unbalanced brackets. Candidate-only rules; no peers or embeddings needed."""
    flags: list[Flag] = []
    letters = letter_count(candidate)
    if letters == 0:
        return [Flag(rule="empty_output", severity="critical", detail="the candidate has no letters")]

    share, run, n_tok = _copy_stats(source, candidate, source_lang)
    if share >= _COPY_SHARE and n_tok >= 3:
        flags.append(
            Flag(
                rule="source_copy",
                severity="critical",
                detail=f"{share:.0%} of the candidate's {n_tok} words are words of the source text",
            )
        )
    elif run >= _COPY_RUN:
        flags.append(
            Flag(
                rule="partial_source_copy",
                severity="major",
                detail=f"{run} consecutive candidate words are copied from the source text",
            )
        )

    expected = _EXPECTED_SCRIPTS.get(target_lang.lower())
    if expected is not None and letters >= _MIN_LETTERS_SCRIPT:
        scripts = Counter(_script_of(ch) for ch in candidate if ch.isalpha())
        total = sum(scripts.values())
        in_script = sum(c for s, c in scripts.items() if s in expected)
        if total and in_script / total < _SCRIPT_SHARE:
            main_script = scripts.most_common(1)[0][0].lower()
            flags.append(
                Flag(
                    rule="wrong_script",
                    severity="critical",
                    detail=f"only {in_script / total:.0%} of letters are in the expected script; mostly {main_script}",
                )
            )

    for pattern in _JSON_DEBRIS:
        m = pattern.search(candidate)
        if m:
            flags.append(Flag(rule="json_debris", severity="major", detail=f"JSON or markup residue: {m.group(0)!r}"))
            break

    m = _PROMPT_ECHO.search(candidate)
    if m:
        flags.append(Flag(rule="prompt_echo", severity="major", detail=f"instruction or chat text: {m.group(0)!r}"))

    if len(candidate) >= _LOOP_MIN_CHARS and source.strip():
        rel = _zlib_ratio(candidate) / _zlib_ratio(source)
        if rel < _LOOP_RELATIVE_ZLIB:
            flags.append(
                Flag(
                    rule="repetition_loop",
                    severity="major",
                    detail=f"the candidate compresses {1 / rel:.1f}x better than its source: a repeated loop",
                )
            )

    unbalanced = [f"{o}{c}" for o, c in ("()", "[]", "{}") if candidate.count(o) != candidate.count(c)]
    unbalanced = [p for p in unbalanced if source.count(p[0]) == source.count(p[1])]
    if unbalanced:
        flags.append(Flag(rule="unbalanced_brackets", severity="minor", detail=f"unbalanced {' '.join(unbalanced)}"))
    return flags


def compute_signals(
    source: str,
    candidates: Sequence[str],
    *,
    source_lang: str = "pli",
    target_lang: str = "en",
    source_embedding: np.ndarray | None = None,
    candidate_embeddings: np.ndarray | None = None,
    candidate_models: Sequence[str] | None = None,
    length_model: LengthModel | None = None,
    novelty: SignalResult | None = None,
    source_space_embeddings: np.ndarray | None = None,
) -> list[CandidateSignals]:
    """All signals and flags for the candidates of one passage.

    ``source_space_embeddings`` are the candidates embedded with the same (multilingual) encoder as the source,
    when the peer signals use another (target-language) encoder; without them the source distance uses
    ``candidate_embeddings``.

    Embeddings are L2-normalised here (again) so cosine = dot. Every signal that cannot be computed is a
    ``SignalSkipped`` with a reason: no embeddings, one candidate only, no length model for the language pair.
    ``novelty`` is the source passage's novelty (same for every candidate), passed through so a risk model can
    use it; None means it was not looked up.
    """
    n = len(candidates)
    if candidate_models is not None and len(candidate_models) != n:
        raise ValueError(f"{n} candidates but {len(candidate_models)} model names")
    out = [
        CandidateSignals(
            signals={},
            flags=candidate_flags(source, c, source_lang=source_lang, target_lang=target_lang),
            model=None if candidate_models is None else candidate_models[i],
        )
        for i, c in enumerate(candidates)
    ]
    if n == 0:
        return out

    def put(name: str, values: Sequence[float] | np.ndarray, detail: Sequence[dict[str, object]] | None = None) -> None:
        for i, v in enumerate(values):
            out[i].signals[name] = SignalValue(value=float(v), detail={} if detail is None else detail[i])

    def skip(name: str, reason: str) -> None:
        for cs in out:
            cs.signals[name] = SignalSkipped(reason=reason)

    # --- embeddings: source distance and peer agreement
    cand_emb = None
    if candidate_embeddings is not None:
        cand_emb = _normalise_rows(np.asarray(candidate_embeddings, dtype=np.float64).reshape(n, -1))
    src_dist = None
    src_space = cand_emb
    if source_space_embeddings is not None:
        src_space = _normalise_rows(np.asarray(source_space_embeddings, dtype=np.float64).reshape(n, -1))
    if src_space is not None and source_embedding is not None:
        src = _normalise_rows(np.asarray(source_embedding, dtype=np.float64).ravel())
        src_dist = 1.0 - src_space @ src
        put("source_distance", src_dist)
    else:
        skip("source_distance", "not requested (check source_distance) or no source embedding")

    peer_names = [
        s
        for s in PEER_SIGNALS
        if not s.startswith("peer_length") and s not in ("peer_chrf_risk", "translator_peer_distance")
    ]
    if n < 2:
        for name in PEER_SIGNALS:
            skip(name, "needs at least two candidates of the same passage")
    elif cand_emb is None:
        for name in peer_names:
            skip(name, "no candidate embeddings")
    else:
        sims = cand_emb @ cand_emb.T
        dist = 1.0 - sims
        total = cand_emb.sum(axis=0)
        centroid_d = np.empty(n)
        for i in range(n):
            centroid = _normalise_rows(total - cand_emb[i])
            centroid_d[i] = 1.0 - float(cand_emb[i] @ centroid)
        put("peer_centroid_distance", centroid_d)
        off = ~np.eye(n, dtype=bool)
        peer_d = [dist[i][off[i]] for i in range(n)]
        put("peer_mean_distance", [float(d.mean()) for d in peer_d])
        k = min(_KNN_K, n - 1)
        put("peer_knn_distance", [float(np.sort(d)[:k].mean()) for d in peer_d])
        if n >= 3:
            put("peer_centroid_z", [_peer_z(centroid_d, i, _SD_FLOOR_DISTANCE) for i in range(n)])
        else:
            skip("peer_centroid_z", "needs at least three candidates (a spread of the other candidates)")
        if src_dist is None:
            skip("source_distance_peer_z", "no source embedding")
        elif n >= 3:
            put("source_distance_peer_z", [_peer_z(src_dist, i, _SD_FLOOR_DISTANCE) for i in range(n)])
        else:
            skip("source_distance_peer_z", "needs at least three candidates (a spread of the other candidates)")

    # --- peer agreement without embeddings: chrF and length among peers
    if n >= 2:
        grams = [_char_ngrams(c) for c in candidates]
        risk = []
        for i in range(n):
            scores = [_chrf_from_grams(grams[i], grams[j]) for j in range(n) if j != i]
            risk.append(1.0 - sum(scores) / len(scores) / 100.0)
        put("peer_chrf_risk", risk)
        loglen = np.log(np.maximum([letter_count(c) for c in candidates], 1).astype(np.float64))
        if n >= 3:
            z = np.array([_peer_z(loglen, i, _SD_FLOOR_LOG_LENGTH) for i in range(n)])
            put("peer_length_z", np.abs(z), [{"signed_z": float(v)} for v in z])
            put("peer_length_short_z", np.maximum(0.0, -z))
        else:
            skip("peer_length_z", "needs at least three candidates (a spread of the other candidates)")
            skip("peer_length_short_z", "needs at least three candidates (a spread of the other candidates)")

    # --- length ratio against the corpus's own translations
    src_letters = letter_count(source)
    if length_model is None:
        skip("length_ratio_z", f"no length model for {source_lang}-{target_lang}")
        skip("length_ratio_short_z", f"no length model for {source_lang}-{target_lang}")
    elif src_letters == 0:
        skip("length_ratio_z", "the source has no letters")
        skip("length_ratio_short_z", "the source has no letters")
    else:
        zs = []
        for c in candidates:
            lr = math.log(max(letter_count(c), 1) / src_letters)
            zs.append((lr - length_model.mean) / length_model.sd)
        put("length_ratio_z", [abs(z) for z in zs], [{"signed_z": z} for z in zs])
        put("length_ratio_short_z", [max(0.0, -z) for z in zs])

    # --- source copying as a graded signal (the flag catches the blatant cases)
    copy = [_copy_stats(source, c, source_lang) for c in candidates]
    put("source_copy_share", [s for s, _, _ in copy], [{"longest_run": r, "tokens": t} for _, r, t in copy])

    for cs in out:
        # batch-level: add_translator_signal fills it in when the caller scores many passages at once
        cs.signals.setdefault(
            "translator_peer_distance", SignalSkipped(reason="batch-level signal; needs add_translator_signal")
        )

    if novelty is None:
        skip("novelty", "source novelty was not looked up")
    else:
        for cs in out:
            cs.signals["novelty"] = novelty
    return out


def add_translator_signal(
    batch: Sequence[Sequence[CandidateSignals]],
    *,
    base: str = "peer_centroid_distance",
    name: str = "translator_peer_distance",
    min_passages: int = 20,
) -> None:
    """Batch-level signal, added in place: how far a translator (``CandidateSignals.model``) sits from its peers on
    average over the batch's passages.

    For every passage the ``base`` signal is centred on the passage median (so easy and hard passages weigh alike),
    then averaged per translator over the batch. Reference-free: it needs only peers and model names, no labels.
    A translator seen in fewer than ``min_passages`` passages, or a candidate without a model name, gets a skip
    with the reason (a mean over a handful of passages is noise).
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for passage in batch:
        vals = [(cs.model, cs.signals.get(base)) for cs in passage]
        got = [(m, r.value) for m, r in vals if m is not None and isinstance(r, SignalValue)]
        if len(got) < 2:
            continue
        med = float(np.median([v for _, v in got]))
        for m, v in got:
            sums[m] = sums.get(m, 0.0) + (v - med)
            counts[m] = counts.get(m, 0) + 1
    for passage in batch:
        for cs in passage:
            if cs.model is None:
                cs.signals[name] = SignalSkipped(reason="the candidate has no model name")
            elif counts.get(cs.model, 0) < min_passages:
                cs.signals[name] = SignalSkipped(
                    reason=f"{cs.model!r} has {base} in {counts.get(cs.model, 0)} passages of this batch; "
                    f"needs {min_passages}"
                )
            else:
                cs.signals[name] = SignalValue(
                    value=sums[cs.model] / counts[cs.model], detail={"passages": counts[cs.model], "base": base}
                )


def length_model_json(model: LengthModel) -> str:
    """Stable, readable JSON for the models/length/ file."""
    return json.dumps(msgspec.to_builtins(model), indent=2, sort_keys=True) + "\n"
