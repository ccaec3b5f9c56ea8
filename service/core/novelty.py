"""Source novelty: the research's four corpus components, their z-scores and the combined index, built and queried.

novelty = (z(rare content words) + z(rare char 5-grams) - z(repeated 5-10 word formulas) - z(neighbour similarity)) / 4

Build is vectorised: n-grams are 64-bit hashes (``service.core.ngrams``), document frequencies come from sorting,
and the top-5 TF-IDF neighbour search sketches every passage into a small dense space (a signed count sketch of the
char 3-5-gram TF-IDF vector), takes the ``rerank`` best candidates by sketch similarity with BLAS, and re-scores
those candidates with the exact sparse cosine. Nothing is quadratic in Python.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import scipy
import scipy.sparse as sp

from service.core.artifacts import signature_id
from service.core.corpus import FilterRules, Passage, apply_filters
from service.core.ngrams import char_ngram_hashes, mix64, token_ngram_hashes
from service.core.text import get_normaliser
from service.platform.errors import InputError, NotFound

logger = logging.getLogger("trisk.novelty")

__all__ = [
    "COMPONENTS",
    "IndexParams",
    "NoveltyIndex",
    "NoveltyResult",
    "build_index",
    "combine",
    "load_indexes",
]

FORMAT_VERSION = 1
COMPONENTS = ("rare_words", "rare_char5", "formulas", "neighbour_sim")
# sign of each component in the combined index: rarity raises novelty, formulas and dense neighbourhoods lower it
SIGNS = {"rare_words": 1.0, "rare_char5": 1.0, "formulas": -1.0, "neighbour_sim": -1.0}
BANDS = ("low", "middle", "high")


@dataclass(frozen=True)
class IndexParams:
    """Everything that changes the numbers; recorded in the artifact signature."""

    rare_word_max_df: int = 10
    rare_char_max_df: int = 3
    char_n: int = 5
    formula_min_n: int = 5
    formula_max_n: int = 10
    # a word n-gram counts as a stock formula when at least this many passages contain it
    formula_min_df: int = 3
    tfidf_min_n: int = 3
    tfidf_max_n: int = 5
    neighbours: int = 5
    sketch_dim: int = 256
    rerank: int = 16
    chunk_rows: int = 1024
    filters: FilterRules = field(default_factory=FilterRules)


def combine(z: dict[str, float]) -> float:
    """The research's combination of the four z-scored components."""
    return sum(SIGNS[c] * z[c] for c in COMPONENTS) / len(COMPONENTS)


@dataclass
class Neighbour:
    passage_id: str
    similarity: float


@dataclass
class NoveltyResult:
    """Novelty of one text or corpus passage against an index."""

    index: float
    raw: dict[str, float]
    z: dict[str, float]
    band: str
    percentile: float
    neighbours: list[Neighbour]
    passage_id: str | None = None
    # "corpus" when the text is a corpus passage (stored values), "computed" for a new text
    source: str = "computed"
    content_tokens: int = 0
    eligible: bool = True
    excluded_by: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------- build


