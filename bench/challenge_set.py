"""Seeded challenge set: inject known errors into real palibench-dev translations and write them as JSONL."""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from service.core.palibench import DEV_DIR, OUTLIER_DRIFT, load_palibench  # noqa: E402

DEV = DEV_DIR

ERROR_TYPES = (
    "number",
    "name",
    "negation_drop",
    "negation_add",
    "term",
    "omission",
    "addition",
    "truncation",
    "copy_full",
    "copy_partial",
)

_CARDINALS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_ORDINALS = ["second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"]
_BIG = ["hundred", "thousand"]
# Frequent names of the dev texts, in two kinds so a swap stays plausible (a person for a person).
_PERSONS = [
    "Sāriputta",
    "Moggallāna",
    "Ānanda",
    "Kassapa",
    "Anuruddha",
    "Rāhula",
    "Upāli",
    "Kaccāna",
    "Gotama",
    "Sakka",
    "Māra",
    "Pasenadi",
    "Anāthapiṇḍika",
    "Vacchagotta",
    "Cunda",
    "Nanda",
]
_PLACES = [
    "Sāvatthī",
    "Rājagaha",
    "Vesālī",
    "Kosambī",
    "Kapilavatthu",
    "Benares",
    "Campā",
    "Nāḷandā",
    "Kosala",
    "Magadha",
    "Sāketa",
    "Kusinārā",
]
# A doctrinal rendering and what a careless translation might put instead (a different term, not a synonym).
_TERM_SWAPS = {
    "suffering": "craving",
    "craving": "ignorance",
    "ignorance": "craving",
    "mindfulness": "concentration",
    "concentration": "mindfulness",
    "immersion": "mindfulness",
    "wisdom": "faith",
    "faith": "wisdom",
    "energy": "faith",
    "greed": "hatred",
    "hate": "delusion",
    "hatred": "delusion",
    "delusion": "greed",
    "equanimity": "rapture",
    "rapture": "equanimity",
    "perception": "feeling",
    "feeling": "perception",
    "consciousness": "perception",
    "cessation": "origin",
    "origin": "cessation",
    "impermanent": "painful",
    "ethics": "wisdom",
    "virtue": "wisdom",
    "liberation": "cessation",
    "freedom": "concentration",
    "compassion": "equanimity",
    "love": "compassion",
    "dispassion": "passion",
    "fetters": "hindrances",
    "hindrances": "fetters",
    "defilements": "hindrances",
    "rebirth": "death",
    "death": "rebirth",
    "merit": "wisdom",
    "skillful": "unskillful",
    "unskillful": "skillful",
    "wholesome": "unwholesome",
    "unwholesome": "wholesome",
    "pleasure": "pain",
    "pain": "pleasure",
    "happiness": "suffering",
    "desire": "hatred",
    "effort": "mindfulness",
    "absorption": "perception",
    "aggregates": "elements",
}
_AUX = re.compile(r"\b(is|are|was|were|can|will|should|would|does|do|did|has|have|had|could|may|must)\b ")
_NEG = re.compile(r"\b(not|never|no)\b ?|n['’]t\b", re.IGNORECASE)
_SENT = re.compile(r"(?<=[.!?])[\"”’]?\s+")


