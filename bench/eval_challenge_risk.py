"""The injected-error challenge set through the service's own cheap tier and risk model (no LLM).

For every challenge item the corrupted candidate is assessed together with the nine untouched translations of its
passage (and, for the no-peer figures, alone); untouched candidates are the negatives. Prints, per error type and
for every signal and the risk score: AUC and recall at 5/10/20% budgets, plus the share of all injected errors that
land in the top 10% of the untouched risk distribution (the "10% budget" of a real stream). It also prints the
PaliBench outlier AUC of the same risk score on the untouched candidates, so a change that helps one and hurts the
other shows.

    .venv/bin/python bench/challenge_set.py && .venv/bin/python bench/eval_challenge_risk.py [--model NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from challenge_set import load_dev, load_outlier_labels  # noqa: E402

from service.core.budget import STUDY_BUDGETS  # noqa: E402
from service.core.critical import CriticalChecker, default_checker  # noqa: E402
from service.core.embeddings import CachedEmbedder, open_embedder  # noqa: E402
from service.core.metrics import auc, pooled_negatives_first, recall_at_budget  # noqa: E402
from service.core.novelty import NoveltyIndex  # noqa: E402
from service.core.novelty_report import SourceNovelty, source_novelty  # noqa: E402
from service.core.palibench import OUTLIER_DRIFT  # noqa: E402
from service.core.pipeline import cheap_tier, final_risks  # noqa: E402
from service.core.records import DEFAULT_CHECKS, CandidateIn  # noqa: E402
from service.core.risk import RiskRegistry, score  # noqa: E402
from service.core.signals import load_length_model  # noqa: E402
from service.core.types import Flag, SignalValue  # noqa: E402
from service.platform.settings import get_settings  # noqa: E402

BUDGETS = STUDY_BUDGETS
RISK = "risk"
# the targets: each of these types, every variant pooled, and all types together; PaliBench outlier AUC
TARGET_TYPES = ("term", "omission", "negation", "addition")
TARGET_TYPE = 0.60
TARGET_ALL = 0.85
TARGET_AUC = 0.81


def top10_lines(hit: list[tuple[str, str, bool]]) -> list[str]:
    """Per type (with the target where there is one) and per variant: the share in the top 10%."""
    lines = []
    for etype in dict.fromkeys(t for t, _, _ in hit):
        rows = [h for t, _, h in hit if t == etype]
        target = f" (target >= {TARGET_TYPE})" if etype in TARGET_TYPES else ""
        variants = dict.fromkeys(v for t, v, _ in hit if t == etype)
        per = ", ".join(f"{v} {np.mean([h for t, vv, h in hit if t == etype and vv == v]):.2f}" for v in variants)
        lines.append(f"  {etype:13s} {np.mean(rows):.3f}{target:16s} n={len(rows):4d} | {per}")
    return lines


class Assessor:
    """The worker's cheap tier and final risk, in process."""

    def __init__(self, model: str, *, lexicon: bool = True) -> None:
        settings = get_settings()
        # the untouched peers of every injected item are embedded once (a process LRU, as the workers keep one)
        self.peer = CachedEmbedder(
            open_embedder(dataclasses.replace(settings.embedding, backend=settings.embedding.peer_backend)),
            max_items=20_000,
        )
        self.registry = RiskRegistry.load(settings.risk.models_dir)
        self.model = model
        self.length = load_length_model("pli", "en", settings.risk.models_dir)
        self.critical = default_checker() if lexicon else CriticalChecker(translation=False)
        self.index = NoveltyIndex.load(settings.index.path)
        self._nov: dict[str, SourceNovelty] = {}
        self.last_flags: dict[str, list[str]] = {}  # candidate id -> "rule:severity" of the last call
        self.last_rules: dict[str, str] = {}  # candidate id -> risk.rule (the model that scored) of the last call
        self.last_forced: dict[str, str | None] = {}  # candidate id -> risk.forced_by_flag of the last call

    def __call__(self, source: str, cands: list[tuple[str, str]]) -> dict[str, dict[str, float]]:
        """candidate id -> {signal: value, "risk": ranking score} for one passage."""
        if source not in self._nov:
            self._nov[source] = source_novelty({"pli": self.index}, source, "pli")[0]
        cins = [CandidateIn(id=cid, text=text, model=cid) for cid, text in cands]
        part = cheap_tier(
            source_text=source,
            source_lang="pli",
            target_lang="en",
            candidates=cins,
            checks=DEFAULT_CHECKS,
            novelty=self._nov[source],
            peer_embedder=self.peer,
            source_embedder=None,
            embedder_signature={},
            length_model=self.length,
            critical=self.critical,
            registry=self.registry,
        )
        risks = final_risks(cins, part, None, self.registry, self.model)
        out: dict[str, dict[str, float]] = {}
        self.last_flags = {c.id: [f"{f.rule}:{f.severity}" for f in risks[c.id].flags] for c in cins}
        self.last_rules = {c.id: risks[c.id].result.rule for c in cins}
        self.last_forced = {c.id: risks[c.id].result.forced_by_flag for c in cins}
        for c in cins:
            sig = {k: v.value for k, v in part.candidates[c.id].signals.items() if isinstance(v, SignalValue)}
            # the service's one ranking: forced candidates first by flag severity, then by score
            sig[RISK] = risks[c.id].result.priority
            out[c.id] = sig
        return out


