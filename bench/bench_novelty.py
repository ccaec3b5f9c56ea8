"""Novelty benchmarks: index build time (Sujato-English subset and the whole sutta folder), neighbour accuracy
against the exact top-5 cosine, artifact load time and memory, and HTTP latency of POST /v1/novelty.

    .venv/bin/python bench/bench_novelty.py                 # everything (builds twice: several minutes)
    .venv/bin/python bench/bench_novelty.py --only latency  # just the HTTP latency against a fresh server
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.core.corpus import load_bilara  # noqa: E402
from service.core.metrics import spearman  # noqa: E402
from service.core.novelty import NoveltyIndex, build_index  # noqa: E402
from service.platform.settings import SHARED_DIR, get_settings  # noqa: E402
from tests.support.evaluation import free_port, load_benchmark  # noqa: E402

BILARA = SHARED_DIR / "corpus" / "bilara"
SUJATO = BILARA / "translation" / "en" / "sujato"


def bench_build(out: Path) -> None:
    passages = load_bilara(BILARA, subdir="sutta", translation_dir=SUJATO)
    subset = [p for p in passages if p.translated_segments]
    for name, ps, target in (("sujato-english", subset, 60), ("whole-sutta", passages, 180)):
        t0 = time.perf_counter()
        index = build_index(ps, name=name)
        secs = time.perf_counter() - t0
        verdict = "OK" if secs < target else "OVER"
        print(
            f"build {name:15s} {len(ps):6d} passages  {secs:6.1f} s  (target < {target} s: {verdict})  "
            f"{json.dumps(index.signature['build_seconds'])}"
        )
        if name == "whole-sutta":
            index.save(out)
            accuracy(index)


def accuracy(index: NoveltyIndex, sample: int = 2000, seed: int = 0) -> None:
    """Spearman of the stored neighbour similarity against the exact top-5 cosine over the whole corpus."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(index), size=min(sample, len(index)), replace=False))
    exact = np.empty(rows.shape[0])
    k = index.params.neighbours
    for lo in range(0, rows.shape[0], 250):
        part = rows[lo : lo + 250]
        sims = (index.x[part] @ index.x.T).toarray()
        sims[np.arange(part.shape[0]), part] = -np.inf
        exact[lo : lo + 250] = np.sort(sims, axis=1)[:, -k:].mean(axis=1)
    ours = index.raw[rows, 3]
    rho = spearman(exact, ours)
    print(
        f"neighbour similarity vs exact top-{k} cosine on {rows.shape[0]} passages: Spearman {rho:.4f} "
        f"(target >= 0.98: {'OK' if rho >= 0.98 else 'BELOW'}); mean |diff| {np.abs(exact - ours).mean():.4f}"
    )


_HWM = "import re; hwm=lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))/1024;"


def bench_load(path: Path) -> None:
    """Load time and peak resident memory in a fresh process (VmHWM: ru_maxrss would count the forking parent)."""
    code = (
        _HWM + "import time; t=time.perf_counter();"
        f"from service.core.novelty import NoveltyIndex; ix=NoveltyIndex.load({str(path)!r});"
        "print(time.perf_counter()-t, hwm(), len(ix))"
    )
    base = subprocess.run(
        [sys.executable, "-c", _HWM + "import service.core.novelty; print(hwm())"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    secs, rss, n = res.stdout.split()
    print(
        f"load {n} passages: {float(secs):.2f} s (target < 3 s), peak RSS {float(rss):.0f} MB "
        f"(imports alone {float(base.stdout):.0f} MB; target < 1500 MB)"
    )


def dev_passages() -> list[str]:
    bench = load_benchmark(SHARED_DIR / "palibench-dev", BILARA / "root" / "pli" / "ms")
    return [p["source"] for p in bench.passages]


def bench_latency(index_path: Path, url: str | None, rounds: int) -> None:
    import httpx

    proc = None
    if url is None:
        port = free_port()
        env = {**os.environ, "TRISK_INDEX_PATH": str(index_path)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            for _ in range(200):
                try:
                    if client.get("/health/live").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            texts = dev_passages()
            for t in texts[:50]:  # warm up
                client.post("/v1/novelty", json={"text": t})
            # as sent (dev passages are corpus passages: the stored values answer) and as new texts (the first word
            # dropped, so all four components and the neighbour search are computed)
            variants = {"as corpus passages": texts, "as new texts": [t.split(" ", 1)[-1] for t in texts]}
            for label, batch in variants.items():
                lat, computed = [], 0
                for _ in range(rounds):
                    for t in batch:
                        t0 = time.perf_counter()
                        r = client.post("/v1/novelty", json={"text": t, "lang": "pli"})
                        lat.append((time.perf_counter() - t0) * 1000)
                        r.raise_for_status()
                        computed += r.json()["source"] == "computed"
                a = np.array(lat)
                p50, p99 = np.percentile(a, 50), np.percentile(a, 99)
                print(
                    f"POST /v1/novelty over HTTP, {len(batch)} PaliBench dev passages x {rounds} {label} "
                    f"({computed} computed): p50 {p50:.1f} ms (target < 10: {'OK' if p50 < 10 else 'OVER'}), "
                    f"p99 {p99:.1f} ms (target < 30: {'OK' if p99 < 30 else 'OVER'}), max {a.max():.1f} ms"
                )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["build", "load", "latency"], action="append")
    ap.add_argument("--index", default=get_settings().index.path, help="artifact to load / serve")
    ap.add_argument("--url", help="an already running server (default: start one)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    only = set(args.only or ["build", "load", "latency"])
    index_path = Path(args.index)
    if "build" in only:
        out = Path(tempfile.mkdtemp()) / "bench.trisk" if index_path.exists() else index_path
        bench_build(out)
        if not index_path.exists():
            index_path = out
    if "load" in only:
        bench_load(index_path)
    if "latency" in only:
        bench_latency(index_path, args.url, args.rounds)
    print(f"peak RSS of this script: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
