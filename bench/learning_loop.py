"""The learning loop end to end through the API: does a fit from reviewers' verdicts make the ranking worse?

On the dev challenge (``challenge_set.build``: one injected error per item, assessed with the untouched translations
of its passage as peers), the suttas are split in two by a hash of their names. Every item is assessed with the
active model ("before"); simulated reviewers give verdicts on the first half (the injected candidate MAJOR with its
error type as category and each of its findings accepted; an untouched one VALID, or MINOR when PaliBench calls it a
drifting outlier, its findings rejected); the admin fits from them and activates the fit (the service may refuse it:
409, printed); the second half is assessed again ("after"). Per error type: the share of injected errors above the
90th percentile of the untouched candidates' ``risk.priority`` of the same half, with Wilson intervals; a type
**loses** when its after share is below the lower end of its before interval.

    .venv/bin/python bench/learning_loop.py [--per-variant 4] [--workers 1] [--index var/index/pli-sutta.trisk]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from challenge_set import build, load_dev, load_outlier_labels  # noqa: E402

from service.core.findings import findings_of  # noqa: E402
from service.core.metrics import wilson_interval  # noqa: E402
from service.core.types import Flag  # noqa: E402
from service.platform.settings import Settings  # noqa: E402
from service.review import item_id_of  # noqa: E402
from service.review.calibration.compare import sutta_of  # noqa: E402
from service.state.durable import open_store  # noqa: E402
from service.state.durable.access import issue_key  # noqa: E402
from tests.support.evaluation import Benchmark, Stack, evaluate, one_host_env, wait_ready  # noqa: E402

INJECTED = "injected"
CATEGORY = {  # the typology category a reviewer files each injected error under
    "number": "accuracy/number",
    "name": "accuracy/name",
    "negation": "accuracy/negation",
    "term": "accuracy/terminology",
    "omission": "accuracy/omission",
    "addition": "accuracy/addition",
    "truncation": "accuracy/omission",
    "copy_full": "accuracy/untranslated",
    "copy_partial": "accuracy/untranslated",
}


def passages(rows: list[dict[str, str]]) -> Benchmark:
    """Each challenge item as a passage: the injected candidate with the untouched translations as its peers."""
    sources, models = load_dev()
    out = []
    for r in rows:
        pid = r["passage_id"]
        cands = [{"id": INJECTED, "text": r["corrupted"], "model": r["model"]}]
        cands += [
            {"id": m, "text": models[m][pid], "model": m}
            for m in sorted(models)
            if m != r["model"] and pid in models[m]
        ]
        out.append({"id": pid, "source": sources[pid], "candidates": cands})
    return Benchmark(passages=out, labels={})


def assess(url: str, key: str, rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The items through the API as batches (``evaluation.evaluate``), results in the items' order."""
    return evaluate(passages(rows), url, None, key)