def _fold(w: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", w.lower()) if not unicodedata.combining(c))


def _case_like(new: str, old: str) -> str:
    return new.capitalize() if old[:1].isupper() else new


def model_id(stem: str) -> str:
    """The challenge set's id of a PaliBench model (its translation file stem without ``_reasoning-none``)."""
    return stem.removesuffix("_reasoning-none")


def load_dev() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(passage_id -> Pali source, model -> passage_id -> English) from the one PaliBench loader."""
    pb = load_palibench(DEV)
    return {p.id: p.source for p in pb.passages}, {model_id(m): pb.translations[m] for m in pb.models}


def load_outlier_labels(drift_threshold: float = OUTLIER_DRIFT) -> dict[tuple[str, str], bool]:
    """(passage_id, model) -> PaliBench outlier (normalized_drift above the threshold), model ids as in load_dev."""
    pb = load_palibench(DEV)
    return {
        (pid, model_id(m)): ref.normalized_drift > drift_threshold
        for m in pb.models
        for pid, ref in pb.scores[m].items()
    }


def _number(text: str, rng: random.Random, src: str) -> str | None:
    words = _CARDINALS + _ORDINALS + _BIG
    hits = list(re.finditer(r"\b(" + "|".join(words) + r")\b", text, re.IGNORECASE))
    if not hits:
        return None
    m = rng.choice(hits)
    old = m.group(1).lower()
    pool = next(p for p in (_CARDINALS, _ORDINALS, _BIG) if old in p)
    new = rng.choice([w for w in pool if w != old])
    return text[: m.start()] + _case_like(new, m.group(1)) + text[m.end() :]


def _name(text: str, rng: random.Random, src: str) -> str | None:
    hits = []
    for m in re.finditer(r"[^\W\d_]+", text):
        f = _fold(m.group(0))
        for kind in (_PERSONS, _PLACES):
            if any(_fold(n) == f for n in kind):
                hits.append((m, kind))
    if not hits:
        return None
    m, kind = rng.choice(hits)
    present = {_fold(w) for w in re.findall(r"[^\W\d_]+", text)}
    choices = [n for n in kind if _fold(n) not in present]
    return text[: m.start()] + rng.choice(choices) + text[m.end() :]


def _negation_drop(text: str, rng: random.Random, src: str) -> str | None:
    hits = list(_NEG.finditer(text))
    if not hits:
        return None
    m = rng.choice(hits)
    return text[: m.start()] + text[m.end() :]


def _negation_add(text: str, rng: random.Random, src: str) -> str | None:
    hits = list(_AUX.finditer(text))
    if not hits:
        return None
    m = rng.choice(hits)
    return text[: m.end()] + "not " + text[m.end() :]


def _term(text: str, rng: random.Random, src: str) -> str | None:
    found = {w.lower() for w in re.findall(r"[A-Za-z]+", text) if w.lower() in _TERM_SWAPS}
    if not found:
        return None
    old = rng.choice(sorted(found))
    new = _TERM_SWAPS[old]
    # Every occurrence: a translator who misreads a term misreads it throughout the passage.
    return re.sub(rf"\b{old}\b", lambda m: _case_like(new, m.group(0)), text, flags=re.IGNORECASE)


def _sentences(text: str) -> list[str]:
    return [s for s in _SENT.split(text) if s.strip()]


def _omission(text: str, rng: random.Random, src: str) -> str | None:
    sents = _sentences(text)
    if len(sents) < 3:
        return None
    i = rng.randrange(1, len(sents))
    return " ".join(sents[:i] + sents[i + 1 :])


def _truncation(text: str, rng: random.Random, src: str) -> str | None:
    if len(text) < 200:
        return None
    cut = text.rfind(" ", 0, int(len(text) * rng.uniform(0.4, 0.7)))
    return text[:cut] if cut > 0 else None


def _copy_full(text: str, rng: random.Random, src: str) -> str | None:
    return src


def _copy_partial(text: str, rng: random.Random, src: str) -> str | None:
    sents, psents = _sentences(text), _sentences(src)
    if len(sents) < 2 or len(psents) < 2:
        return None
    k = len(sents) // 2
    return " ".join(sents[:k] + psents[len(psents) // 2 :])


def build(n_per_type: int, seed: int) -> list[dict[str, str]]:
    sources, models = load_dev()
    rng = random.Random(seed)
    cells = [(pid, m) for pid in sorted(sources) for m in sorted(models) if pid in models[m]]
    inject: dict[str, Callable[[str, random.Random, str], str | None]] = {
        "number": _number,
        "name": _name,
        "negation_drop": _negation_drop,
        "negation_add": _negation_add,
        "term": _term,
        "omission": _omission,
        "truncation": _truncation,
        "copy_full": _copy_full,
        "copy_partial": _copy_partial,
    }
    out: list[dict[str, str]] = []
    for etype in ERROR_TYPES:
        order = cells[:]
        rng.shuffle(order)
        used: set[str] = set()
        made = 0
        for pid, model in order:
            if made >= n_per_type:
                break
            if pid in used:  # one corruption per passage and type keeps passages from dominating
                continue
            text = models[model][pid]
            if etype == "addition":
                other_pid, other_model = rng.choice(cells)
                extra = _sentences(models[other_model][other_pid])
                if other_pid == pid or not extra:
                    continue
                corrupted: str | None = text.rstrip() + " " + rng.choice(extra)
            else:
                corrupted = inject[etype](text, rng, sources[pid])
            if not corrupted or corrupted == text:
                continue
            used.add(pid)
            made += 1
            out.append(
                {"passage_id": pid, "model": model, "error_type": etype, "original": text, "corrupted": corrupted}
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", nargs="?", type=Path, default=Path("var/challenge/dev.jsonl"))
    ap.add_argument("--per-type", type=int, default=300, help="corruptions per error type (default %(default)s)")
    ap.add_argument("--seed", type=int, default=20260601)
    args = ap.parse_args(argv)
    if not DEV.is_dir():
        print(f"no palibench-dev at {DEV}", file=sys.stderr)
        return 2
    rows = build(args.per_type, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["error_type"]] = counts.get(r["error_type"], 0) + 1
    print(f"wrote {len(rows)} items to {args.out}: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
