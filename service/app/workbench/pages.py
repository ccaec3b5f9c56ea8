"""What the pages show, built from the typed answers of the review, calibration and batch services: findings with
their highlights on the texts, the clause-aligned table, signals, risk, budget and judge answers in words.

Pure functions of service output (no storage access): the templates only lay these out.
"""

from __future__ import annotations

import itertools
import math
import time
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.app.review.schemas import ReviewItemOut
from service.core.critical.align import clause_rows, parse
from service.core.critical.locate import Highlights, Span, locate
from service.core.findings import Finding as ListedFinding
from service.core.judges.llm import CandidateChecks
from service.core.types import SignalSkipped, SignalValue

__all__ = [
    "SEVERITY_ORDER",
    "Finding",
    "ItemPage",
    "Piece",
    "ago",
    "budget_words",
    "item_page",
    "pct",
    "pieces",
    "signal_words",
]

SEVERITY_ORDER = {"critical": 0, "major": 1, "minor": 2, "info": 3}

# what each signal measures, for a reviewer; a name missing here is shown as it is
SIGNAL_WORDS: dict[str, str] = {
    "source_distance": "distance from the source (multilingual embedding)",
    "source_distance_peer_z": "distance from the source, against the peers",
    "peer_centroid_distance": "distance from the peers' centre (embedding)",
    "peer_centroid_z": "distance from the peers' centre, z-scored",
    "peer_mean_distance": "mean distance to each peer",
    "peer_knn_distance": "distance to the nearest peers",
    "peer_chrf_risk": "disagreement with the peers' wording (chrF)",
    "peer_length_z": "length against the peers",
    "peer_length_short_z": "shortness against the peers",
    "length_ratio_z": "length against the corpus's own translations",
    "length_ratio_short_z": "shortness against the corpus's own translations",
    "source_copy_share": "share of words copied from the source",
    "translator_peer_distance": "this translator's usual distance from its peers",
    "novelty": "how unusual the source passage is in the corpus",
    "number_mismatch": "numbers against source and peers",
    "name_mismatch": "names against source and peers",
    "name_spelling": "a source name spelled otherwise",
    "negation_mismatch": "negation count against source and peers",
    "term_mismatch": "doctrinal terms against source and peers",
    "list_size_mismatch": "list sizes against source and peers",
    "negation_flip": "a negation flipped at one clause",
    "term_swap": "a doctrinal term swapped for another",
    "content_excess": "content beyond the peers' length",
    "omitted_content": "content the peers have and the candidate lacks",
    "added_content": "content no peer has",
    "negation_consensus": "negation: clause and passage evidence together",
    "critical_score": "critical-content checks combined",
    "gemba_mean_risk": "LLM judges' risk (100 - GEMBA score)",
    "backtranslation_chrf_risk": "back-translation's distance from the source (chrF)",
}
TIER_WORDS = {
    "top_1": "top 1%",
    "top_5": "top 5%",
    "top_10": "top 10%",
    "top_20": "top 20%",
    "rest": "below the top 20%",
}
# a judge's answer in words, by its status; a status not listed reads as its own name
JUDGE_STATUS_WORDS = {
    "valid": "answered",
    "invalid": "gave an answer that did not parse: no score recorded",
    "wrong_scale": "answered on the wrong scale: no score recorded",
    "timed_out": "did not answer before the deadline",
    "failed": "could not be reached",
    "skipped": "was not asked",
}
CHECK_STATUS_WORDS = {
    "planned": "planned",
    "ran": "ran",
    "skipped": "skipped",
    "failed": "failed",
    "timed_out": "timed out",
}


def pct(x: float | None, digits: int = 0) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x * 100:.{digits}f}%"


def ago(t: float | None, now: float | None = None) -> str:
    if t is None:
        return "–"
    s = max(0, int((time.time() if now is None else now) - t))
    if s < 90:
        return f"{s} s ago"
    if s < 5400:
        return f"{s // 60} min ago"
    if s < 172800:
        return f"{s // 3600} h ago"
    return f"{s // 86400} days ago"


