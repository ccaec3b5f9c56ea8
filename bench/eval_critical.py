"""Detection of injected errors by the critical-content signals (AUC, recall at budgets) and flag rates on dev."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from challenge_set import load_dev  # noqa: E402

from service.core.budget import STUDY_BUDGETS  # noqa: E402
from service.core.critical import SIGNALS, CriticalChecker, CriticalReport  # noqa: E402
from service.core.metrics import auc, pooled_negatives_first, recall_at_budget  # noqa: E402
from service.core.types import SignalValue  # noqa: E402

ALL_SIGNALS = (*SIGNALS, "critical_score")
BUDGETS = STUDY_BUDGETS
FLAG_RATE = 0.005


def values(rep: CriticalReport) -> dict[str, float]:
    return {k: (v.value if isinstance(v, SignalValue) else 0.0) for k, v in rep.signals.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("challenge", nargs="?", type=Path, default=Path("var/challenge/dev.jsonl"))
    ap.add_argument("--signals", default=",".join(ALL_SIGNALS), help="comma-separated signals to tabulate")
    args = ap.parse_args(argv)
    items = [json.loads(line) for line in args.challenge.open()]
    sources, models = load_dev()
    checker = CriticalChecker()
    model_names = sorted(models)

    t0 = time.perf_counter()
    neg: dict[str, dict[str, list[float]]] = {"peers9": defaultdict(list), "alone": defaultdict(list)}
    fired: dict[str, dict[str, int]] = {"peers9": defaultdict(int), "alone": defaultdict(int)}
    n_cand = 0
    for pid in sorted(sources):
        cands = [models[m][pid] for m in model_names if pid in models[m]]
        reps9 = checker.check_passage(sources[pid], cands)
        reps1 = [checker.check(sources[pid], c, []) for c in cands]
        for setting, reps in (("peers9", reps9), ("alone", reps1)):
            for rep in reps:
                for k, v in values(rep).items():
                    neg[setting][k].append(v)
                rules = {f.rule for f in rep.flags}
                for r in rules:
                    fired[setting][r] += 1
                fired[setting]["any"] += bool(rules)
        n_cand += len(cands)
    t_neg = time.perf_counter() - t0

    pos: dict[str, dict[str, dict[str, list[float]]]] = {
        "peers9": defaultdict(lambda: defaultdict(list)),
        "alone": defaultdict(lambda: defaultdict(list)),
    }
    for it in items:
        pid, model = it["passage_id"], it["model"]
        peers = [models[m][pid] for m in model_names if m != model and pid in models[m]]
        for setting, pr in (("peers9", peers), ("alone", [])):
            for k, v in values(checker.check(sources[pid], it["corrupted"], pr)).items():
                pos[setting][it["error_type"] + "/" + it.get("variant", "")][k].append(v)

    print(
        f"untouched dev: {n_cand} candidates, {len(sources)} passages; "
        f"{1000 * t_neg / n_cand:.2f} ms per candidate (both settings)"
    )
    for setting in ("peers9", "alone"):
        print(f"\nflag firing rates on untouched dev ({setting}):")
        for r, c in sorted(fired[setting].items()):
            print(f"  {r:22s} {c:5d}  {100 * c / n_cand:5.2f}%")
    wanted = args.signals.split(",")
    for setting in ("peers9", "alone"):
        print(f"\n== {setting}: AUC / recall@5% / @10% / @20% (positives = corrupted, negatives = {n_cand} untouched)")
        print(f"{'error type':15s} {'n':>4s} " + " ".join(f"{s[:18]:>26s}" for s in wanted))
        for etype, by_sig in pos[setting].items():
            cells = []
            for s in wanted:
                scores, labels = pooled_negatives_first(by_sig[s], neg[setting][s])
                r = [recall_at_budget(scores, labels, b) for b in BUDGETS]
                cells.append(f"{auc(scores, labels):.3f} {r[0]:.2f}/{r[1]:.2f}/{r[2]:.2f}")
            print(f"{etype:15s} {len(by_sig[wanted[0]]):4d} " + " ".join(f"{c:>26s}" for c in cells))
    # a flag's operating point: the threshold that fires on FLAG_RATE of untouched candidates, and what it catches
    print(f"\n== peers9: recall with each signal's threshold at {FLAG_RATE:.1%} of untouched candidates")
    print(f"{'error type':15s} " + " ".join(f"{s[:18]:>18s}" for s in wanted))
    thresholds = {s: float(np.quantile(neg["peers9"][s], 1.0 - FLAG_RATE)) for s in wanted}
    for etype, by_sig in pos["peers9"].items():
        cells = [f"{np.mean(np.asarray(by_sig[s]) > thresholds[s]):.2f}" for s in wanted]
        print(f"{etype:15s} " + " ".join(f"{c:>18s}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