def _table(title: str, pos: dict[str, dict[str, list[float]]], neg: dict[str, list[float]]) -> list[str]:
    lines = [
        title,
        f"{'error type':15s} {'signal':26s} {'n':>4s} {'AUC':>6s} "
        + " ".join(f"{'R@' + str(int(b * 100)) + '%':>6s}" for b in BUDGETS),
    ]
    for etype in sorted(pos):
        names = sorted(pos[etype], key=lambda s: (s != RISK, s))
        for name in names:
            p, n = pos[etype][name], neg.get(name, [])
            if not p or not n:
                continue
            scores, labels = pooled_negatives_first(p, n)
            cells = " ".join(f"{recall_at_budget(scores, labels, b):6.3f}" for b in BUDGETS)
            lines.append(f"{etype:15s} {name:26s} {len(p):4d} {auc(scores, labels):6.3f} {cells}")
    return lines


def dumped_flags(dumped: list[str]) -> list[Flag]:
    """A dump's ``rule:severity`` strings as flags."""
    out = []
    for f in dumped:
        rule, _, severity = f.rpartition(":")
        out.append(msgspec.convert({"rule": rule, "severity": severity, "detail": ""}, Flag))
    return out


def rescore(dump: Path, model_names: list[str]) -> None:
    """Every model's risk.priority (``risk.score``, as the worker scores) of the signals and flags a ``--dump``
    recorded, with the same figures: the signals do not depend on the model, so models compare on one run."""
    registry = RiskRegistry.load(get_settings().risk.models_dir)
    rows = [json.loads(line) for line in dump.open()]
    rows = [r for r in rows if r["kind"] == "untouched" or r.get("mode") == "peers"]
    labels = load_outlier_labels(OUTLIER_DRIFT)
    for name in model_names:
        model = registry.get(name)
        pr = []
        for r in rows:
            sig = {k: SignalValue(value=v) for k, v in r["signals"].items() if k != RISK}
            pr.append(score(model, sig, dumped_flags(r["flags"]), registry=registry).priority)
        un = [(r, p) for r, p in zip(rows, pr, strict=True) if r["kind"] == "untouched"]
        threshold = float(np.quantile([p for _, p in un], 0.90))
        scored = [(labels[(r["passage"], r["model"])], p) for r, p in un if (r["passage"], r["model"]) in labels]
        y, s = [o for o, _ in scored], [p for _, p in scored]
        print(
            f"\n== {model.rule} ({dump}): {len(un)} untouched candidates; PaliBench outlier AUC {auc(s, y):.3f} "
            f"(target >= {TARGET_AUC}), R@20% {recall_at_budget(s, y, 0.2):.3f} (n={len(s)})"
        )
        sets = sorted({r.get("set", "") for r in rows if r["kind"] == "injected"})
        for name in sets:
            hit = [
                (r["error_type"], r.get("variant", ""), p >= threshold)
                for r, p in zip(rows, pr, strict=True)
                if r["kind"] == "injected" and r.get("set", "") == name
            ]
            print(f"  injected errors of set {name!r} in the top 10% of the untouched risk.priority:")
            print("\n".join(top10_lines(hit)))
            print(f"  all types: {np.mean([h for *_, h in hit]):.3f} (target >= {TARGET_ALL})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "challenge",
        nargs="*",
        type=Path,
        default=[ROOT / "var" / "challenge" / "dev.jsonl"],
        help="challenge sets (JSONL); several share one run (their untouched peers are assessed once)",
    )
    ap.add_argument("--model", default=get_settings().risk.model)
    ap.add_argument("--limit", type=int, default=0, help="first N challenge items only")
    ap.add_argument("--dump", type=Path, help="write every candidate's signals here (JSONL) for offline fitting")
    ap.add_argument("--alone", action="store_true", help="also score every injected candidate without peers")
    ap.add_argument("--no-lexicon", action="store_true", help="the critical checks without the translation lexicon")
    ap.add_argument(
        "--untouched-from", type=Path, help="take the untouched candidates' rows from this earlier --dump (same code)"
    )
    ap.add_argument(
        "--rescore", type=Path, help="score a --dump with every --model given (comma-separated) instead of assessing"
    )
    args = ap.parse_args()
    if args.rescore:
        rescore(args.rescore, args.model.split(","))
        return
    items = [{"set": path.stem, **json.loads(line)} for path in args.challenge for line in path.open()]
    if args.limit:
        items = items[: args.limit]
    sources, models = load_dev()
    names = sorted(models)
    assess = Assessor(args.model, lexicon=not args.no_lexicon)
    t0 = time.perf_counter()

    # negatives: the untouched candidates, with peers and alone
    neg: dict[str, dict[str, list[float]]] = {"peers": defaultdict(list), "alone": defaultdict(list)}
    untouched: dict[tuple[str, str], dict[str, float]] = {}
    dump = args.dump.open("w") if args.dump else None

    def untouched_rows() -> Iterator[dict[str, Any]]:
        if args.untouched_from:  # the same untouched candidates, assessed by an earlier run with this code
            yield from (r for r in map(json.loads, args.untouched_from.open()) if r["kind"] == "untouched")
            return
        for pid, src in sources.items():
            cands = [(m, models[m][pid]) for m in names if models[m].get(pid, "").strip()]
            for cid, sig in assess(src, cands).items():
                flags = assess.last_flags[cid]
                yield {"kind": "untouched", "passage": pid, "model": cid, "signals": sig, "flags": flags}

    for row in untouched_rows():
        untouched[(row["passage"], row["model"])] = row["signals"]
        if dump:
            dump.write(json.dumps(row) + "\n")
        for k, v in row["signals"].items():
            neg["peers"][k].append(v)
    alone_ids = sorted(untouched)[:: max(1, len(untouched) // 1500)]  # a sample: alone scoring is per candidate
    for pid, cid in alone_ids if args.alone else []:
        for k, v in assess(sources[pid], [(cid, models[cid][pid])])[cid].items():
            neg["alone"][k].append(v)

    pos: dict[str, dict[str, dict[str, list[float]]]] = {"peers": {}, "alone": {}}
    kinds: list[tuple[str, str]] = []  # (type, variant) of every injected item, in order
    for it in items:
        pid, cid, etype = it["passage_id"], it["model"], it["error_type"]
        variant = it.get("variant", "")
        kinds.append((etype, variant))
        cands = [(m, models[m][pid]) for m in names if m != cid and models[m].get(pid, "").strip()]
        with_peers = assess(sources[pid], [*cands, (cid, it["corrupted"])])[cid]
        peer_flags = assess.last_flags[cid]
        row = {
            "kind": "injected",
            "passage": pid,
            "model": cid,
            "error_type": etype,
            "variant": variant,
            "set": it["set"],
        }
        if dump:
            dump.write(json.dumps({**row, "mode": "peers", "signals": with_peers, "flags": peer_flags}) + "\n")
        modes = [("peers", with_peers)]
        if args.alone:
            alone = assess(sources[pid], [(cid, it["corrupted"])])[cid]
            if dump:
                dump.write(json.dumps({**row, "mode": "alone", "signals": alone, "flags": assess.last_flags[cid]}))
                dump.write("\n")
            modes.append(("alone", alone))
        for mode, sig in modes:
            bucket = pos[mode].setdefault(etype, defaultdict(list))
            for k, v in sig.items():
                bucket[k].append(v)

    out = [
        f"{len(items)} injected errors, {len(untouched)} untouched candidates; risk model {args.model}; "
        f"{time.perf_counter() - t0:.0f} s"
    ]
    out += _table("\n== with nine peers", pos["peers"], neg["peers"])
    if args.alone:
        out += _table("\n== alone (no peers)", pos["alone"], neg["alone"])
    threshold = float(np.quantile(neg["peers"][RISK], 0.90))
    caught = np.array([v >= threshold for etype in pos["peers"].values() for v in etype[RISK]])
    # per item in input order (pos groups by type): the risk of each injected item again, with its variant
    risk_of = {etype: iter(sig[RISK]) for etype, sig in pos["peers"].items()}
    hit = [(etype, variant, next(risk_of[etype]) >= threshold) for etype, variant in kinds]
    out.append("\n== injected errors in the top 10% of the untouched risk.priority distribution (nine peers)")
    out += top10_lines(hit)
    out.append(f"  all types: {np.mean(caught):.3f} (target >= {TARGET_ALL})")
    # PaliBench outlier AUC of the same risk score on the untouched candidates
    labels, scores = [], []
    for key, outlier in load_outlier_labels(OUTLIER_DRIFT).items():
        sig = untouched.get(key)
        if sig is not None and math.isfinite(sig[RISK]):
            labels.append(outlier)
            scores.append(sig[RISK])
    out.append(
        f"PaliBench outlier AUC of the same risk score: {auc(scores, labels):.3f} (target >= {TARGET_AUC}), "
        f"R@20% {recall_at_budget(scores, labels, 0.2):.3f} (n={len(scores)})"
    )
    print("\n".join(out))


if __name__ == "__main__":
    main()