def budget_words(tier: str | None, percentile: float | None, forced: bool) -> str:
    if tier is None:
        return "not ranked yet"
    words = TIER_WORDS.get(tier, tier)
    if forced:
        return f"{words}: forced above every unflagged candidate"
    return f"{words} (percentile {percentile:.1f})" if percentile is not None else words


def signal_words(name: str) -> str:
    return SIGNAL_WORDS.get(name, name.replace("_", " "))


@dataclass
class Piece:
    """A run of text, with the findings (their numbers) that mark it."""

    text: str
    marks: tuple[int, ...] = ()
    severity: str = ""


def pieces(text: str, marked: Sequence[tuple[Span, int, str]], lo: int = 0, hi: int | None = None) -> list[Piece]:
    """``text[lo:hi]`` cut where highlights start and end; each piece lists the findings over it (by number) and
    the gravest severity among them."""
    hi = len(text) if hi is None else hi
    cuts = {lo, hi}
    for (s, e), _, _ in marked:
        if e > lo and s < hi:
            cuts.add(max(lo, s))
            cuts.add(min(hi, e))
    edges = sorted(cuts)
    out: list[Piece] = []
    for a, b in itertools.pairwise(edges):
        over = [(n, sev) for (s, e), n, sev in marked if s <= a and e >= b]
        if over:
            grave = min((sev for _, sev in over), key=lambda v: SEVERITY_ORDER.get(v, 9))
            out.append(Piece(text[a:b], tuple(sorted({n for n, _ in over})), grave))
        else:
            out.append(Piece(text[a:b]))
    return out


@dataclass
class Finding:
    """A finding as the reviewer reads it: its number (the highlight's key), its id (what her judgement of it
    names), wording and where it is marked."""

    number: int
    id: str
    rule: str
    severity: str
    detail: str
    highlights: Highlights
    where: str  # "marked in the candidate", "marked in the peers", or why nothing is marked


@dataclass
class Cell:
    pieces: list[Piece]
    matched: bool = True


@dataclass
class Row:
    candidate: Cell | None
    peers: list[Cell | None]
    omitted: bool = False  # no candidate clause beside these peer clauses


@dataclass
class JudgeLine:
    who: str
    words: str
    detail: str = ""


@dataclass
class ItemPage:
    detail: ReviewItemOut
    source_text: str
    candidate_text: str
    candidate_pieces: list[Piece]
    peer_texts: list[str]
    peer_names: list[str]
    findings: list[Finding]
    rows: list[Row]
    signals: list[tuple[str, str, str, str]]  # name, words, value or reason, contribution to the risk score
    judges: list[JudgeLine]
    checks: list[str]
    verdict_counts: dict[str, int] = field(default_factory=dict)


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _findings(listed: Iterable[ListedFinding], candidate: str, peers: Sequence[str]) -> list[Finding]:
    out = []
    ordered = sorted(listed, key=lambda f: SEVERITY_ORDER.get(f.severity, 9))
    for n, found in enumerate(ordered, 1):
        flag = found.flag()
        hl = locate(flag, candidate, peers)
        if hl.candidate:
            where = "marked in the candidate"
        elif any(hl.peers):
            where = "marked in the peers that have it"
        else:
            where = "no single place to mark: it is about the passage as a whole"
        out.append(Finding(n, found.id, flag.rule, flag.severity, flag.detail, hl, where))
    return out


def _rows(candidate: str, peers: Sequence[str], findings: Sequence[Finding]) -> list[Row]:
    cmarks = [(s, f.number, f.severity) for f in findings for s in f.highlights.candidate]
    pmarks = [[(s, f.number, f.severity) for f in findings for s in f.highlights.peers[k]] for k in range(len(peers))]
    out = []
    for r in clause_rows(parse(candidate), [parse(p) for p in peers]):
        cand = None if r.candidate is None else Cell(pieces(candidate, cmarks, *r.candidate))
        cells: list[Cell | None] = []
        for k, span in enumerate(r.peers):
            cells.append(None if span is None else Cell(pieces(peers[k], pmarks[k], *span), r.matched[k]))
        out.append(Row(cand, cells, omitted=r.candidate is None))
    return out


