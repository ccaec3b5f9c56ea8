"""The K table: the dev challenge cut into assessments of K candidates, through the cheap tier and risk.priority.

For every K (default 1, 2, 3, 5 and 10) the untouched translations of each passage are cut into assessments of K
candidates (the models in a seeded order, consecutive groups; when K does not divide the count the last group is
the last K, and only its new candidates count), and every injected error is assessed with K - 1 untouched
translations of its passage (seeded). Prints, per K, in one run: the share of injected errors in the top 10% of the
untouched risk.priority distribution of that K (per error type and overall, every variant of the challenge set),
the PaliBench outlier AUC of risk.priority on the untouched candidates, the share of untouched candidates forced up
by a flag, and which risk models scored (``risk.rule``).

    .venv/bin/python bench/challenge_set.py var/challenge/dev20.jsonl --per-variant 20
    .venv/bin/python bench/eval_k.py var/challenge/dev20.jsonl [--ks 1,2,3,5,10] [--dump-dir var/challenge/k]

``--dump-dir`` writes one ``eval_challenge_risk --dump`` file per K (``k<K>.jsonl``) for the fitter
(``bench/tune_risk_terms.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from challenge_set import load_dev, load_outlier_labels  # noqa: E402
from eval_challenge_risk import RISK, Assessor  # noqa: E402

from service.core.metrics import auc  # noqa: E402
from service.core.palibench import OUTLIER_DRIFT  # noqa: E402
from service.platform.settings import get_settings  # noqa: E402

KS = (1, 2, 3, 5, 10)
# the targets for the share of injected errors in the top 10%, per K, and for untouched forced up
TARGET_TOP10 = {1: 0.75, 2: 0.80, 3: 0.80}
TARGET_FORCED = 0.02


def groups_of(models: list[str], k: int) -> list[tuple[list[str], list[str]]]:
    """(the assessment's candidates, the ones counted) of consecutive groups of ``k``; a short tail is topped up from
    the candidates before it, which are counted once only."""
    out = []
    for at in range(0, len(models), k):
        group = models[at : at + k]
        if len(group) < k and len(models) >= k:
            out.append((models[len(models) - k :], group))
        else:
            out.append((group, group))
    return out


def run_k(
    k: int,
    assess: Assessor,
    items: list[dict[str, Any]],
    passages: list[str],
    sources: dict[str, str],
    models: dict[str, dict[str, str]],
    seed: int,
) -> list[dict[str, Any]]:
    """Every untouched candidate of ``passages`` and every injected item, assessed in groups of ``k``: dump rows."""
    rows: list[dict[str, Any]] = []
    names = sorted(models)
    for pid in passages:
        have = [m for m in names if models[m].get(pid, "").strip()]
        random.Random(f"{seed}:{pid}").shuffle(have)
        for group, counted in groups_of(have, k):
            out = assess(sources[pid], [(m, models[m][pid]) for m in group])
            for m in counted:
                rows.append(
                    {
                        "kind": "untouched",
                        "passage": pid,
                        "model": m,
                        "k": len(group),
                        "signals": out[m],
                        "flags": assess.last_flags[m],
                        "rule": assess.last_scored[m].result.rule,
                        "forced": assess.last_scored[m].result.forced_by_flag,
                    }
                )
    for n, it in enumerate(items):
        pid, cid = it["passage_id"], it["model"]
        others = [m for m in names if m != cid and models[m].get(pid, "").strip()]
        peers = random.Random(f"{seed}:{n}:{pid}").sample(others, min(k - 1, len(others)))
        out = assess(sources[pid], [*((m, models[m][pid]) for m in peers), (cid, it["corrupted"])])
        rows.append(
            {
                "kind": "injected",
                "mode": "peers",
                "passage": pid,
                "model": cid,
                "k": len(peers) + 1,
                "error_type": it["error_type"],
                "variant": it.get("variant", ""),
                "set": it.get("set", ""),
                "signals": out[cid],
                "flags": assess.last_flags[cid],
                "rule": assess.last_scored[cid].result.rule,
                "forced": assess.last_scored[cid].result.forced_by_flag,
            }
        )
    return rows


def figures(rows: list[dict[str, Any]], labels: dict[tuple[str, str], bool]) -> dict[str, Any]:
    """Top-10% shares (overall, per type), the PaliBench outlier AUC and the untouched forced share of one K."""
    un = [r for r in rows if r["kind"] == "untouched"]
    inj = [r for r in rows if r["kind"] == "injected"]
    threshold = float(np.quantile([r["signals"][RISK] for r in un], 0.90))
    hit: dict[str, list[bool]] = defaultdict(list)
    for r in inj:
        hit[r["error_type"]].append(r["signals"][RISK] >= threshold)
    scored = [
        (labels[(r["passage"], r["model"])], r["signals"][RISK])
        for r in un
        if (r["passage"], r["model"]) in labels and math.isfinite(r["signals"][RISK])
    ]
    forced = [r for r in un if r["forced"]]
    return {
        "all": float(np.mean([h for v in hit.values() for h in v])) if hit else float("nan"),
        "types": {t: (float(np.mean(v)), len(v)) for t, v in hit.items()},
        "auc": auc([s for _, s in scored], [y for y, _ in scored]),
        "forced": len(forced) / max(1, len(un)),
        "forced_by": Counter(r["forced"] for r in forced),
        "rules": Counter(r["rule"] for r in rows),
        "n_untouched": len(un),
        "n_injected": len(inj),
    }


def table(per_k: dict[int, dict[str, Any]]) -> list[str]:
    ks = sorted(per_k)
    head = f"{'candidates per assessment':34s}" + "".join(f"{k:>8d}" for k in ks)
    lines = [head, "-" * len(head)]
    lines.append(f"{'injected errors in the top 10%':34s}" + "".join(f"{per_k[k]['all']:8.3f}" for k in ks))
    types = sorted({t for k in ks for t in per_k[k]["types"]})
    for t in types:
        cells = "".join(f"{per_k[k]['types'].get(t, (float('nan'), 0))[0]:8.3f}" for k in ks)
        n = max(per_k[k]["types"].get(t, (0, 0))[1] for k in ks)
        lines.append(f"  {t + f' (n={n})':32s}" + cells)
    lines.append(f"{'untouched candidates forced up':34s}" + "".join(f"{per_k[k]['forced']:8.3f}" for k in ks))
    lines.append(f"{'PaliBench outlier AUC':34s}" + "".join(f"{per_k[k]['auc']:8.3f}" for k in ks))
    lines.append(f"{'untouched candidates':34s}" + "".join(f"{per_k[k]['n_untouched']:8d}" for k in ks))
    lines.append(f"{'injected errors':34s}" + "".join(f"{per_k[k]['n_injected']:8d}" for k in ks))
    targets = ", ".join(f"K={k} >= {v}" for k, v in TARGET_TOP10.items())
    lines.append(f"targets: top 10% {targets}, K=10 not below today's; forced <= {TARGET_FORCED} at every K")
    for k in ks:
        by = ", ".join(f"{r} {n}" for r, n in per_k[k]["forced_by"].most_common())
        rules = ", ".join(f"{r} {n}" for r, n in per_k[k]["rules"].most_common())
        lines.append(f"K={k}: forced by {by or 'nothing'}; scored by {rules}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("challenge", nargs="?", type=Path, default=ROOT / "var" / "challenge" / "dev.jsonl")
    ap.add_argument("--ks", default=",".join(map(str, KS)), help="candidates per assessment, comma-separated")
    ap.add_argument("--model", default=get_settings().risk.model)
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument(
        "--passages",
        type=int,
        default=0,
        help="untouched candidates of this many passages (seeded sample; default: every passage of the challenge)",
    )
    ap.add_argument("--dump-dir", type=Path, help="write every K's rows here as k<K>.jsonl (for the fitter)")
    args = ap.parse_args()
    items = [{"set": args.challenge.stem, **json.loads(line)} for line in args.challenge.open()]
    sources, models = load_dev()
    passages = sorted({it["passage_id"] for it in items})
    if args.passages:
        pool = sorted(sources)
        passages = sorted(random.Random(args.seed).sample(pool, min(args.passages, len(pool))))
    labels = load_outlier_labels(OUTLIER_DRIFT)
    assess = Assessor(args.model)
    if args.dump_dir:
        args.dump_dir.mkdir(parents=True, exist_ok=True)
    per_k: dict[int, dict[str, Any]] = {}
    t0 = time.perf_counter()
    for k in (int(x) for x in args.ks.split(",")):
        t1 = time.perf_counter()
        rows = run_k(k, assess, items, passages, sources, models, args.seed)
        per_k[k] = figures(rows, labels)
        if args.dump_dir:
            with (args.dump_dir / f"k{k}.jsonl").open("w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
        print(f"K={k}: {len(rows)} candidates in {time.perf_counter() - t1:.0f} s", file=sys.stderr, flush=True)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(
        f"{args.challenge} ({len(items)} injected errors, every variant; untouched candidates of {len(passages)} "
        f"passages); risk model {args.model}; {time.perf_counter() - t0:.0f} s; {load}"
    )
    print("\n".join(table(per_k)))


if __name__ == "__main__":
    main()