def shares(rows: list[dict[str, str]], results: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per error type (and "all"): (injected above the untouched 90th percentile, injected)."""
    untouched, injected = [], []
    for row, res in zip(rows, results, strict=True):
        for c in res["candidates"]:
            p = float(c["risk"]["priority"])
            (injected if c["id"] == INJECTED else untouched).append(
                (row["error_type"], p) if c["id"] == INJECTED else p
            )
    cut = float(np.quantile(np.asarray(untouched), 0.9))
    out: dict[str, tuple[int, int]] = {}
    for etype, p in injected:
        for key in (etype, "all"):
            k, n = out.get(key, (0, 0))
            out[key] = (k + (p > cut), n + 1)
    return out


def verdicts(client: Any, rows: list[dict[str, str]], results: list[dict[str, Any]]) -> int:
    outlier = load_outlier_labels()
    n = 0
    for row, res in zip(rows, results, strict=True):
        for c in res["candidates"]:
            flags = [Flag(**{k: v for k, v in f.items() if k in ("rule", "severity", "detail")}) for f in c["flags"]]
            injected = c["id"] == INJECTED
            judged = [{"finding": f.id, "decision": "accept" if injected else "reject"} for f in findings_of(flags)]
            if injected:
                body = {"label": "MAJOR", "error_category": CATEGORY[row["error_type"]], "findings": judged}
            else:
                body = {"label": "MINOR" if outlier.get((row["passage_id"], c["id"])) else "VALID", "findings": judged}
            r = client.post(f"/v1/review/items/{item_id_of(res['id'], c['id'])}/verdict", json=body)
            if r.status_code != 201:
                raise SystemExit(f"verdict refused: {r.status_code} {r.text[:300]}")
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-variant", type=int, default=4)
    ap.add_argument("--seed", type=int, default=20260605)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--index", default=str(ROOT / "var" / "index" / "pli-sutta.trisk"))
    args = ap.parse_args(argv)
    import httpx

    rows = build(args.per_variant, args.seed)
    half = [zlib.crc32(sutta_of(r["passage_id"]).encode()) % 2 for r in rows]
    train = [r for r, h in zip(rows, half, strict=True) if h == 0]
    test = [r for r, h in zip(rows, half, strict=True) if h == 1]
    print(f"{len(rows)} challenge items: {len(train)} for verdicts, {len(test)} re-assessed")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
    folder = Path(tempfile.mkdtemp(prefix="trisk-loop-"))
    stack = Stack(None, args.workers, env=one_host_env(folder, Path(args.index)), log_dir=folder)
    try:
        token, _ = issue_key(open_store(Settings.from_env(stack.env).durable), "evaluation", "loop admin", ["admin"])
        with httpx.Client(base_url=stack.url, timeout=300, headers={"Authorization": f"Bearer {token}"}) as client:
            wait_ready(client)
            t0 = time.time()
            before_train = assess(stack.url, token, train)
            before = assess(stack.url, token, test)
            n = verdicts(client, train, before_train)
            print(f"{n} verdicts on {len(train)} items' candidates ({time.time() - t0:.0f} s so far)")
            rep = client.get("/v1/calibration/report").json()
            for d in rep.get("checks", {}).get("demotions", []):
                print(f"  demotion proposed: {d['check']}: {d['reason']}")
            fit = client.post("/v1/calibration/fits", json={})
            if fit.status_code != 201:
                print(f"fit refused: {fit.status_code} {fit.json().get('detail')}")
                return 1
            out = fit.json()
            val = out["fit"]["validation"]
            print(f"fit {out['rule']}: terms {[s['name'] for s in out['signals']]}, forcing {out['fit']['forcing']}")
            print(f"  validation on {val['n_items']} held-apart items ({val['n_major']} MAJOR): loses={val['loses']}")
            act = client.post(out["activate_url"])
            activated = act.status_code == 200
            print(f"activation: {act.status_code}" + ("" if activated else f" {act.json().get('detail')}"))
            after = assess(stack.url, token, test)
            print(f"loop in {time.time() - t0:.0f} s")
    finally:
        stack.close()
    b, a = shares(test, before), shares(test, after)
    for name, res in (("before", before), ("after", after)):
        rules = sorted({c["risk"]["rule"] for r in res for c in r["candidates"]})
        print(f"{name}: scored with {', '.join(rules)}")
    state = "fit active" if activated else "fit refused, model unchanged"
    print(f"\ninjected errors above the untouched 90th percentile, re-assessed half ({state})")
    print(f"{'type':14s} {'n':>4s} {'before':>6s} {'95% Wilson':>14s} {'after':>6s} {'95% Wilson':>14s}")
    lost = []
    for etype in sorted(b, key=lambda t: (t == "all", t)):
        (kb, n), (ka, _) = b[etype], a[etype]
        lo_b, hi_b = wilson_interval(kb, n)
        lo_a, hi_a = wilson_interval(ka, n)
        flag = ""
        if ka / n < lo_b:
            flag = "  LOSES beyond its interval"
            lost.append(etype)
        print(f"{etype:14s} {n:4d} {kb / n:6.2f} [{lo_b:.2f}, {hi_b:.2f}] {ka / n:6.2f} [{lo_a:.2f}, {hi_a:.2f}]{flag}")
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"\n{'no type loses beyond its interval' if not lost else 'LOST: ' + ', '.join(lost)}; uptime: {load}")
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