def _signal_rows(detail: ReviewItemOut) -> list[tuple[str, str, str, str]]:
    components = detail.risk.components if detail.risk is not None else {}
    rows = []
    # what moved the risk score first (largest part first), then the rest by name
    order = sorted(detail.signals, key=lambda n: (-abs(components.get(n, 0.0)), n not in components, n))
    for name in order:
        sig = detail.signals[name]
        if isinstance(sig, SignalValue):
            value = f"{sig.value:.3f}"
        elif isinstance(sig, SignalSkipped):
            value = f"skipped: {sig.reason}"
        else:
            value = "–"
        part = components.get(name)
        rows.append((name, signal_words(name), value, "" if part is None else f"{part:+.2f}"))
    return rows


def _judge_lines(answers: CandidateChecks | None, detail: ReviewItemOut) -> tuple[list[JudgeLine], list[str]]:
    """Each judge's answer in words (from the typed results), and how each LLM check of this candidate ended."""
    lines: list[JudgeLine] = []
    checks: list[str] = []
    if answers is not None:
        for c in answers.checks:
            words = CHECK_STATUS_WORDS.get(c.status, c.status.replace("_", " "))
            checks.append(f"{c.check}: {words}" + (f" ({c.reason})" if c.reason else ""))
        if answers.gemba_result is not None:
            for j in answers.gemba_result.judges:
                said = JUDGE_STATUS_WORDS.get(j.status, j.status.replace("_", " "))
                if j.status == "valid" and j.score is not None:
                    said = f"scored it {j.score:g} of 100"
                extra = j.error or ""
                lines.append(JudgeLine(f"{j.model} (GEMBA)", said, extra))
        if answers.backtranslation_result is not None:
            b = answers.backtranslation_result
            said = JUDGE_STATUS_WORDS.get(b.status, b.status.replace("_", " "))
            if b.status == "valid":
                said = "back-translated it into Pali"
            lines.append(JudgeLine(f"{b.model} (back-translation)", said, b.pali or b.error or ""))
    elif detail.judge_scores:
        for jid, score in sorted(detail.judge_scores.items()):
            said = f"scored it {score:g} of 100" if score is not None else JUDGE_STATUS_WORDS["invalid"]
            lines.append(JudgeLine(jid, said))
    if not checks and detail.llm_tier is not None:
        tier = detail.llm_tier
        words = {"not_requested": "not asked for in this assessment", "pending": "still running"}.get(
            tier.status, tier.status.replace("_", " ")
        )
        checks.append(f"LLM judges: {words}" + (f" ({tier.reason})" if tier.reason else ""))
    return lines, checks


def item_page(detail: ReviewItemOut) -> ItemPage:
    cand = detail.candidate
    candidate = _nfc(cand.text) if cand is not None else ""
    peers = [_nfc(p.text) for p in detail.peers]
    # the item's findings as stored with it (the ones a verdict judges), never the assessment's later flags
    findings = _findings(detail.findings, candidate, peers)
    marks = [(s, f.number, f.severity) for f in findings for s in f.highlights.candidate]
    judges, checks = _judge_lines(detail.judge_answers, detail)
    counts: dict[str, int] = {}
    for v in detail.verdicts:
        counts[v.label] = counts.get(v.label, 0) + 1
    return ItemPage(
        detail=detail,
        source_text=_nfc(detail.source.text) if detail.source is not None else "",
        candidate_text=candidate,
        candidate_pieces=pieces(candidate, marks),
        peer_texts=peers,
        peer_names=[p.model or p.id for p in detail.peers],
        findings=findings,
        rows=_rows(candidate, peers, findings) if candidate else [],
        signals=_signal_rows(detail),
        judges=judges,
        checks=checks,
        verdict_counts=counts,
    )


def filters_of(query: dict[str, Any]) -> dict[str, str]:
    """The queue filters carried from page to page (claim next keeps them)."""
    keep = {k: str(query[k]) for k in ("tier", "lang", "model", "batch", "show") if query.get(k)}
    if keep.get("show") != "all":  # the default ("flagged") says nothing; nothing else is a value of it
        keep.pop("show", None)
    return keep
