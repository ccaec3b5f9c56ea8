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

# error type -> the ways it is injected (each variant gets its own items, so no figure rests on one rule)
VARIANTS: dict[str, tuple[str, ...]] = {
    "number": ("one", "every"),
    "name": ("one", "every"),
    "negation": ("removed", "added"),
    "term": ("related_one", "related_every", "opposite_one", "opposite_every"),
    "omission": ("first", "middle", "last"),
    "addition": ("first", "middle", "last"),
    "truncation": ("cut",),
    "copy_full": ("whole",),
    "copy_partial": ("half",),
}
ERROR_TYPES = tuple(VARIANTS)

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
# A doctrinal rendering and what a careless translation might put instead: another term of the teaching (related)
# or its opposite; neither is a synonym.
_RELATED = {
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
    "fetters": "hindrances",
    "hindrances": "fetters",
    "defilements": "hindrances",
    "rebirth": "death",
    "merit": "wisdom",
    "desire": "hatred",
    "effort": "mindfulness",
    "absorption": "perception",
    "aggregates": "elements",
    "form": "feeling",
    "path": "fruit",
    "teaching": "discipline",
}
_OPPOSITE = {
    "suffering": "happiness",
    "happiness": "suffering",
    "pleasure": "pain",
    "pain": "pleasure",
    "pleasant": "painful",
    "painful": "pleasant",
    "skillful": "unskillful",
    "unskillful": "skillful",
    "wholesome": "unwholesome",
    "unwholesome": "wholesome",
    "good": "bad",
    "bad": "good",
    "dispassion": "passion",
    "wise": "foolish",
    "foolish": "wise",
    "permanent": "impermanent",
    "impermanent": "permanent",
    "right": "wrong",
    "wrong": "right",
    "birth": "death",
    "death": "birth",
    "freedom": "bondage",
    "liberation": "bondage",
    "ignorance": "knowledge",
    "knowledge": "ignorance",
    "love": "hatred",
    "hatred": "love",
    "heaven": "hell",
    "hell": "heaven",
    "praise": "blame",
    "blame": "praise",
    "gain": "loss",
    "loss": "gain",
    "pure": "impure",
    "impure": "pure",
    "beautiful": "ugly",
    "ugly": "beautiful",
    "calm": "agitated",
    "peace": "conflict",
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


Inject = Callable[[str, random.Random, str, str], "str | None"]


def _replace(text: str, hits: list[re.Match[str]], rng: random.Random, variant: str, new: str) -> str:
    """``text`` with one of ``hits`` (variant "one") or every hit with the same word ("every") replaced by ``new``."""
    m = rng.choice(hits)
    same = [h for h in hits if h.group(0).lower() == m.group(0).lower()] if variant == "every" else [m]
    out, at = [], 0
    for h in same:
        out += [text[at : h.start()], _case_like(new, h.group(0))]
        at = h.end()
    return "".join([*out, text[at:]])


def _number(text: str, rng: random.Random, src: str, variant: str) -> str | None:
    words = _CARDINALS + _ORDINALS + _BIG
    hits = list(re.finditer(r"\b(" + "|".join(words) + r")\b", text, re.IGNORECASE))
    if not hits:
        return None
    old = rng.choice(hits).group(1).lower()
    pool = next(p for p in (_CARDINALS, _ORDINALS, _BIG) if old in p)
    new = rng.choice([w for w in pool if w != old])
    return _replace(text, [h for h in hits if h.group(1).lower() == old], rng, variant, new)


def _name(text: str, rng: random.Random, src: str, variant: str) -> str | None:
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
    same = [h for h, _ in hits if _fold(h.group(0)) == _fold(m.group(0))]
    return _replace(text, same, rng, variant, rng.choice(choices))


def _negation(text: str, rng: random.Random, src: str, variant: str) -> str | None:
    if variant == "removed":
        hits = list(_NEG.finditer(text))
        if not hits:
            return None
        m = rng.choice(hits)
        return text[: m.start()] + text[m.end() :]
    hits = list(_AUX.finditer(text))
    if not hits:
        return None
    m = rng.choice(hits)
    return text[: m.end()] + "not " + text[m.end() :]


def _term(text: str, rng: random.Random, src: str, variant: str) -> str | None:
    kind, _, how = variant.partition("_")
    swaps = _RELATED if kind == "related" else _OPPOSITE
    hits = [m for m in re.finditer(r"[A-Za-z]+", text) if m.group(0).lower() in swaps]
    if not hits:
        return None
    old = rng.choice(sorted({m.group(0).lower() for m in hits}))
    same = [m for m in hits if m.group(0).lower() == old]
    return _replace(text, same, rng, how, swaps[old])


def _sentences(text: str) -> list[str]:
    return [s for s in _SENT.split(text) if s.strip()]


def _position(n: int, rng: random.Random, variant: str) -> int:
    """A sentence index: the first, the last, or one strictly between (n >= 3)."""
    if variant == "first":
        return 0
    if variant == "last":
        return n - 1
    return rng.randrange(1, n - 1)


def _omission(text: str, rng: random.Random, src: str, variant: str) -> str | None:
    sents = _sentences(text)
    if len(sents) < 3:
        return None
    i = _position(len(sents), rng, variant)
    return " ".join(sents[:i] + sents[i + 1 :])


def _truncation(text: str, rng: random.Random, src: str, variant: str) -> str | None:
    if len(text) < 200:
        return None
    cut = text.rfind(" ", 0, int(len(text) * rng.uniform(0.4, 0.7)))
    return text[:cut] if cut > 0 else None


def _copy_full(text: str, rng: random.Random, src: str, variant: str) -> str | None:
    return src


def _copy_partial(text: str, rng: random.Random, src: str, variant: str) -> str | None:
    sents, psents = _sentences(text), _sentences(src)
    if len(sents) < 2 or len(psents) < 2:
        return None
    k = len(sents) // 2
    return " ".join(sents[:k] + psents[len(psents) // 2 :])


def _addition(text: str, extra: str, rng: random.Random, variant: str) -> str | None:
    """A sentence of another passage put first, last or between two sentences."""
    sents = _sentences(text)
    if len(sents) < 2 and variant == "middle":
        return None
    i = 0 if variant == "first" else len(sents) if variant == "last" else rng.randrange(1, len(sents))
    return " ".join([*sents[:i], extra, *sents[i:]])


def build(n_per_variant: int, seed: int) -> list[dict[str, str]]:
    sources, models = load_dev()
    rng = random.Random(seed)
    cells = [(pid, m) for pid in sorted(sources) for m in sorted(models) if pid in models[m]]
    inject: dict[str, Inject] = {
        "number": _number,
        "name": _name,
        "negation": _negation,
        "term": _term,
        "omission": _omission,
        "truncation": _truncation,
        "copy_full": _copy_full,
        "copy_partial": _copy_partial,
    }
    out: list[dict[str, str]] = []
    for etype, variants in VARIANTS.items():
        for variant in variants:
            order = cells[:]
            rng.shuffle(order)
            used: set[str] = set()
            made = 0
            for pid, model in order:
                if made >= n_per_variant:
                    break
                if pid in used:  # one corruption per passage and variant keeps passages from dominating
                    continue
                text = models[model][pid]
                if etype == "addition":
                    other_pid, other_model = rng.choice(cells)
                    extra = _sentences(models[other_model][other_pid])
                    if other_pid == pid or not extra:
                        continue
                    corrupted = _addition(text, rng.choice(extra), rng, variant)
                else:
                    corrupted = inject[etype](text, rng, sources[pid], variant)
                if not corrupted or corrupted == text:
                    continue
                used.add(pid)
                made += 1
                out.append(
                    {
                        "passage_id": pid,
                        "model": model,
                        "error_type": etype,
                        "variant": variant,
                        "original": text,
                        "corrupted": corrupted,
                    }
                )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", nargs="?", type=Path, default=Path("var/challenge/dev.jsonl"))
    ap.add_argument("--per-variant", type=int, default=100, help="corruptions per variant (default %(default)s)")
    ap.add_argument("--seed", type=int, default=20260601)
    args = ap.parse_args(argv)
    if not DEV.is_dir():
        print(f"no palibench-dev at {DEV}", file=sys.stderr)
        return 2
    rows = build(args.per_variant, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for r in rows:
        key = f"{r['error_type']}/{r['variant']}"
        counts[key] = counts.get(key, 0) + 1
    print(f"wrote {len(rows)} items to {args.out}: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
