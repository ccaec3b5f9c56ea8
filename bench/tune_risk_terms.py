"""Fit the default risk model on untouched PaliBench dev candidates and injected errors together, through the one
fitter (``service.review.calibration.search``: robust z terms, forward selection, weight search, grouped CV by sutta).

Rows: every untouched dev candidate (positive when PaliBench calls it an outlier) and every injected error of an
``eval_challenge_risk --dump`` (positive). The selection objective, on held-out folds ranked as the service ranks
(forcing flags first): the mean over the challenge set's variants of the share of injected errors in the top 10% of
the untouched candidates (every variant weighs the same, so no single injection rule decides), less a penalty when
the PaliBench outlier AUC falls below its floor; then that AUC. Which critical flags force a candidate up is chosen
the same way: each set of extra forcing rules is fitted and the best held-out objective wins. Check the result on a
challenge set of another seed (``eval_challenge_risk.py var/challenge/dev2.jsonl``).

    .venv/bin/python bench/eval_challenge_risk.py --dump var/challenge/signals-dev.jsonl
    .venv/bin/python bench/tune_risk_terms.py var/challenge/signals-dev.jsonl [--nested] [--write 1.0.0]

``--band LOW-HIGH`` fits the model of a candidate-count band (issue 34) on a dump of assessments of that size
(``bench/eval_k.py --dump-dir``: ``k1.jsonl`` for the band 1-1, ``k3.jsonl`` and ``k5.jsonl`` together for 3-5):
it is written under its own name (``--name``, default ``<NAME>-k<band>``), with its own reference pool, and the
default model's ``bands`` hand that count to it. In a band fit every critical forcing rule is a choice, and a set of
forcing rules that forces more than ``--max-forced`` of the untouched candidates is not tried (a forced flag sends a
candidate above everything; with few peers the flags misfire more).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import itertools
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import msgspec  # noqa: E402
from challenge_set import load_outlier_labels  # noqa: E402
from eval_challenge_risk import dumped_flags  # noqa: E402
from fit_risk import embedding_model_of, read_aliases, write_aliases, write_model  # noqa: E402

from service.core.critical.coverage import COVERAGE_SIGNALS  # noqa: E402
from service.core.metrics import auc, recall_at_budget  # noqa: E402
from service.core.ranking import forcing_flag, priorities  # noqa: E402
from service.core.risk import CandidateBand, HardFlagRule, ReferenceDistribution, RiskModel, load_model  # noqa: E402
from service.core.types import Severity  # noqa: E402
from service.review.calibration.search import (  # noqa: E402
    SEED,
    FitData,
    Search,
    Spec,
    build_model,
    fitted_scores,
    folds_description,
    grouped_folds,
    held_out_scores,
    nested_cv,
    selection_description,
)

N_FOLDS = 5
MAX_TERMS = 8
AUC_FLOOR = 0.81  # the PaliBench dev outlier AUC the default model must keep
AUC_PENALTY = 5.0  # per point of AUC below the floor, taken off the injected-error objective
NAME = "peer-coverage-minilm-v1"
UNTOUCHED = "untouched"
# signals never offered: the e5 source side (not run by default), the batch-level translator signal, the ranking
EXCLUDED = {"risk", "source_distance", "source_distance_peer_z", "translator_peer_distance"}
# critical flags a fit may add to the base model's forcing rules
OPTIONAL_RULES = ("critical.negation", "critical.added_content", "critical.omission", "critical.substitution")


class Rows:
    """The dump as fitting rows: untouched candidates first, then the injected errors (with peers)."""

    def __init__(self, dumps: list[Path], challenge_set: str | None = None) -> None:
        rows = [json.loads(line) for dump in dumps for line in dump.open()]
        un = [r for r in rows if r["kind"] == "untouched"]
        inj = [
            r
            for r in rows
            if r["kind"] == "injected"
            and r.get("mode") == "peers"
            and (challenge_set is None or r.get("set") == challenge_set)
        ]
        labels = load_outlier_labels()
        self.rows = un + inj
        names = sorted({k for r in self.rows for k in r["signals"]} - EXCLUDED)
        self.names = names
        self.x = np.array([[r["signals"].get(k, np.nan) for k in names] for r in self.rows], dtype=float)
        outlier = [labels.get((r["passage"], r["model"])) for r in un]
        self.y = np.array([bool(o) for o in outlier] + [True] * len(inj))
        self.tags = np.array(
            [UNTOUCHED if o is not None else "unlabelled" for o in outlier]
            + [f"{r['error_type']}/{r.get('variant', '')}" for r in inj]
        )
        self.groups = np.array([r["passage"].split(":")[0] for r in self.rows])
        self.flags = [dumped_flags(r["flags"]) for r in self.rows]

    def forced_share(self, rule: HardFlagRule) -> float:
        """The share of untouched candidates a forcing rule sends to the top."""
        un = [fl for fl, t in zip(self.flags, self.tags, strict=True) if t in (UNTOUCHED, "unlabelled")]
        return sum(1 for fl in un if forcing_flag(rule, fl) is not None) / max(1, len(un))

    def data(self, rule: HardFlagRule) -> FitData:
        forced: tuple[Severity | None, ...] = tuple(
            (f.severity if (f := forcing_flag(rule, fl)) else None) for fl in self.flags
        )
        return FitData(list(self.names), self.x, self.y, self.groups, forced, self.tags)


def _band(text: str) -> tuple[int, int | None]:
    low, _, high = text.partition("-")
    return int(low), int(high) if high else None


def challenge_figures(s: np.ndarray, data: FitData) -> dict[str, float]:
    """Injected errors in the top 10% of the untouched priorities (all, per type, per variant) and the PaliBench
    outlier AUC and recall@20% of the untouched candidates, from priorities ``s``."""
    assert data.tags is not None
    un = (data.tags == UNTOUCHED) | (data.tags == "unlabelled")
    labelled = data.tags == UNTOUCHED
    threshold = float(np.quantile(s[un], 0.90))
    inj = ~un
    out = {
        "injected_in_top10%": float((s[inj] >= threshold).mean()),
        "palibench_auc": auc(s[labelled], data.y[labelled]),
        "palibench_recall@20%": recall_at_budget(s[labelled], data.y[labelled], 0.2),
    }
    variants = sorted(set(data.tags[inj]))
    for v in variants:
        out[v] = float((s[data.tags == v] >= threshold).mean())
    for t in sorted({v.split("/")[0] for v in variants}):
        rows = np.char.startswith(data.tags.astype(str), t + "/")
        out[t] = float((s[rows] >= threshold).mean())
    out["mean_over_variants"] = float(np.mean([out[v] for v in variants]))
    return out


def objective(s: np.ndarray, data: FitData, floor: float = AUC_FLOOR) -> tuple[float, float]:
    f = challenge_figures(s, data)
    short = max(0.0, floor - f["palibench_auc"])
    return (round(f["mean_over_variants"] - AUC_PENALTY * short, 4), f["palibench_auc"])


def _line(label: str, f: dict[str, float]) -> str:
    types = " ".join(f"{k} {v:.2f}" for k, v in f.items() if "/" not in k and k[0].islower() and "_" not in k)
    return (
        f"{label:40s} top10 {f['injected_in_top10%']:.3f} (variants {f['mean_over_variants']:.3f}) | PaliBench AUC "
        f"{f['palibench_auc']:.4f} R@20 {f['palibench_recall@20%']:.3f} | {types}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", type=Path, nargs="+")
    ap.add_argument("--base", type=Path, default=ROOT / "models" / "risk" / "peer-robust-minilm-v1.json")
    ap.add_argument("--nested", action="store_true", help="also the nested CV of the whole selection (slow)")
    ap.add_argument("--rules", help="try only this comma-separated set of extra forcing rules (a choice made before)")
    ap.add_argument("--set", help="fit on the injected errors of this challenge set only (the others are for checking)")
    ap.add_argument("--write", metavar="VERSION", help=f"write the chosen model as {NAME} and make it the default")
    ap.add_argument("--band", help="LOW-HIGH (HIGH may be empty: no bound): fit the model of this candidate-count band")
    ap.add_argument("--name", help="the band model's name (default <NAME>-k<band>)")
    ap.add_argument("--max-forced", type=float, default=0.02, help="a band's forcing may force at most this share")
    args = ap.parse_args()
    base = load_model(args.base)
    band = _band(args.band) if args.band else None
    optional_rules = OPTIONAL_RULES
    if band is not None:  # every critical rule is a choice: forcing is what misfires with few peers
        optional_rules = tuple(dict.fromkeys([*OPTIONAL_RULES, *(r for r in base.hard_flags.rules or [])]))
        optional_rules = tuple(r for r in optional_rules if r.startswith("critical."))
    base_rules = [r for r in base.hard_flags.rules or [] if r not in optional_rules]
    rows = Rows(args.dump, args.set)
    folds = grouped_folds(rows.groups, N_FOLDS, SEED)
    labelled = int((rows.tags == UNTOUCHED).sum())
    print(f"{len(rows.rows)} rows ({labelled} labelled untouched), {len(rows.names)} signals")

    # the shipped model, scored as shipped (its terms' statistics; the dump's risk column is its priority)
    shipped = challenge_figures(np.array([r["signals"]["risk"] for r in rows.rows]), rows.data(base.hard_flags))
    print(_line(f"{base.name} {base.version} as shipped", shipped))
    # a band's AUC floor is what the shipped ranking has at that count (a single candidate has no peers to agree
    # with, so the ten-candidate floor would swamp the objective)
    floor = AUC_FLOOR if band is None else min(AUC_FLOOR, round(shipped["palibench_auc"], 3))
    goal = functools.partial(objective, floor=floor)

    pool = [n for n in rows.names if np.isfinite(rows.x[:, rows.names.index(n)]).mean() > 0.5]
    results = []
    # a rule that fires on no row changes nothing: only the ones that do are tried
    firing = [r for r in optional_rules if any(f.rule == r for fl in rows.flags for f in fl)]
    if band is not None:
        firing = [r for r in firing if rows.forced_share(HardFlagRule(rules=[*base_rules, r])) <= args.max_forced]
    print(f"optional forcing rules that fire: {firing}")
    combos = [tuple(c) for k in range(len(firing) + 1) for c in itertools.combinations(firing, k)]
    if args.rules is not None:
        combos = [tuple(r for r in args.rules.split(",") if r)]
    for extra in combos:
        rule = HardFlagRule(rules=[*base_rules, *extra])
        if band is not None and rows.forced_share(rule) > args.max_forced:
            continue
        data = rows.data(rule)
        search = Search(data, folds, objective=goal, max_terms=MAX_TERMS)
        spec = search.select(pool, simplify=True).chosen
        held = priorities(held_out_scores(spec, data, folds), data.forced)
        f = challenge_figures(held, data)
        results.append((goal(held, data), extra, spec, f, data))
        print(_line(f"forcing also {list(extra)}", f) + f"\n    {spec.describe()}", flush=True)
    key, extra, spec, cv, data = max(results, key=lambda r: r[0])
    print(f"\nchosen (held-out objective {key}): forcing also {list(extra)}; {spec.describe()}")
    print(_line("grouped 5-fold CV", cv))
    nested = None
    if args.nested:
        res = nested_cv(data, folds, pool, n_folds=N_FOLDS, simplify=True, objective=goal, max_terms=MAX_TERMS)
        nested = challenge_figures(priorities(res.scores, data.forced), data)
        print(_line("nested CV (selection inside each fold)", nested))
    for v in sorted(k for k in cv if "/" in k):
        print(f"    {v:24s} CV {cv[v]:.2f}   shipped {shipped.get(v, float('nan')):.2f}")
    if not args.write:
        return 0

    untouched = np.flatnonzero((rows.tags == UNTOUCHED) | (rows.tags == "unlabelled"))
    fit: dict[str, object] = {
        "label": "PaliBench outlier (normalized_drift > 2) for untouched dev candidates; every injected error positive",
        "folds": folds_description(N_FOLDS, "sutta (so by passage)", SEED),
        "date": dt.date.today().isoformat(),
        "selection": selection_description(0.10, simplify=True)
        + "; objective: mean over the challenge variants of injected errors in the top 10% of untouched, less "
        f"{AUC_PENALTY:g} x the PaliBench AUC shortfall below {floor}, then that AUC (bench/tune_risk_terms.py); "
        f"forcing rules {list(OPTIONAL_RULES)} chosen by the same held-out objective",
        "dump": ", ".join(map(str, args.dump)),
        "added_rules": list(extra),
        "cv": {k: round(v, 4) for k, v in cv.items()},
        "shipped_before": {"model": f"{base.name}@{base.version}", **{k: round(v, 4) for k, v in shipped.items()}},
    }
    fit["in_sample"] = {
        k: round(v, 4) for k, v in challenge_figures(priorities(fitted_scores(spec, data), data.forced), data).items()
    }
    if nested is not None:
        fit["nested_cv"] = {k: round(v, 4) for k, v in nested.items()}
    # the terms' statistics from every row, as the fit computed them (robust z over other rows would be another
    # model); the reference distribution from the untouched candidates only (what the service's pool holds)
    name = NAME if band is None else args.name or f"{NAME}-k{args.band}"
    description = (
        "Agreement with peer translations of the same passage (all-MiniLM-L6-v2 int8 ONNX peer "
        "embeddings) and the critical-content and source-coverage signals (the translation lexicon), robust z "
        "terms chosen by grouped CV by sutta on untouched PaliBench dev candidates and injected errors together "
        "(bench/tune_risk_terms.py). Falls back to single-candidate-v1 without peers. Forced to the top: the "
        "structural hard flags and the critical flags listed in hard_flags.rules."
    )
    if band is not None:
        fit["band"] = args.band
        fit["max_forced"] = args.max_forced
        fit["forced_share"] = round(rows.forced_share(HardFlagRule(rules=[*base_rules, *extra])), 4)
        description = (
            f"The model of assessments of {args.band} candidates (issue 34): source-side, coverage and (with peers) "
            "peer-agreement terms chosen by grouped CV by sutta on the dev challenge cut into assessments of that "
            f"size (bench/eval_k.py, bench/tune_risk_terms.py --band); forcing rules chosen among the critical ones "
            f"forcing at most {args.max_forced:.0%} of untouched candidates. Its own reference pool."
        )
    model = build_model(
        Spec(spec.terms, spec.stat, spec.clip),
        data,
        name=name,
        version=args.write,
        description=description,
        fallback="single-candidate-v1",
        hard_flags=HardFlagRule(rules=[*base_rules, *extra]),
        reference_data=f"PaliBench dev half: {len(untouched)} untouched candidates; peer embeddings all-MiniLM-L6-v2",
        reference_label="PaliBench dev half, in-sample scores",
        fit=fit,
        # the peer encoder its statistics hold for, when a term is an embedding distance (None when none is)
        embedding_model=embedding_model_of(
            [n for n, _ in spec.terms], {"peer_embedding_model": base.embedding_model or "unknown"}
        ),
    )
    ref = fitted_scores(spec, data)[untouched]
    model = msgspec.structs.replace(
        model,
        reference=ReferenceDistribution(
            data="PaliBench dev half, untouched candidates, in-sample scores",
            n=int(ref.shape[0]),
            quantiles=[round(float(q), 6) for q in np.quantile(ref, np.linspace(0.0, 1.0, 1001))],
        ),
    )
    # the critical-content terms are absent when a request turns the critical check off: optional, as before
    from service.core.critical import SIGNALS as CRITICAL

    optional = {*CRITICAL, *COVERAGE_SIGNALS, "critical_score"}
    model = msgspec.structs.replace(
        model, signals=[msgspec.structs.replace(t, optional=t.name in optional) for t in model.signals]
    )
    out_dir = ROOT / "models" / "risk"
    path = write_model(msgspec.convert(msgspec.to_builtins(model), RiskModel), out_dir)
    if band is not None:  # the default hands this count to the band's model (its own scoring is unchanged)
        default = load_model(out_dir / f"{read_aliases(out_dir)['default']}.json")
        bands = [b for b in default.bands if (b.low, b.high) != band] + [CandidateBand(*band, model=name)]
        bands.sort(key=lambda b: b.low)
        write_model(msgspec.structs.replace(default, bands=bands), out_dir)
        print(f"wrote {path}; {default.name} bands -> {[(b.low, b.high, b.model) for b in bands]}")
        return 0
    aliases = read_aliases(out_dir)
    aliases["default"] = NAME
    write_aliases(out_dir, aliases)
    print(f"wrote {path}; default -> {NAME}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
