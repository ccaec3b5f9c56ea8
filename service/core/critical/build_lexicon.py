"""Build the Pali -> English translation lexicon (models/lexicon/) from the segment-aligned bilara corpus.

    .venv/bin/trisk build-lexicon [--aligner eflomal|ibm1] [--out models/lexicon/pli-en.json.gz]

Pali tokens are crude stems (``tokens.pali_stem``), English tokens crude stems (``tokens.en_stem``), exactly as the
checker reads them at run time. Word links come from a word aligner over every segment pair with both sides (the
PaliBench dev suttas and a held-out twentieth of the texts left out); the expected link counts of both directions,
averaged, give p(English | Pali stem) and p(Pali stem | English), pruned to the renderings that matter.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import msgspec
import numpy as np

from service.core.artifacts import signature_id
from service.core.critical.aligner import AlignParams, LinkCounts, align_counts
from service.core.critical.build_glossary import Segment, aligned_segments, dev_texts
from service.core.critical.renderings import (
    FORMAT_VERSION,
    LEXICON_FILE,
    LexiconFile,
    LexiconParams,
    content_word,
    english_stems,
    pali_stems,
)

__all__ = ["HELD_OUT", "build", "held_out", "main", "training_segments"]

HELD_OUT = 20  # one text in twenty is never trained on (lexicon quality is measured there)


def held_out(text_id: str) -> bool:
    """Whether a text belongs to the held-out twentieth (a stable hash of its id)."""
    return hashlib.sha256(text_id.encode()).digest()[0] % HELD_OUT == 0


def training_segments() -> tuple[list[Segment], list[Segment]]:
    """(training, held-out) segment pairs; the PaliBench dev suttas are in neither."""
    train: list[Segment] = []
    test: list[Segment] = []
    for seg in aligned_segments(dev_texts()):
        (test if held_out(seg.text_id) else train).append(seg)
    return train, test


def _corpus_sha256(segments: Sequence[Segment]) -> str:
    h = hashlib.sha256()
    for s in segments:
        h.update(f"{s.translator}\x00{s.key}\x00{s.pli}\x00{s.en}\x01".encode())
    return h.hexdigest()


class _Vocab:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {"": 0}  # 0 = NULL
        self.words = [""]

    def encode(self, words: Sequence[str]) -> np.ndarray:
        out = np.empty(len(words), dtype=np.int32)
        for k, w in enumerate(words):
            i = self.ids.get(w)
            if i is None:
                i = self.ids[w] = len(self.words)
                self.words.append(w)
            out[k] = i
        return out


def _eflomal_counts(src: list[np.ndarray], tgt: list[np.ndarray], pv: _Vocab, ev: _Vocab, seed: int) -> LinkCounts:
    """Links of eflomal (Bayesian HMM with fertility, Gibbs sampling) in both directions, each link counted 1/2."""
    import eflomal  # an optional build dependency (pip install eflomal)

    keep = [i for i in range(len(src)) if src[i].shape[0] and tgt[i].shape[0]]
    s_txt = [" ".join(pv.words[x] for x in src[i]) for i in keep]
    t_txt = [" ".join(ev.words[x] for x in tgt[i]) for i in keep]
    np.random.seed(seed)  # eflomal seeds its samplers from numpy's global generator
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        eflomal.Aligner(n_samplers=2).align(s_txt, t_txt, links_filename_fwd=str(fwd), links_filename_rev=str(rev))
        keys: list[int] = []
        n_e = len(ev.words)
        for path in (fwd, rev):
            for i, line in zip(keep, path.read_text().splitlines(), strict=True):
                f, e = src[i], tgt[i]
                for link in line.split():
                    a, b = link.split("-")
                    keys.append(int(f[int(a)]) * n_e + int(e[int(b)]))
    uniq, counts = np.unique(np.asarray(keys, dtype=np.int64), return_counts=True)
    return LinkCounts(src=(uniq // n_e).astype(np.int32), tgt=(uniq % n_e).astype(np.int32), count=counts / 2.0)


def _table(
    links: LinkCounts,
    by_src: bool,
    src_words: list[str],
    tgt_words: list[str],
    src_freq: np.ndarray,
    tgt_freq: np.ndarray,
    params: LexiconParams,
) -> dict[str, list[tuple[str, float]]]:
    """p(tgt | src) per source stem (``by_src``) or p(src | tgt) per English stem, pruned by ``params``."""
    key, other = (links.src, links.tgt) if by_src else (links.tgt, links.src)
    freq = src_freq if by_src else tgt_freq
    words_key, words_other = (src_words, tgt_words) if by_src else (tgt_words, src_words)
    totals = np.bincount(key, weights=links.count, minlength=len(words_key))
    prob = links.count / np.maximum(totals[key], 1e-12)
    ok = (key != 0) & (other != 0) & (prob >= params.min_prob) & (freq[key] >= params.min_count)
    if by_src:
        ok &= np.array([content_word(w) for w in tgt_words])[other]
    else:
        ok &= np.array([content_word(w) for w in tgt_words])[key]
    idx = np.flatnonzero(ok)
    idx = idx[np.lexsort((-prob[idx], key[idx]))]
    out: dict[str, list[tuple[str, float]]] = {}
    for i in idx:
        row = out.setdefault(words_key[key[i]], [])
        if len(row) < params.top:
            row.append((words_other[other[i]], round(float(prob[i]), 3)))
    return out


def build(aligner: str = "eflomal", params: LexiconParams | None = None) -> tuple[LexiconFile, list[Segment]]:
    """The lexicon of the training segments, and the held-out segments it never saw."""
    params = params or LexiconParams(aligner=aligner)
    t0 = time.perf_counter()
    train, test = training_segments()
    if not train:
        raise SystemExit("no aligned segments: is the bilara corpus at TRISK_SHARED_DIR/corpus/bilara?")
    pv, ev = _Vocab(), _Vocab()
    src = [pv.encode(pali_stems(s.pli)) for s in train]
    tgt = [ev.encode(english_stems(s.en)) for s in train]
    t_tok = time.perf_counter()
    align = AlignParams(**{k: getattr(params, k) for k in ("iterations", "null_prob", "diagonal_tension")})
    if params.aligner == "eflomal":
        links = _eflomal_counts(src, tgt, pv, ev, params.seed)
    elif params.aligner == "ibm1":
        links = align_counts(src, tgt, len(pv.words), len(ev.words), align)
    else:
        raise SystemExit(f"unknown aligner {params.aligner!r} (eflomal or ibm1)")
    t_align = time.perf_counter()
    pf = np.bincount(np.concatenate(src), minlength=len(pv.words))
    ef = np.bincount(np.concatenate(tgt), minlength=len(ev.words))
    pali = _table(links, True, pv.words, ev.words, pf, ef, params)
    english = _table(links, False, pv.words, ev.words, pf, ef, params)
    signature: dict[str, object] = {
        "format_version": FORMAT_VERSION,
        "name": "pli-en",
        "segments": len(train),
        "held_out_segments": len(test),
        "excluded": "PaliBench dev suttas; texts whose sha256(id)[0] % 20 == 0 (held out)",
        "corpus_sha256": _corpus_sha256(train),
        "params": asdict(params),
        "libraries": _libraries(params.aligner),
        "entries": {"pali": len(pali), "english": len(english)},
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": {
            "tokens": round(t_tok - t0, 1),
            "align": round(t_align - t_tok, 1),
            "total": round(time.perf_counter() - t0, 1),
        },
    }
    signature["id"] = signature_id(signature)
    freq = {pv.words[i]: int(pf[i]) for i in range(1, len(pv.words)) if pv.words[i] in pali}
    return LexiconFile(signature=signature, pali=pali, english=english, pali_count=freq), test


def _libraries(aligner: str) -> dict[str, str]:
    out = {"numpy": np.__version__, "msgspec": msgspec.__version__}
    if aligner == "eflomal":
        from importlib.metadata import version

        out["eflomal"] = version("eflomal")
    return out


def write(lexicon: LexiconFile, path: Path) -> int:
    """Write the artifact (gzip of compact JSON, mtime 0 so the same build gives the same bytes); its size."""
    raw = msgspec.json.encode(lexicon)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = gzip.compress(raw, compresslevel=9, mtime=0)
    path.write_bytes(data)
    return len(data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aligner", choices=("eflomal", "ibm1"), default="eflomal")
    ap.add_argument("--out", type=Path, default=LEXICON_FILE)
    args = ap.parse_args(argv)
    lexicon, _ = build(args.aligner)
    size = write(lexicon, args.out)
    sig = lexicon.signature
    print(
        f"wrote {args.out} ({size / 1024:.0f} KiB): {sig['entries']} from {sig['segments']} segments "
        f"with {args.aligner}, {sig['build_seconds']} s; signature {sig['id']}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