def _doc_freq(
    hashes: np.ndarray, docs: np.ndarray, n_docs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unique hashes (sorted), their document frequency, and the (term, doc, count) triples."""
    uniq, inv = np.unique(hashes, return_inverse=True)
    key = inv.astype(np.int64) * np.int64(n_docs) + docs
    pair, tf = np.unique(key, return_counts=True)
    terms = pair // n_docs
    pair_docs = pair % n_docs
    df = np.bincount(terms, minlength=uniq.shape[0]).astype(np.int32)
    return uniq, df, np.stack([terms, pair_docs]), tf


def _tfidf(n_docs: int, term_doc: np.ndarray, tf: np.ndarray, df: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
    """L2-normalised TF-IDF rows (sklearn's smooth idf: ln((1+N)/(1+df)) + 1)."""
    idf = (np.log((1.0 + n_docs) / (1.0 + df)) + 1.0).astype(np.float32)
    vals = tf.astype(np.float32) * idf[term_doc[0]]
    x = sp.csr_matrix((vals, (term_doc[1], term_doc[0])), shape=(n_docs, df.shape[0]), dtype=np.float32)
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    x = sp.csr_matrix(sp.diags(1.0 / norms).astype(np.float32) @ x)
    x.sort_indices()
    return x, idf


def _sketch_matrix(vocab: np.ndarray, dim: int) -> sp.csr_matrix:
    """Signed count sketch: each term goes to one of ``dim`` buckets with a sign, both from its hash."""
    bits = mix64(vocab ^ np.uint64(0xD1B54A32D192ED03))
    bucket = (bits % np.uint64(dim)).astype(np.int64)
    sign = np.where((bits >> np.uint64(63)) == 1, 1.0, -1.0).astype(np.float32)
    return sp.csr_matrix((sign, (np.arange(vocab.shape[0]), bucket)), shape=(vocab.shape[0], dim))


def _normalise_rows(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (m / norms).astype(np.float32)


def _exact_rerank(x: sp.csr_matrix, rows: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """Exact cosine of each row with each of its candidate rows (both L2-normalised)."""
    k = cands.shape[1]
    left = x[np.repeat(rows, k)]
    right = x[cands.ravel()]
    return np.asarray(left.multiply(right).sum(axis=1)).reshape(rows.shape[0], k)


_BLOCK = 64
_COARSE_DIM = 64
_COARSE_POOL = 1024
_COARSE_MIN_ROWS = 4 * _COARSE_POOL


def _top_candidates(approx: np.ndarray, k: int, n_valid: int) -> np.ndarray:
    """Column indices of the ``k`` largest entries of each row, without a full-row argpartition.

    The row is cut into blocks of 64; the ``k`` largest entries lie inside the ``k`` blocks with the largest maxima
    (a block holding one of them has a maximum at least that large), so only ``k * 64`` entries per row are ranked.
    ``approx`` has a multiple of 64 columns; columns from ``n_valid`` on are padding.
    """
    rows, cols = approx.shape
    approx[:, n_valid:] = -np.inf
    nblocks = cols // _BLOCK
    kb = min(k, nblocks)
    block_max = approx.reshape(rows, nblocks, _BLOCK).max(axis=2)
    top_blocks = (
        np.argpartition(-block_max, kb - 1, axis=1)[:, :kb] if kb < nblocks else np.tile(np.arange(nblocks), (rows, 1))
    )
    cand_cols = (top_blocks[:, :, None] * _BLOCK + np.arange(_BLOCK)).reshape(rows, -1)
    vals = np.take_along_axis(approx, cand_cols, axis=1)
    pick = np.argpartition(-vals, k - 1, axis=1)[:, :k]
    return np.take_along_axis(cand_cols, pick, axis=1)


def _top_neighbours(
    x: sp.csr_matrix, sketch: np.ndarray, k: int, rerank: int, chunk: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` neighbours (indices, exact cosines) of every row among the other rows."""
    n = x.shape[0]
    rerank = max(k, min(rerank, n - 1))
    out_idx = np.zeros((n, k), dtype=np.int32)
    out_sim = np.zeros((n, k), dtype=np.float32)
    if n <= 1:
        return out_idx, out_sim
    padded = np.zeros((-(-n // _BLOCK) * _BLOCK, sketch.shape[1]), dtype=np.float32)
    padded[:n] = sketch
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        approx = sketch[lo:hi] @ padded.T
        approx[np.arange(hi - lo), np.arange(lo, hi)] = -np.inf  # never your own neighbour
        cand = _top_candidates(approx, rerank, n)
        exact = _exact_rerank(x, np.arange(lo, hi), cand)
        exact[(cand == np.arange(lo, hi)[:, None]) | (cand >= n)] = -np.inf
        order = np.argsort(-exact, axis=1, kind="stable")[:, :k]
        out_idx[lo:hi] = np.take_along_axis(cand, order, axis=1)
        out_sim[lo:hi] = np.take_along_axis(exact, order, axis=1)
    return out_idx, np.maximum(out_sim, 0.0)


def _percentile_of(sorted_ref: np.ndarray, value: float) -> float:
    """Share of the reference distribution at or below ``value`` (0-100)."""
    if sorted_ref.shape[0] == 0:
        return 50.0
    return float(100.0 * np.searchsorted(sorted_ref, value, side="right") / sorted_ref.shape[0])


def corpus_hash(passages: list[Passage]) -> str:
    h = hashlib.sha256()
    for p in passages:
        h.update(p.id.encode())
        h.update(b"\x00")
        h.update(p.text.encode())
        h.update(b"\x01")
    return h.hexdigest()


def build_index(
    passages: list[Passage], *, lang: str | None = None, params: IndexParams | None = None, name: str = "corpus"
) -> NoveltyIndex:
    """Compute the four components for every passage and everything needed to score new texts."""
    params = params or IndexParams()
    if not passages:
        raise InputError("cannot build a novelty index from an empty corpus")
    lang = get_normaliser(lang or passages[0].lang).lang
    norm = get_normaliser(lang)
    t0 = time.perf_counter()
    n = len(passages)
    tokens = [norm.content_tokens(p.text) for p in passages]
    strings = [" ".join(t) for t in tokens]

    # 1. content-word rarity: share of content tokens whose document frequency is <= rare_word_max_df
    vocab: dict[str, int] = {}
    tok_ids = [
        np.fromiter((vocab.setdefault(t, len(vocab)) for t in ts), dtype=np.int64, count=len(ts)) for ts in tokens
    ]
    doc_of_tok = np.repeat(np.arange(n, dtype=np.int64), [len(t) for t in tokens])
    all_ids = np.concatenate(tok_ids) if tok_ids else np.empty(0, np.int64)
    pairs = np.unique(all_ids * n + doc_of_tok)
    word_df = np.bincount(pairs // n, minlength=len(vocab)).astype(np.int32)
    n_tok = np.array([len(t) for t in tokens], dtype=np.float64)
    rare_tok = np.bincount(doc_of_tok, weights=(word_df[all_ids] <= params.rare_word_max_df), minlength=n)
    rare_words = np.divide(rare_tok, n_tok, out=np.zeros(n), where=n_tok > 0)

    # 2+4. char n-grams: 5-gram rarity and the 3-5-gram TF-IDF space share one hashing pass
    sizes = tuple(range(params.tfidf_min_n, params.tfidf_max_n + 1))
    if params.char_n not in sizes:
        sizes = (*sizes, params.char_n)
    ch_hash, ch_doc, ch_size = char_ngram_hashes(strings, sizes)
    ch_vocab, ch_df, term_doc, tf = _doc_freq(ch_hash, ch_doc, n)
    is5 = ch_size == params.char_n
    occ5 = np.bincount(ch_doc[is5], minlength=n).astype(np.float64)
    rare5_mask = is5.copy()
    rare5_mask[is5] = ch_df[np.searchsorted(ch_vocab, ch_hash[is5])] <= params.rare_char_max_df
    rare5 = np.bincount(ch_doc[rare5_mask], minlength=n).astype(np.float64)
    rare_char5 = np.divide(rare5, occ5, out=np.zeros(n), where=occ5 > 0)
    # the 5-gram document frequencies a new text is scored against
    char5_vocab, char5_df = _vocab_of_size(ch_hash, ch_doc, is5, n)
    del ch_hash, ch_doc, ch_size

    # TF-IDF over the 3-5-grams only (char_n may lie outside that range)
    in_tfidf = _size_mask_for_vocab(ch_vocab, char5_vocab, params)
    x, idf = _tfidf_subset(n, term_doc, tf, ch_df, in_tfidf)
    tfidf_vocab = ch_vocab[in_tfidf]
    t_feat = time.perf_counter()

    # 3. formulas: word n-grams (5..10) that at least formula_min_df passages share, counted per occurrence
    f_sizes = tuple(range(params.formula_min_n, params.formula_max_n + 1))
    w_hash, w_doc, _ = token_ngram_hashes(tok_ids, f_sizes)
    if w_hash.shape[0]:
        w_vocab, w_df, _, _ = _doc_freq(w_hash, w_doc, n)
        rep = w_df[np.searchsorted(w_vocab, w_hash)] >= params.formula_min_df
        formulas = np.bincount(w_doc[rep], minlength=n).astype(np.float64)
        # a new text adds one document: n-grams one short of the threshold become formulas when it shares them
        keep = w_df >= max(params.formula_min_df - 1, 1)
        formula_vocab, formula_df = w_vocab[keep], w_df[keep]
    else:
        formulas = np.zeros(n)
        formula_vocab, formula_df = np.empty(0, np.uint64), np.empty(0, np.int32)

    # 4. neighbour similarity: mean exact cosine of the top-k other passages
    sketch = _normalise_rows(np.asarray((x @ _sketch_matrix(tfidf_vocab, params.sketch_dim)).todense()))
    nb_idx, nb_sim = _top_neighbours(x, sketch, params.neighbours, params.rerank, params.chunk_rows)
    neighbour_sim = nb_sim.mean(axis=1).astype(np.float64)
    t_nb = time.perf_counter()

    raw = np.stack([rare_words, rare_char5, formulas, neighbour_sim], axis=1)
    reasons, profile = apply_filters(passages, params.filters)
    eligible = np.array([not r for r in reasons], dtype=bool)
    ref = eligible if eligible.sum() >= 2 else np.ones(n, dtype=bool)
    mean = raw[ref].mean(axis=0)
    sd = raw[ref].std(axis=0, ddof=0)
    sd[sd == 0] = 1.0
    z = (raw - mean) / sd
    signs = np.array([SIGNS[c] for c in COMPONENTS])
    novelty = (z * signs).sum(axis=1) / len(COMPONENTS)
    ref_sorted = np.sort(novelty[ref])
    terciles = np.quantile(ref_sorted, [1 / 3, 2 / 3]) if ref_sorted.shape[0] else np.array([0.0, 0.0])

    signature = {
        "format_version": FORMAT_VERSION,
        "name": name,
        "lang": lang,
        "passages": n,
        "eligible_passages": int(eligible.sum()),
        "corpus_sha256": corpus_hash(passages),
        "params": _params_dict(params),
        "libraries": {"numpy": np.__version__, "scipy": scipy.__version__},
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": {
            "features": round(t_feat - t0, 2),
            "neighbours": round(t_nb - t_feat, 2),
            "total": round(time.perf_counter() - t0, 2),
        },
        "profile": {"total": profile.total, "removed": profile.removed, "kept": profile.kept},
    }
    index = NoveltyIndex(
        signature=signature,
        params=params,
        ids=[p.id for p in passages],
        raw=raw,
        z=z,
        novelty=novelty,
        eligible=eligible,
        excluded_by=reasons,
        content_token_counts=n_tok.astype(np.int32),
        mean=mean,
        sd=sd,
        ref_sorted=ref_sorted,
        terciles=terciles,
        nb_idx=nb_idx,
        nb_sim=nb_sim,
        word_vocab=list(vocab),
        word_df=word_df,
        char5_vocab=char5_vocab,
        char5_df=char5_df,
        formula_vocab=formula_vocab,
        formula_df=formula_df,
        tfidf_vocab=tfidf_vocab,
        idf=idf,
        x=x,
        sketch=sketch,
        string_hashes=np.array([_string_key(s) for s in strings], dtype=np.uint64),
    )
    # the signature covers the content: a file whose arrays were changed or damaged after the build no longer matches
    # the signature it carries, and the loader refuses it (``verify``)
    signature["content_sha256"] = index.content_digest()
    signature["id"] = signature_id(signature)
    return index


def _string_key(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")


def _vocab_of_size(
    hashes: np.ndarray, docs: np.ndarray, mask: np.ndarray, n_docs: int
) -> tuple[np.ndarray, np.ndarray]:
    uniq, df, _, _ = _doc_freq(hashes[mask], docs[mask], n_docs)
    return uniq, df


def _size_mask_for_vocab(vocab: np.ndarray, char5_vocab: np.ndarray, params: IndexParams) -> np.ndarray:
    if params.tfidf_min_n <= params.char_n <= params.tfidf_max_n:
        return np.ones(vocab.shape[0], dtype=bool)
    return ~np.isin(vocab, char5_vocab, assume_unique=True)


def _tfidf_subset(
    n: int, term_doc: np.ndarray, tf: np.ndarray, df: np.ndarray, keep: np.ndarray
) -> tuple[sp.csr_matrix, np.ndarray]:
    if keep.all():
        return _tfidf(n, term_doc, tf, df)
    remap = np.cumsum(keep) - 1
    sel = keep[term_doc[0]]
    td = np.stack([remap[term_doc[0][sel]], term_doc[1][sel]])
    return _tfidf(n, td, tf[sel], df[keep])


def _params_dict(params: IndexParams) -> dict[str, object]:
    d = asdict(params)
    d.pop("chunk_rows", None)  # affects speed and memory only, never the numbers
    return d


# ---------------------------------------------------------------------------------------------------------- index

_ARRAYS = (
    "raw z novelty eligible content_token_counts mean sd ref_sorted terciles nb_idx nb_sim word_df char5_vocab "
    "char5_df formula_vocab formula_df tfidf_vocab idf sketch string_hashes"
).split()


@dataclass(eq=False)
class NoveltyIndex:
    """A built corpus index: stored components for every passage and what scoring a new text needs."""

    signature: dict[str, object]
    params: IndexParams
    ids: list[str]
    raw: np.ndarray
    z: np.ndarray
    novelty: np.ndarray
    eligible: np.ndarray
    excluded_by: list[list[str]]
    content_token_counts: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    ref_sorted: np.ndarray
    terciles: np.ndarray
    nb_idx: np.ndarray
    nb_sim: np.ndarray
    word_vocab: list[str]
    word_df: np.ndarray
    char5_vocab: np.ndarray
    char5_df: np.ndarray
    formula_vocab: np.ndarray
    formula_df: np.ndarray
    tfidf_vocab: np.ndarray
    idf: np.ndarray
    x: sp.csr_matrix
    sketch: np.ndarray
    string_hashes: np.ndarray
    _word_ids: dict[str, int] = field(default_factory=dict, repr=False)
    _row_of: dict[str, int] = field(default_factory=dict, repr=False)
    _row_of_string: dict[int, int] = field(default_factory=dict, repr=False)
    _coarse: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # a 64-bucket sketch for the first, coarse pass of a query: folding count-sketch buckets b -> b % 64 is the
        # count sketch with 64 buckets, so no extra hashing; it reads 4x less memory per query than the full sketch
        dim = self.sketch.shape[1]
        if dim > _COARSE_DIM and dim % _COARSE_DIM == 0 and len(self.ids) > _COARSE_MIN_ROWS:
            folded = self.sketch.reshape(len(self.ids), dim // _COARSE_DIM, _COARSE_DIM).sum(axis=1)
            self._coarse: np.ndarray | None = _normalise_rows(folded)
        else:
            self._coarse = None
        self._word_ids = {w: i for i, w in enumerate(self.word_vocab)}
        self._row_of = {pid: i for i, pid in enumerate(self.ids)}
        self._row_of_string = {}
        for i, h in enumerate(self.string_hashes.tolist()):
            self._row_of_string.setdefault(h, i)

    # -- properties
    @property
    def lang(self) -> str:
        return str(self.signature["lang"])

    @property
    def signature_id(self) -> str:
        return str(self.signature["id"])

    def __len__(self) -> int:
        return len(self.ids)

    # -- integrity
    def content_digest(self) -> str:
        """sha256 over everything the index computes with (arrays, ids, vocabularies), in a fixed order."""
        h = hashlib.sha256()
        arrays = [*(getattr(self, name) for name in _ARRAYS), self.x.data, self.x.indices, self.x.indptr]
        for a in arrays:
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(a.reshape(-1).view(np.uint8).data)
        meta = [self.ids, self.word_vocab, self.excluded_by, list(self.x.shape)]
        h.update(json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode())
        return h.hexdigest()

    def verify(self, path: str | Path = "") -> None:
        """Refuse an index that does not match its own signature: content changed after the build, or a signature
        edited by hand. An artifact from before content digests (no ``content_sha256``) passes on its id alone."""
        where = f"{path}: " if path else ""
        if signature_id(self.signature) != self.signature_id:
            raise InputError(f"{where}index signature {self.signature_id} does not match its own fields; rebuild it")
        recorded = self.signature.get("content_sha256")
        if recorded is not None and recorded != self.content_digest():
            raise InputError(
                f"{where}index content does not match signature {self.signature_id} (damaged or altered); rebuild it"
            )

    # -- persistence
    def save(self, path: str | Path) -> Path:
        """Write the artifact as one uncompressed npz file (atomic rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "signature": self.signature,
            "params": _params_json(self.params),
            "ids": self.ids,
            "excluded_by": self.excluded_by,
            "word_vocab": self.word_vocab,
        }
        arrays = {name: getattr(self, name) for name in _ARRAYS}
        arrays["x_data"], arrays["x_indices"], arrays["x_indptr"] = self.x.data, self.x.indices, self.x.indptr
        arrays["x_shape"] = np.array(self.x.shape, dtype=np.int64)
        arrays["meta"] = np.frombuffer(json.dumps(meta, ensure_ascii=False).encode(), dtype=np.uint8)
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("wb") as fh:
            np.savez(fh, **arrays)
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> NoveltyIndex:
        """Read an artifact written by ``save``; refuses other format versions."""
        path = Path(path)
        if not path.exists():
            raise NotFound(f"no novelty index at {path}")
        with zipfile.ZipFile(path) as zf:
            arrays = {Path(n).stem: np.load(io.BytesIO(zf.read(n)), allow_pickle=False) for n in zf.namelist()}
        meta = json.loads(arrays.pop("meta").tobytes().decode())
        version = meta["signature"].get("format_version")
        if version != FORMAT_VERSION:
            raise InputError(f"{path}: index format {version}, this trisk reads format {FORMAT_VERSION}; rebuild it")
        shape = tuple(int(v) for v in arrays.pop("x_shape"))
        x = sp.csr_matrix((arrays.pop("x_data"), arrays.pop("x_indices"), arrays.pop("x_indptr")), shape=shape)
        return cls(
            signature=meta["signature"],
            params=_params_from_json(meta["params"]),
            ids=meta["ids"],
            excluded_by=meta["excluded_by"],
            word_vocab=meta["word_vocab"],
            x=x,
            **{name: arrays[name] for name in _ARRAYS},
        )

    # -- queries
    def has_passage(self, passage_id: str) -> bool:
        return passage_id in self._row_of

    def passage(self, passage_id: str) -> NoveltyResult:
        """The stored novelty of a corpus passage."""
        row = self._row_of.get(passage_id)
        if row is None:
            raise NotFound(f"passage {passage_id!r} is not in index {self.signature_id}")
        return self._stored(row)

    def score(self, text: str) -> NoveltyResult:
        """Novelty of a new text, as if it were one more passage of the corpus (its own counts add one to every
        document frequency). A text identical, after normalisation, to a corpus passage gets that passage's values."""
        norm = get_normaliser(self.lang)
        tokens = norm.content_tokens(text)
        if not tokens:
            raise InputError(
                f"text has no content words for {self.lang!r} (words of at least {norm.min_token_chars} letters "
                "that are not particles); novelty needs some"
            )
        string = " ".join(tokens)
        # a 64-bit hash of the normalised content string identifies a corpus passage (collisions: ~n^2 / 2^65)
        row = self._row_of_string.get(_string_key(string))
        if row is not None:
            return self._stored(row)
        raw, neighbours = self._components(tokens, string)
        return self._result(raw, neighbours, content_tokens=len(tokens))

    def _stored(self, row: int) -> NoveltyResult:
        raw = {c: float(v) for c, v in zip(COMPONENTS, self.raw[row], strict=True)}
        z = {c: float(v) for c, v in zip(COMPONENTS, self.z[row], strict=True)}
        nov = float(self.novelty[row])
        nbs = [
            Neighbour(self.ids[int(j)], round(float(s), 6))
            for j, s in zip(self.nb_idx[row], self.nb_sim[row], strict=True)
        ]
        return NoveltyResult(
            index=nov,
            raw=raw,
            z=z,
            band=self.band_of(nov),
            percentile=_percentile_of(self.ref_sorted, nov),
            neighbours=nbs,
            passage_id=self.ids[row],
            source="corpus",
            content_tokens=int(self.content_token_counts[row]),
            eligible=bool(self.eligible[row]),
            excluded_by=list(self.excluded_by[row]),
        )

    def band_of(self, novelty: float) -> str:
        lo, hi = float(self.terciles[0]), float(self.terciles[1])
        return BANDS[0] if novelty < lo else BANDS[1] if novelty < hi else BANDS[2]

    def _result(self, raw: np.ndarray, neighbours: list[Neighbour], *, content_tokens: int) -> NoveltyResult:
        z = (raw - self.mean) / self.sd
        nov = float((z * np.array([SIGNS[c] for c in COMPONENTS])).sum() / len(COMPONENTS))
        return NoveltyResult(
            index=nov,
            raw={c: float(v) for c, v in zip(COMPONENTS, raw, strict=True)},
            z={c: float(v) for c, v in zip(COMPONENTS, z, strict=True)},
            band=self.band_of(nov),
            percentile=_percentile_of(self.ref_sorted, nov),
            neighbours=neighbours,
            content_tokens=content_tokens,
            eligible=content_tokens >= self.params.filters.min_content_tokens,
            excluded_by=[] if content_tokens >= self.params.filters.min_content_tokens else ["too_few_content_tokens"],
        )

    def _components(self, tokens: list[str], string: str) -> tuple[np.ndarray, list[Neighbour]]:
        p = self.params
        # 1. rare content words (the new text is one more document: df + 1)
        ids = np.array([self._word_ids.get(t, -1) for t in tokens], dtype=np.int64)
        df = np.where(ids >= 0, self.word_df[np.maximum(ids, 0)], 0) + 1
        rare_words = float((df <= p.rare_word_max_df).mean())
        # 2. rare char 5-grams
        h5, _, _ = char_ngram_hashes([string], (p.char_n,))
        rare_char5 = (
            float((_lookup(self.char5_vocab, self.char5_df, h5) + 1 <= p.rare_char_max_df).mean()) if h5.size else 0.0
        )
        # 3. formulas: unseen words get ids no corpus n-gram can contain
        unseen = np.cumsum((ids < 0).astype(np.int64))
        tok_ids = np.where(ids >= 0, ids, -unseen)
        wh, _, _ = token_ngram_hashes([tok_ids], tuple(range(p.formula_min_n, p.formula_max_n + 1)))
        formulas = (
            float((_lookup(self.formula_vocab, self.formula_df, wh) + 1 >= p.formula_min_df).sum()) if wh.size else 0.0
        )
        neighbours = self._query_neighbours(string)
        sim = float(np.mean([nb.similarity for nb in neighbours])) if neighbours else 0.0
        return np.array([rare_words, rare_char5, formulas, sim]), neighbours

    def _exact_dots(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
        return _sparse_rows_dot(self.x, rows, cols, vals)

    def _query_neighbours(self, string: str) -> list[Neighbour]:
        p = self.params
        h, _, _ = char_ngram_hashes([string], tuple(range(p.tfidf_min_n, p.tfidf_max_n + 1)))
        uniq, tf = np.unique(h, return_counts=True)
        pos = np.searchsorted(self.tfidf_vocab, uniq)
        pos_c = np.minimum(pos, max(self.tfidf_vocab.shape[0] - 1, 0))
        known = (pos < self.tfidf_vocab.shape[0]) & (self.tfidf_vocab[pos_c] == uniq)
        unseen_idf = np.log(1.0 + len(self.ids)) + 1.0
        weights = tf * np.where(known, self.idf[pos_c], unseen_idf)
        norm = float(np.sqrt((weights**2).sum())) or 1.0
        cols, vals = pos_c[known], (weights[known] / norm).astype(np.float32)
        result: list[Neighbour] = []
        if cols.size and len(self.ids):
            bits = mix64(uniq[known] ^ np.uint64(0xD1B54A32D192ED03))
            bucket = (bits % np.uint64(self.sketch.shape[1])).astype(np.int64)
            sign = np.where((bits >> np.uint64(63)) == 1, 1.0, -1.0)
            q = np.zeros(self.sketch.shape[1], dtype=np.float32)
            np.add.at(q, bucket, sign * vals)
            q /= float(np.linalg.norm(q)) or 1.0
            k = min(max(p.rerank, p.neighbours), len(self.ids))
            if self._coarse is not None:
                qc = q.reshape(-1, _COARSE_DIM).sum(axis=0)
                coarse = self._coarse @ (qc / (float(np.linalg.norm(qc)) or 1.0))
                pool = np.argpartition(-coarse, _COARSE_POOL - 1)[:_COARSE_POOL]
                fine = self.sketch[pool] @ q
                cand = pool[np.argpartition(-fine, k - 1)[:k]]
            elif k < len(self.ids):
                cand = np.argpartition(-(self.sketch @ q), k - 1)[:k]
            else:
                cand = np.arange(len(self.ids))
            exact = self._exact_dots(cand, cols, vals)
            order = np.argsort(-exact, kind="stable")[: p.neighbours]
            result = [Neighbour(self.ids[int(cand[i])], round(max(float(exact[i]), 0.0), 6)) for i in order]
        return result


def _sparse_rows_dot(x: sp.csr_matrix, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Dot products of a few CSR rows with one sparse vector (``cols`` sorted, unique), in plain numpy: for a
    handful of rows this is several times faster than building scipy matrices for the product."""
    starts, ends = x.indptr[rows], x.indptr[rows + 1]
    lengths = ends - starts
    if lengths.sum() == 0 or cols.size == 0:
        return np.zeros(rows.shape[0])
    idx = np.concatenate([np.arange(a, b) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)])
    row_cols = x.indices[idx]
    pos = np.minimum(np.searchsorted(cols, row_cols), cols.size - 1)
    hit = cols[pos] == row_cols
    prod = np.where(hit, x.data[idx] * vals[pos], 0.0)
    owner = np.repeat(np.arange(rows.shape[0]), lengths)
    return np.bincount(owner, weights=prod, minlength=rows.shape[0])


def _lookup(vocab: np.ndarray, df: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """Document frequency of each hash (0 when the corpus never has it)."""
    if vocab.shape[0] == 0:
        return np.zeros(hashes.shape[0], dtype=np.int64)
    pos = np.minimum(np.searchsorted(vocab, hashes), vocab.shape[0] - 1)
    return np.where(vocab[pos] == hashes, df[pos], 0).astype(np.int64)


def _params_json(params: IndexParams) -> dict[str, object]:
    return asdict(params)


def _params_from_json(d: dict[str, object]) -> IndexParams:
    d = dict(d)
    filters = FilterRules(**d.pop("filters"))  # type: ignore[arg-type]
    return IndexParams(filters=filters, **d)  # type: ignore[arg-type]


def load_indexes(paths: str, expected: str = "") -> tuple[dict[str, NoveltyIndex], dict[str, str]]:
    """Load every artifact named in a comma-separated list, each verified against its signature and, when
    ``expected`` (``TRISK_INDEX_SIGNATURE``) names signature ids, against those; one that fails is reported (the
    API's readiness, the worker's heartbeat), not fatal. The API and the workers load through here alike."""
    indexes: dict[str, NoveltyIndex] = {}
    errors: dict[str, str] = {}
    pinned = {s.strip() for s in expected.split(",") if s.strip()}
    for raw in paths.split(","):
        path = raw.strip()
        if not path:
            continue
        try:
            index = NoveltyIndex.load(Path(path))
            index.verify(path)
            if pinned and index.signature_id not in pinned:
                raise InputError(
                    f"{path}: index signature {index.signature_id}, but TRISK_INDEX_SIGNATURE pins "
                    f"{', '.join(sorted(pinned))}: not the index of this release"
                )
        except Exception as exc:  # a broken artifact must not stop the service: ready reports it
            errors[path] = f"{type(exc).__name__}: {exc}"
            logger.error("novelty index %s not loaded: %s", path, exc)
            continue
        indexes[index.lang] = index
        logger.info("novelty index %s loaded: %s passages, signature %s", path, len(index), index.signature_id)
    return indexes, errors
