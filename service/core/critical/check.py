"""Critical-content checks: compare a candidate's numbers, names, negation, lists and terms with source and peers."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from service.core.critical.align import content_excess, negation_flips, term_swap, uncovered
from service.core.critical.coverage import COVERAGE_SIGNALS, PassageCoverage
from service.core.critical.extract import Content, Extractor, number_word
from service.core.critical.lexicon import load_lexicon
from service.core.critical.names import canon, edit_distance, nearest, spelling_budget
from service.core.critical.renderings import TranslationLexicon, load_translation_lexicon
from service.core.types import Flag, Severity, SignalSkipped, SignalValue, Span
from service.platform.errors import UnknownLanguage

__all__ = [
    "CHECKS",
    "DEFAULT_THRESHOLDS",
    "DEFAULT_THRESHOLDS_ALONE",
    "OFF",
    "SIGNALS",
    "VERSION",
    "CheckSpec",
    "CriticalChecker",
    "CriticalReport",
    "check_critical",
    "default_checker",
]

VERSION = "critical-3"
# Signal values lie in [0, 1]: a threshold above them never fires.
OFF = 2.0
# the value of name_spelling when the candidate spells a source name otherwise (it flags at that value)
NAME_SPELLING = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckSpec:
    """One critical-content signal: the flag rule it raises, when, and its part in ``critical_score``."""

    name: str
    rule: str
    severity: Severity
    threshold: float  # flags at or above this value when the candidate has peers
    threshold_alone: float  # ... and when it has none (only the source speaks)
    score_weight: float = 0.0  # weight in the combined critical_score; 0 = not part of it
    needs_peers: bool = False  # skipped (not zero) without peer translations
    # flags only a swap (its detail: something demanded is missing and something unbacked is there)
    flags_swaps_only: bool = False


# One record per signal, in the order a report lists them. Thresholds were chosen on untouched palibench-dev so that
# the union of flags stays under 5% of candidates (see bench/eval_critical.py) while injected errors still score
# near 1. Several signals raise one rule; a candidate gets at most one flag per rule, worded by the first record in
# this order that fires.
CHECKS: tuple[CheckSpec, ...] = (
    # Numbers and names are the most reliably extracted, hence the full weight in critical_score. Alone, an
    # unsupported number or name scores 0.9 and flags only together with a missing one (a swap, >= 0.95).
    CheckSpec(
        name="number_mismatch",
        rule="critical.number",
        severity="major",
        threshold=0.75,
        threshold_alone=0.95,
        score_weight=1.0,
    ),
    CheckSpec(
        name="name_mismatch",
        rule="critical.name",
        severity="major",
        threshold=0.9,
        threshold_alone=0.95,
        score_weight=1.0,
    ),
    # The source's name spelled otherwise (Raṭhapāla for raṭṭhapālo: edit distance on the folded form, after the
    # Pali/English equivalences of names.canon): worth a reviewer's glance, never a forced MAJOR.
    CheckSpec(
        name="name_spelling",
        rule="critical.name_spelling",
        severity="minor",
        threshold=NAME_SPELLING,
        threshold_alone=NAME_SPELLING,
    ),
    # Without peers, Pali-English negation counts disagree too often for a flag: the signal stays continuous (for a
    # risk model) and never flags alone. With peers the negation flag comes from negation_consensus (below).
    CheckSpec(
        name="negation_mismatch",
        rule="critical.negation",
        severity="major",
        threshold=OFF,
        threshold_alone=OFF,
        score_weight=0.9,
    ),
    # Off by default: even swap-shaped term differences fire on 2.7% of untouched dev candidates, which would break
    # the 5% budget; term_mismatch still feeds critical_score and risk models. Enable with
    # thresholds={"term_mismatch": 0.9}. Term renderings overlap too much for a one-sided difference to be worth a
    # reviewer's time, so only swaps flag. Alone, term counts disagree too often (as negation): never a flag.
    CheckSpec(
        name="term_mismatch",
        rule="critical.term",
        severity="minor",
        threshold=OFF,
        threshold_alone=OFF,
        score_weight=0.8,
        flags_swaps_only=True,
    ),
    CheckSpec(
        name="list_size_mismatch",
        rule="critical.list_size",
        severity="major",
        threshold=0.75,
        threshold_alone=0.95,
        score_weight=0.8,
    ),
    # The clause-aligned comparisons need peers (term_swap at least three); alone they are skipped, not zero.
    # The located flip is off: negation_consensus (its mean with negation_mismatch) raises critical.negation.
    CheckSpec(
        name="negation_flip",
        rule="critical.negation",
        severity="major",
        threshold=OFF,
        threshold_alone=OFF,
        needs_peers=True,
    ),
    # Fires on 1.7% of untouched dev candidates at 0.85, so it is off.
    CheckSpec(
        name="term_swap",
        rule="critical.term",
        severity="minor",
        threshold=OFF,
        threshold_alone=OFF,
        needs_peers=True,
    ),
    # Off: a verbose translation is longer too; added_content flags extra size only where no peer has the content.
    CheckSpec(
        name="content_excess",
        rule="critical.added_content",
        severity="major",
        threshold=OFF,
        threshold_alone=OFF,
        needs_peers=True,
    ),
    CheckSpec(
        name="omitted_content",
        rule="critical.omission",
        severity="major",
        threshold=OFF,
        threshold_alone=OFF,
        needs_peers=True,
    ),
    # Content that no peer covers and that makes the candidate longer than its peers (both at once: 0.6% of
    # untouched dev at 0.2).
    CheckSpec(
        name="added_content",
        rule="critical.added_content",
        severity="major",
        threshold=0.2,
        threshold_alone=OFF,
        needs_peers=True,
    ),
    # The mean of the clause-located flip share and the passage-level share of peers with more/fewer negators:
    # either alone is noisier at a low false-flag rate (at 0.5% of untouched dev, 15%/29% of injected drops/adds
    # for the flip, 19%/39% for the mean).
    CheckSpec(
        name="negation_consensus",
        rule="critical.negation",
        severity="major",
        threshold=0.8,
        threshold_alone=OFF,
        needs_peers=True,
    ),
)
# The translation lexicon's source-coverage signals (service/core/critical/coverage.py), compared with the peers;
# omission and addition read the source alone too (one candidate), the peers weighing in by their number.
CHECKS += (
    CheckSpec(
        name="source_omission",
        rule="critical.omission",
        severity="major",
        threshold=OFF,
        threshold_alone=OFF,
    ),
    CheckSpec(
        name="unlicensed_content",
        rule="critical.added_content",
        severity="major",
        threshold=OFF,
        threshold_alone=OFF,
    ),
    CheckSpec(
        name="term_substitution",
        rule="critical.substitution",
        severity="major",
        threshold=OFF,
        threshold_alone=OFF,
        needs_peers=True,
    ),
    # peers negating between the same words the candidate says straight on (or the other way round). A score term,
    # not a flag: at 0.6 (six of nine peers) it forced 1.3% of untouched dev candidates, and read against the Pali
    # none of a sample of its forced flags was right (a statement and its negation paired across clauses, "wrong
    # time" for "not the time"; bench/audit_forced.py, issue 34).
    CheckSpec(
        name="negation_context",
        rule="critical.negation",
        severity="major",
        threshold=OFF,
        threshold_alone=OFF,
        needs_peers=True,
    ),
    # three-word phrases most peers share that the candidate lacks (or has fewer times)
    CheckSpec(
        name="phrase_omission",
        rule="critical.omission",
        severity="major",
        threshold=OFF,
        threshold_alone=OFF,
        needs_peers=True,
    ),
    # truncation from the source alone: what only the source's last quarter says, rendered nowhere
    CheckSpec(
        name="source_tail_omission",
        rule="critical.omission",
        severity="major",
        threshold=OFF,
        threshold_alone=OFF,
    ),
)
SIGNALS = tuple(c.name for c in CHECKS)
PEER_ONLY = tuple(c.name for c in CHECKS if c.needs_peers)
# the peers' word on negation: vetoed where the source's own count sides with the candidate
PEER_NEGATION = tuple(c.name for c in CHECKS if c.needs_peers and c.rule == "critical.negation")
DEFAULT_THRESHOLDS: dict[str, float] = {c.name: c.threshold for c in CHECKS}
DEFAULT_THRESHOLDS_ALONE: dict[str, float] = {c.name: c.threshold_alone for c in CHECKS}
# A peer majority needs at least this many peers: with fewer, the source alone decides (one peer saying "three"
# against the source's and the candidate's "four" is that peer's error, not the candidate's), and the peer-only
# signals score but do not flag.
MIN_PEERS = 3
# An English word that renders some other term is weak evidence (renderings overlap: "good" for kusala and
# puñña); a source term that the candidate alone does not render is the stronger one.
TERM_EXTRA_WEIGHT = 0.6


class CriticalReport(msgspec.Struct, forbid_unknown_fields=True):
    """Signals (raw, in [0, 1], higher = riskier) and the flags that fired, each worded for a reviewer."""

    signals: dict[str, SignalValue | SignalSkipped]
    flags: list[Flag]
    peers: int
    version: str = VERSION


class _Finding:
    __slots__ = ("kind", "label", "risk", "spans", "who")

    def __init__(self, risk: float, kind: str, label: str, who: str, spans: Sequence[tuple[int, int]] = ()) -> None:
        self.risk = risk
        self.kind = kind  # "extra": the candidate has it, "missing": the candidate lacks it
        self.label = label
        self.who = who
        self.spans = spans  # where the candidate says it (an "extra" item); nothing for a missing one


def _compare_sets(
    cand: set[Any],
    source: set[Any],
    peers: Sequence[set[Any]],
    label: Callable[[Any], str],
    *,
    extra_alone: float,
    missing_alone: float,
    extra_weight: float = 1.0,
    cand_weak: Iterable[Any] = (),
    source_backs: Callable[[Any], bool] = lambda v: False,
    source_speaks: bool = False,
    peers_weak: Sequence[set[Any]] = (),
    where: Callable[[Any], Sequence[tuple[int, int]]] = lambda v: (),
) -> list[_Finding]:
    """Items the candidate adds or drops, scored by how source and peers back them.

    ``source`` holds the items the source states (it demands them); ``source_backs`` accepts an item the source does
    not state but does not contradict either. ``source_speaks``: the source states items of this kind, so an item it
    neither states nor backs is one it contradicts, and no peer majority demands it. ``cand_weak`` holds the
    candidate's weak forms: they answer a demand but are not claims of their own; ``peers_weak`` (aligned with
    ``peers``) the peers' weak forms: they vote for an item but never make a demand ("both" is no "two").
    Alone, or with fewer than ``MIN_PEERS`` peers (the source alone decides), an unbacked item scores
    ``extra_alone``, a missing one ``missing_alone``.
    """
    n = len(peers) if len(peers) >= MIN_PEERS else 0
    said = [p | w for p, w in zip(peers, peers_weak, strict=True)] if peers_weak else peers

    def votes(v: Any) -> int:
        return sum(1 for p in said if v in p)

    found: list[_Finding] = []
    weak = set(cand_weak)
    for v in cand:
        if v in source or source_backs(v):
            continue
        k = votes(v) if n else 0
        if n:
            # Alone among peers (and unsupported by the source) is suspect; backed by half the peers is not.
            risk = extra_weight * max(0.0, 1.0 - 2.0 * k / n)
            who = f"not in the source, {k}/{n} peers"
        else:
            risk = extra_alone
            who = "not in the source"
        found.append(_Finding(risk, "extra", label(v), who, where(v)))
    demanded = set(source)
    if n:
        # A clear peer majority also demands an item the source is silent on (source extraction can miss a form,
        # eight translators rarely do), never one the source contradicts.
        pool: set[Any] = set()
        for p in peers:
            pool |= p
        for v in pool:
            if v in demanded or (source_speaks and not source_backs(v)):
                continue
            if votes(v) >= 0.75 * n:
                demanded.add(v)
    for v in demanded:
        if v in cand or v in weak:
            continue
        in_src = v in source
        if n:
            k = votes(v)
            frac = k / n
            risk = frac if in_src else 0.85 * frac
            who = ("source and " if in_src else "") + f"{k}/{n} peers say"
        else:
            risk = missing_alone if in_src else 0.0
            who = "source says"
        if risk > 0:
            found.append(_Finding(risk, "missing", label(v), who))
    return found


def _signal(findings: list[_Finding], what: str) -> SignalValue:
    if not findings:
        return SignalValue(value=0.0)
    # ties in reading order of kind and label, not set order (which changes between processes)
    findings.sort(key=lambda f: (-f.risk, f.kind, f.label))
    # The worst item decides; further items add a little so two errors outrank one.
    value = min(1.0, findings[0].risk + 0.1 * sum(f.risk for f in findings[1:]))
    missing = [f for f in findings if f.kind == "missing" and f.risk >= 0.3]
    extra = [f for f in findings if f.kind == "extra" and f.risk >= 0.3]
    parts = [f"{f.who} {f.label}" for f in missing[:2]]
    if extra:
        says = ", ".join(f"{f.label} ({f.who})" for f in extra[:2])
        parts.append(f"candidate says {says}")
    elif missing:
        parts.append("candidate does not")
    text = f"{what}: " + "; ".join(parts) if parts else f"{what}: minor differences"
    # A swap (something demanded is missing and something unsupported is there) is the signature of a real error.
    swap = any(f.risk >= 0.85 for f in missing) and any(f.risk >= 0.55 for f in extra)
    return SignalValue(
        value=round(value, 4),
        detail={
            "summary": text,
            "swap": swap,
            "items": [{"kind": f.kind, "item": f.label, "risk": round(f.risk, 3)} for f in findings[:6]],
            "spans": sorted({sp for f in extra[:2] for sp in f.spans}),
        },
    )


def spans_of(signal: SignalValue) -> tuple[Span, ...]:
    """The spans a signal's detail carries (``"spans": [[start, end], ...]``) as the flag's spans."""
    raw = signal.detail.get("spans")
    if not isinstance(raw, list | tuple):
        return ()
    return tuple(Span(start=int(a), end=int(b)) for a, b in raw)


def _critical_score(sig: dict[str, SignalValue | SignalSkipped]) -> float:
    """The weighted signals combined like independent risks: one minus the product of (1 - weight * value)."""
    keep = 1.0
    for c in CHECKS:
        s = sig[c.name]
        if c.score_weight and isinstance(s, SignalValue):
            keep *= 1.0 - c.score_weight * s.value
    return round(1.0 - keep, 4)


def _flags(
    sig: dict[str, SignalValue | SignalSkipped], limits: dict[str, float], vetoed: Iterable[str] = ()
) -> list[Flag]:
    """The rules that fired, each once, in table order and worded by the first of its signals that fired;
    ``vetoed`` signals (peer demands the source contradicts) score but never flag."""
    flags: list[Flag] = []
    fired: set[str] = set()
    skip = set(vetoed)
    for c in CHECKS:
        s = sig[c.name]
        if c.rule in fired or c.name in skip or not isinstance(s, SignalValue):
            continue
        if s.value >= limits[c.name] and (s.detail.get("swap") or not c.flags_swaps_only):
            summary = str(s.detail.get("summary", c.name))
            flags.append(Flag(rule=c.rule, severity=c.severity, detail=summary, spans=spans_of(s)))
            fired.add(c.rule)
    return flags


class CriticalChecker:
    """Loads the lexicon once; ``check`` scores one candidate, ``check_passage`` all candidates of a passage."""

    def __init__(
        self,
        data_dir: Path | None = None,
        thresholds: dict[str, float] | None = None,
        thresholds_alone: dict[str, float] | None = None,
        *,
        translation: TranslationLexicon | Path | bool | None = None,
    ) -> None:
        """``translation``: the translation lexicon (or its artifact's path); None = the models directory's,
        loaded on first use; False = none (the coverage signals read skipped)."""
        self.lexicon = load_lexicon(data_dir)
        self._translation = translation
        self.extractor = Extractor(self.lexicon)
        self.thresholds = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
        self.thresholds_alone = {**DEFAULT_THRESHOLDS_ALONE, **(thresholds_alone or {})}
        self._name_display: dict[str, str] = {}
        for form, key in self.lexicon.names.names.items():
            self._name_display.setdefault(key, form)
        self._signature = {
            "version": VERSION,
            "glossary": self.lexicon.glossary.version,
            "names": self.lexicon.names.version,
            "terms": len(self.lexicon.glossary.terms),
        }

    @property
    def translation(self) -> TranslationLexicon | None:
        """The translation lexicon, read once (a missing artifact reads as none: the coverage signals skip)."""
        if self._translation is None or isinstance(self._translation, Path):
            path = self._translation
            try:
                self._translation = load_translation_lexicon(path)
            except FileNotFoundError:
                self._translation = False
        return self._translation if isinstance(self._translation, TranslationLexicon) else None

    @property
    def signature(self) -> dict[str, Any]:
        lex = self.translation
        return {**self._signature, "lexicon": lex.id if lex is not None else None}

    def _coverage(self, source: str, texts: Sequence[str]) -> list[dict[str, SignalValue | SignalSkipped]]:
        lex = self.translation
        if lex is None:
            skip = SignalSkipped(reason="no translation lexicon (build it: trisk build-lexicon)")
            return [dict.fromkeys(COVERAGE_SIGNALS, skip) for _ in texts]
        cov = PassageCoverage(lex, source, texts)
        return [cov.signals(i) for i in range(len(texts))]

    def _extract(self, text: str, lang: str) -> Content:
        if lang == "pli":
            return self.extractor.pali(text)
        if lang == "en":
            return self.extractor.english(text)
        raise UnknownLanguage(f"critical-content checks know pli and en, not {lang!r}")

    def check(
        self, source: str, candidate: str, peers: Sequence[str] = (), src_lang: str = "pli", tgt_lang: str = "en"
    ) -> CriticalReport:
        if src_lang != "pli" or tgt_lang != "en":
            return self._skipped(f"critical-content checks cover pli -> en only, not {src_lang} -> {tgt_lang}")
        src = self._extract(source, src_lang)
        coverage = self._coverage(source, [candidate, *peers])[0]
        return self._report(
            src, self._extract(candidate, tgt_lang), [self._extract(p, tgt_lang) for p in peers], coverage
        )

    def check_passage(
        self, source: str, candidates: Sequence[str], src_lang: str = "pli", tgt_lang: str = "en"
    ) -> list[CriticalReport]:
        """Every candidate against the source and the other candidates as peers (each text extracted once)."""
        if src_lang != "pli" or tgt_lang != "en":
            reason = f"critical-content checks cover pli -> en only, not {src_lang} -> {tgt_lang}"
            return [self._skipped(reason) for _ in candidates]
        src = self._extract(source, src_lang)
        ext = [self._extract(c, tgt_lang) for c in candidates]
        coverage = self._coverage(source, candidates)
        return [self._report(src, e, ext[:i] + ext[i + 1 :], coverage[i]) for i, e in enumerate(ext)]

    def _skipped(self, reason: str) -> CriticalReport:
        sig: dict[str, SignalValue | SignalSkipped] = {s: SignalSkipped(reason=reason) for s in SIGNALS}
        sig["critical_score"] = SignalSkipped(reason=reason)
        return CriticalReport(signals=sig, flags=[], peers=0)

    def _report(
        self, src: Content, cand: Content, peers: list[Content], coverage: dict[str, SignalValue | SignalSkipped]
    ) -> CriticalReport:
        n = len(peers)
        name, spelling = self._names(src, cand, peers)
        found: dict[str, SignalValue | SignalSkipped] = {
            "number_mismatch": self._numbers(src, cand, peers),
            "name_mismatch": name,
            "name_spelling": spelling,
            "negation_mismatch": self._negation(src, cand, peers),
            "term_mismatch": self._terms(src, cand, peers),
            "list_size_mismatch": self._list_sizes(src, cand, peers),
            **self._aligned(cand, peers),
        }
        found["negation_consensus"] = self._negation_consensus(found)
        found.update(coverage)
        sig = {s: found[s] for s in SIGNALS}  # in the table's order
        sig["critical_score"] = SignalValue(value=_critical_score(sig), detail={"peers": n})
        limits = self.thresholds if n >= MIN_PEERS else self.thresholds_alone
        vetoed = PEER_NEGATION if _source_negates_as(src, cand, peers) else ()
        return CriticalReport(signals=sig, flags=_flags(sig, limits, vetoed), peers=n)

    def _numbers(self, src: Content, cand: Content, peers: list[Content]) -> SignalValue:
        found = _compare_sets(
            set(cand.numbers),
            set(src.numbers),
            [set(p.numbers) for p in peers],
            number_word,
            extra_alone=0.9,
            missing_alone=0.6,
            cand_weak=cand.numbers_weak,
            source_backs=lambda v: v in src.numbers_weak,
            source_speaks=bool(src.numbers),
            peers_weak=[p.numbers_weak for p in peers],
            where=lambda v: cand.where("number", v),
        )
        return _signal(found, "number")

    def _source_names(self, src: Content) -> tuple[str, dict[str, str], dict[str, str]]:
        """The source's canonical text, the forms a name may be a spelling of (canonical -> the source's word) and
        its name keys by canonical form; once per source (a passage's candidates share its Content)."""
        if src.name_forms is None:
            # its name keys, and the stems of words the name lexicon does not know (a known name's inflections,
            # uggassa, are that name, not a spelling to compare with)
            known = self.lexicon.names.pali_forms
            forms = {canon(stem): tok for stem, tok in src.stems.items() if tok not in known}
            forms |= {canon(k): k for k in src.names}
            src.name_forms = (canon(src.folded), forms, {canon(k): k for k in src.names})
        return src.name_forms

    def _names(self, src: Content, cand: Content, peers: list[Content]) -> tuple[SignalValue, SignalValue]:
        """``name_mismatch`` (another name, or a name lost) and ``name_spelling`` (the source's name spelled
        otherwise), compared on the transliterated, diacritics-folded form (``names.canon``)."""
        src_text, src_forms, src_keys = self._source_names(src)

        def inside(ck: str) -> bool:
            # the source says it, in a compound (gosiṅgasālavana: "Sāla") or inflected
            return len(ck) >= 3 and ck in src_text

        def derived(ck: str) -> bool:
            # an English word made from a source word's stem (venāgapurikā: "Venāgapuran")
            return ck.endswith(_EN_DERIVED) and any(_common_prefix(ck, f) >= max(5, len(ck) - 3) for f in src_forms)

        def backs(k: object) -> bool:
            # Lenient on purpose: a name the source says, or a word made from one, is not an addition.
            if not isinstance(k, str):
                return True
            ck = canon(k)
            return inside(ck) or derived(ck) or any(_common_prefix(ck, f) >= max(5, len(ck) - 2) for f in src_forms)

        def aligned(c: Content) -> set[str]:
            # "Moggallāna" renders mahāmoggallāno: a name inside a source name (or around it) is that name.
            got = c.names | c.names_unknown
            return got | {sk for sk in src.names for ck in got if len(ck) >= 5 and (ck in sk or sk in ck)}

        def label(k: object) -> str:
            # the word as it stands on the candidate's (or a peer's) page, else the lexicon's form
            for c in (cand, *peers):
                if ("name", k) in c.surface:
                    return c.surface[("name", k)]
            return self._name_label(str(k))

        got = aligned(cand)
        peer_sets = [aligned(p) for p in peers]
        # A name written without diacritics (Ratthapala, Mara) is not read as an unknown name: its letters answer
        # the demand of the same name in the source or the peers.
        words = {canon(w) for w in cand.folded.split()}
        pool = set(src.names).union(*peer_sets)
        for d in pool - got:
            cd = canon(d)
            if len(cd) >= 3 and any(w.startswith(cd) and len(w) <= len(cd) + 3 for w in words):
                got.add(d)
        spelled: list[tuple[str, str, str]] = []  # (candidate key, the word on the page, the source's word)
        for k in sorted(got):
            ck = canon(k)
            # a name the lexicon knows as another person's (Uggaha, not Ugga) is another name, not a spelling
            if k in src.names or inside(ck) or derived(ck) or (k in cand.names and k not in src_forms.values()):
                continue
            hit = nearest(ck, src_forms)
            if hit is None:
                continue
            got.discard(k)
            # the source's name spelled otherwise: its demand (the source's or the peers') is answered
            got |= {d for d in pool if edit_distance(ck, canon(d), 2) <= spelling_budget(ck)}
            if hit[0] in src_keys:
                got.add(src_keys[hit[0]])
            if hit[1]:  # distance 0: the other edition's spelling of the same name (Setavyā / setabyaṃ)
                spelled.append((k, label(k), src_forms[hit[0]]))
        found = _compare_sets(
            got,
            src.names,
            peer_sets,
            label,
            extra_alone=0.9,
            missing_alone=0.5,
            source_backs=backs,
            source_speaks=bool(src.names),
            where=lambda k: cand.where("name", k),
        )
        if not spelled:
            return _signal(found, "name"), SignalValue(value=0.0)
        said = ", ".join(f"\u201c{word}\u201d for the source's {pali}" for _, word, pali in spelled[:2])
        spelling = SignalValue(
            value=NAME_SPELLING,
            detail={
                "summary": f"name spelling: {said}",
                "spans": sorted({sp for k, _, _ in spelled[:2] for sp in cand.where("name", k)}),
            },
        )
        return _signal(found, "name"), spelling

    def _terms(self, src: Content, cand: Content, peers: list[Content]) -> SignalValue:
        found = _compare_sets(
            set(cand.terms),
            set(src.terms),
            [set(p.terms) for p in peers],
            lambda t: f"{t} ({'/'.join(self.lexicon.glossary.terms[str(t)].renderings[:3])})",
            extra_alone=0.5 * TERM_EXTRA_WEIGHT,
            missing_alone=0.6,
            extra_weight=TERM_EXTRA_WEIGHT,
            where=lambda t: cand.where("term", t),
        )
        return _signal(found, "term")

    def _list_sizes(self, src: Content, cand: Content, peers: list[Content]) -> SignalValue:
        found = _compare_sets(
            cand.lists,
            src.lists,
            [p.lists for p in peers],
            lambda v: f"a list of {number_word(v)}",
            extra_alone=0.8,
            missing_alone=0.0,
            cand_weak=cand.listed,  # a list that lists six items says six, whether or not it names the number
            source_backs=lambda v: v in src.numbers,
            source_speaks=bool(src.numbers),
            where=lambda v: cand.where("list", v),
        )
        return _signal(found, "list size")

    def _aligned(self, cand: Content, peers: list[Content]) -> dict[str, SignalValue | SignalSkipped]:
        """The clause-aligned peer comparisons: located negation flips, doctrinal-term swaps, added content."""
        out: dict[str, SignalValue | SignalSkipped] = {}
        n = len(peers)
        cp = cand.clauses
        pp = [p.clauses for p in peers if p.clauses is not None]
        if cp is None or not pp:
            reason = "needs peer translations of the same passage"
            return {s: SignalSkipped(reason=reason) for s in PEER_ONLY}
        dropped, added = negation_flips(cp, pp)
        worst = max((f for f in (dropped, added) if f is not None), key=lambda f: f.share, default=None)
        if worst is None:
            out["negation_flip"] = SignalValue(value=0.0)
        else:
            k = round(worst.share * n)
            said = f" ({', '.join(worst.words)})" if worst.words else ""
            clause = _clip(worst.clause)
            if worst is dropped:
                text = f"negation: {k}/{n} peers negate{said} where the candidate does not: \u201c{clause}\u201d"
            else:
                text = f"negation: the candidate negates{said} where {k}/{n} peers do not: \u201c{clause}\u201d"
            out["negation_flip"] = SignalValue(
                value=round(worst.share, 4),
                detail={
                    "summary": text,
                    "dropped": 0.0 if dropped is None else round(dropped.share, 4),
                    "added": 0.0 if added is None else round(added.share, 4),
                    "spans": [list(worst.span)],
                },
            )
        if n < 3:
            out["term_swap"] = SignalSkipped(reason="needs at least three peer translations")
        else:
            value, what, places = term_swap(cp, pp, self.extractor.rendering)
            detail: dict[str, object] = {}
            if what:
                old, new = what.split(" -> ")
                detail["summary"] = (
                    f"term: most peers say \u201c{old}\u201d, the candidate never does and says \u201c{new}\u201d"
                )
                detail["spans"] = [list(sp) for sp in places]
            out["term_swap"] = SignalValue(value=round(value, 4), detail=detail)
        omitted, extra = uncovered(cp, pp)
        excess = content_excess(cp, pp)
        out["content_excess"] = SignalValue(
            value=round(excess, 4),
            detail={"summary": f"added content: {excess:.0%} more content words than the peers' median"}
            if excess > 0
            else {},
        )
        det: dict[str, object] = {"peers_with_gap": omitted.peers_with}
        if omitted.share > 0 and omitted.example:
            det["spans"] = [list(omitted.span)] if omitted.span else []
            det["summary"] = (
                f"omission: {omitted.peers_with}/{n} peers have content the candidate does not cover, "
                f"e.g. \u201c{_clip(omitted.example)}\u201d"
            )
        out["omitted_content"] = SignalValue(value=round(omitted.share, 4), detail=det)
        # Added content must be both unmatched by the peers and extra in size: a verbose translation is longer
        # but matched, a differently split one unmatched in places but not longer; an added sentence is both.
        added_share = min(extra.share, excess)
        det = {"unmatched": round(extra.share, 4), "excess": round(excess, 4), "peers_with_gap": extra.peers_with}
        if added_share > 0 and extra.example:
            det["spans"] = [list(extra.span)] if extra.span else []
            det["summary"] = (
                f"addition: {excess:.0%} more content than the peers, and content no peer has "
                f"({extra.peers_with}/{n} peers), e.g. \u201c{_clip(extra.example)}\u201d"
            )
        out["added_content"] = SignalValue(value=round(added_share, 4), detail=det)
        return out

    @staticmethod
    def _negation_consensus(sig: dict[str, SignalValue | SignalSkipped]) -> SignalValue | SignalSkipped:
        """Mean of the located flip share and the passage-level peer share, explained by the larger of the two."""
        flip, count = sig.get("negation_flip"), sig.get("negation_mismatch")
        if not isinstance(flip, SignalValue):
            return flip if isinstance(flip, SignalSkipped) else SignalSkipped(reason="needs peer translations")
        if not isinstance(count, SignalValue):
            return SignalSkipped(reason="no passage-level negation count")
        lead = flip if flip.value >= count.value and flip.detail.get("summary") else count
        detail: dict[str, object] = {"flip": flip.value, "count": count.value}
        for key in ("summary", "spans"):
            if key in lead.detail:
                detail[key] = lead.detail[key]
        return SignalValue(value=round((flip.value + count.value) / 2, 4), detail=detail)

    def _name_label(self, key: str) -> str:
        return self._name_display.get(key, key).capitalize()

    def _negation(self, src: Content, cand: Content, peers: list[Content]) -> SignalValue:
        n = len(peers)
        c = cand.neg
        if n:
            counts = [p.neg for p in peers]
            med = statistics.median(counts)
            more = sum(1 for x in counts if x > c)
            less = sum(1 for x in counts if x < c)
            if more == less == 0:
                return SignalValue(value=0.0, detail={"candidate": c, "peer_median": med})
            # The share of peers on one side of the candidate ranks best (bench/eval_critical.py); the size of the
            # gap only breaks ties.
            frac = max(more, less) / n
            risk = 0.97 * frac + 0.01 * min(abs(med - c), 3.0)
            if more >= less:
                text = f"{more}/{n} peers have more negations than the candidate ({c} vs peer median {med:g})"
            else:
                text = f"{less}/{n} peers have fewer negations than the candidate ({c} vs peer median {med:g})"
            # Where the source's own count sides with the candidate, the peers may be the odd ones out.
            if (more >= less and src.neg + src.neg_weak <= c) or (less > more and src.neg >= c):
                risk *= 0.8
            return SignalValue(
                value=round(risk, 4),
                detail={"summary": f"negation: {text}", "candidate": c, "peer_median": med, "source": src.neg},
            )
        s = src.neg
        lo, hi = s, s + src.neg_weak
        if lo <= c <= hi:
            return SignalValue(value=0.0, detail={"candidate": c, "source": s})
        gap = lo - c if c < lo else c - hi
        # English often splits or merges negations (impermanent vs not permanent): one off is weak evidence.
        risk = min(1.0, gap / (1.0 + 0.25 * max(lo, c)))
        word = "fewer" if c < lo else "more"
        return SignalValue(
            value=round(risk, 4),
            detail={
                "summary": f"negation: candidate has {word} negations ({c}) than the source ({s})",
                "candidate": c,
                "source": s,
            },
        )


def _source_negates_as(src: Content, cand: Content, peers: Sequence[Content]) -> bool:
    """The source's negator count sides with the candidate's and against the peers' median: the peers' negation
    demand is one the source contradicts."""
    lo, hi = src.neg, src.neg + src.neg_weak
    if not peers or not lo <= cand.neg <= hi:
        return False
    med = statistics.median(p.neg for p in peers)
    return not lo <= med <= hi


# endings of English words made from a name (Venāgapuran, Licchavian, Benaresian, Kosalans)
_EN_DERIVED = ("an", "ans", "ian", "ite", "ites", "ese")


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_default: CriticalChecker | None = None


def default_checker() -> CriticalChecker:
    """A process-wide checker over models/critical/ (loaded on first use)."""
    global _default
    if _default is None:
        _default = CriticalChecker()
    return _default


def check_critical(
    source: str, candidate: str, peers: Sequence[str] = (), src_lang: str = "pli", tgt_lang: str = "en"
) -> CriticalReport:
    """Check one candidate against its source and (optionally) peer translations of the same passage."""
    return default_checker().check(source, candidate, peers, src_lang, tgt_lang)
