"""Audit of forced flags: untouched dev candidates, cut into assessments of K, through the cheap tier and risk model.

Every passage of palibench-dev has up to ten untouched translations. For each K the candidates (in a seeded order
per passage) are cut into assessments of exactly K (K = 10: the whole passage) and assessed as the worker does
(``eval_challenge_risk.Assessor``: the cheap tier and ``risk.priority``). A candidate is *forced up* when a flag
puts it above every unforced one (``risk.forced_by_flag``). The script prints, per K, the share of untouched
candidates forced up (issue 34's target: at most 2% at every K) and the forcing rules, then writes a sample of the
forced flags (per rule, seeded) with the flag's detail, the Pali, the candidate and Sujato's translation of the same
segments to a Markdown file a Pali-aware reviewer reads and marks right / minor / false; all forced flags go to a
JSONL file beside it.

    .venv/bin/python bench/audit_forced.py --out var/audit/forced-before [--k 1,2,3,10] [--sample 100]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from challenge_set import load_dev  # noqa: E402
from eval_challenge_risk import Assessor  # noqa: E402

from service.core.palibench import BILARA_ROOT, DEV_DIR, load_palibench  # noqa: E402
from service.platform.settings import get_settings  # noqa: E402

TARGET_FORCED = 0.02


def human_translations(translator: str = "sujato") -> dict[str, str]:
    """passage id -> the human translation of its segments (joined in order), where the corpus has it."""
    pb = load_palibench(DEV_DIR)
    with (Path(DEV_DIR) / "passage_manifest.csv").open(newline="", encoding="utf-8") as fh:
        segments = {r["passage_id"]: r["segments"].split() for r in csv.DictReader(fh)}
    root = Path(BILARA_ROOT).parents[2] / "translation" / "en" / translator
    files = {p.name.split("_")[0]: p for p in root.rglob(f"*_translation-en-{translator}.json")}
    cache: dict[str, dict[str, str]] = {}
    out: dict[str, str] = {}
    for p in pb.passages:
        f = files.get(p.sutta)
        if f is None:
            continue
        if p.sutta not in cache:
            cache[p.sutta] = json.loads(f.read_text(encoding="utf-8"))
        text = " ".join(cache[p.sutta].get(k, "").strip() for k in segments.get(p.id, ()))
        if text.strip():
            out[p.id] = text.strip()
    return out


def groups(cands: list[tuple[str, str]], k: int, rng: random.Random) -> list[list[tuple[str, str]]]:
    """The candidates in a seeded order, cut into assessments of exactly ``k`` (a shorter rest is left out);
    ``k`` at least the passage's count: the whole passage."""
    if k >= len(cands):
        return [cands]
    order = cands[:]
    rng.shuffle(order)
    return [order[i : i + k] for i in range(0, len(order) - k + 1, k)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="path stem: writes STEM.md (sample) and STEM.jsonl (all)")
    ap.add_argument("--k", default="1,2,3,10", help="candidate counts per assessment (comma-separated)")
    ap.add_argument("--sample", type=int, default=100, help="forced flags written for reading (spread over rules)")
    ap.add_argument("--limit", type=int, default=0, help="first N passages only")
    ap.add_argument("--stride", type=int, default=1, help="every Nth passage only (a spread sample on a busy machine)")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--model", default=get_settings().risk.model)
    args = ap.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    sources, models = load_dev()
    names = sorted(models)
    human = human_translations()
    # the novelty index only moves unforced scores: without it (not built) the forced flags are the same
    assess = Assessor(args.model, novelty=Path(get_settings().index.path).exists())
    pids = sorted(sources)[:: args.stride]
    pids = pids[: args.limit] if args.limit else pids
    forced: list[dict[str, Any]] = []
    seen: Counter[int] = Counter()
    t0 = time.perf_counter()
    for pid in pids:
        cands = [(m, models[m][pid]) for m in names if models[m].get(pid, "").strip()]
        for k in ks:
            rng = random.Random(f"{args.seed}:{pid}:{k}")
            for group in groups(cands, k, rng):
                assess(sources[pid], group)
                for cid, _ in group:
                    seen[k] += 1
                    res = assess.last_scored[cid]
                    rule = res.result.forced_by_flag
                    if rule is None:
                        continue
                    flag = next(f for f in res.flags if f.rule == rule)
                    forced.append(
                        {
                            "k": k,
                            "passage": pid,
                            "model": cid,
                            "rule": rule,
                            "severity": flag.severity,
                            "detail": flag.detail,
                            "peers": [c for c, _ in group if c != cid],
                        }
                    )
    elapsed = time.perf_counter() - t0
    by_k: dict[int, Counter[str]] = defaultdict(Counter)
    for f in forced:
        by_k[f["k"]][f["rule"]] += 1
    print(f"{len(pids)} passages, model {args.model}, {elapsed:.0f} s")
    print(f"untouched candidates forced up per K (target <= {TARGET_FORCED:.0%}):")
    for k in ks:
        n = sum(by_k[k].values())
        rules = ", ".join(f"{r} {c}" for r, c in by_k[k].most_common())
        print(f"  K={k:2d}: {n:4d}/{seen[k]:5d} = {n / max(1, seen[k]):6.2%}  ({rules})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.with_suffix(".jsonl").open("w", encoding="utf-8") as fh:
        for f in forced:
            fh.write(json.dumps(f, ensure_ascii=False) + "\n")
    # the sample: round-robin over rules (seeded), so a rare rule is read as well as a frequent one
    rng = random.Random(args.seed)
    per_rule: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in forced:
        per_rule[f["rule"]].append(f)
    for rows in per_rule.values():
        rng.shuffle(rows)
    sample: list[dict[str, Any]] = []
    while len(sample) < args.sample and any(per_rule.values()):
        for rule in sorted(per_rule):
            if per_rule[rule] and len(sample) < args.sample:
                sample.append(per_rule[rule].pop())
    sample.sort(key=lambda f: (f["rule"], f["passage"], f["model"], f["k"]))
    lines = [f"# Forced flags on untouched palibench-dev candidates ({args.model}, seed {args.seed})", ""]
    for i, f in enumerate(sample, 1):
        pid, cid = f["passage"], f["model"]
        lines += [
            f"## {i}. {f['rule']} ({f['severity']}) {pid} {cid} K={f['k']}",
            "",
            f"**detail**: {f['detail']}",
            "",
            f"**pali**: {sources[pid]}",
            "",
            f"**candidate**: {models[cid][pid]}",
            "",
            f"**sujato**: {human.get(pid, '(none)')}",
            "",
            "**verdict**: ",
            "",
        ]
    args.out.with_suffix(".md").write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {args.out.with_suffix('.md')} ({len(sample)} sampled) and {args.out.with_suffix('.jsonl')}")


if __name__ == "__main__":
    main()
