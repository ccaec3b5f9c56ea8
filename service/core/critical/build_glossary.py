"""Build models/critical/glossary.json and names.json from the aligned bilara corpus in ../shared."""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import msgspec

from service.core.critical.lexicon import DATA_DIR, PALI_ENDINGS_FOLDED, Glossary, NameList, PatternSet, Term
from service.core.critical.tokens import en_stem, fold, pali_tokens, word_tokens
from service.platform.settings import SHARED_DIR

__all__ = ["EN_STOP", "Segment", "aligned_segments", "build", "dev_texts", "main"]

SHARED = SHARED_DIR
VERSION = "critical-glossary-1"

# Function words never count as a rendering of a doctrinal term.
EN_STOP = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being this that these those
    it its they them their he him his she her we us our you your i me my who whom which what when where how why
    there here then than so such not no nor do does did have has had will would shall should can could may might
    must one all any some each every other into onto out up down over under about after before again also just
    only very more most much many own same s t ll ve re d m says said say thus like way well even whatever
    """.split()
)

# Capitalised English forms that are doctrinal words or epithets, not names: checking them as names would fire on
# every candidate that writes "the teaching" for Dhamma.
NAME_EXCLUDE = frozenset(
    fold(w)
    for w in """dhamma sangha saṅgha buddha tathāgata tathagata nibbāna arahant brahmā brahma bhagavā mendicant
    mendicants venerable realized blessed teacher sir lord master great king queen prince god gods deva devas""".split()
)


def _pairs(translator: str, division: str) -> Iterator[tuple[str, Path, Path]]:
    base = SHARED / "corpus" / "bilara"
    tdir = base / "translation" / "en" / translator / division
    for tpath in sorted(tdir.rglob(f"*_translation-en-{translator}.json")):
        rel = tpath.relative_to(tdir)
        text_id = tpath.name.split("_")[0]
        rpath = base / "root" / "pli" / "ms" / division / rel.parent / f"{text_id}_root-pli-ms.json"
        if rpath.exists():
            yield text_id, rpath, tpath


class Segment(NamedTuple):
    """One bilara segment with both sides: who translated it, its text id and key, the Pali and the English."""

    translator: str
    text_id: str
    key: str
    pli: str
    en: str


def aligned_segments(exclude_texts: set[str]) -> Iterator[Segment]:
    """Every segment with both sides, titles dropped, the texts in ``exclude_texts`` skipped."""
    jobs = [
        ("sujato", "sutta"),
        ("brahmali", "vinaya"),
        ("kelly", "sutta"),
        ("soma", "sutta"),
        ("suddhaso", "sutta"),
        ("kovilo", "sutta"),
    ]
    for translator, division in jobs:
        for text_id, rpath, tpath in _pairs(translator, division):
            if text_id in exclude_texts:
                continue
            root = msgspec.json.decode(rpath.read_bytes())
            tr = msgspec.json.decode(tpath.read_bytes())
            for key, en in tr.items():
                pli = root.get(key)
                if not pli or not en.strip() or ":0." in key:
                    continue
                yield Segment(translator, text_id, key, pli, en)


def dev_texts() -> set[str]:
    """The sutta ids of the PaliBench dev passages: builders leave them out, so dev never sees its references."""
    manifest = SHARED / "palibench-dev" / "passage_manifest.csv"
    if not manifest.exists():
        return set()
    with manifest.open(newline="") as f:
        return {row["sutta_id"] for row in csv.DictReader(f)}


def build(out_dir: Path, min_term_segments: int = 20) -> tuple[Glossary, NameList]:
    seeds_raw = msgspec.json.decode((out_dir / "doctrinal_seeds.json").read_bytes())
    seeds: dict[str, list[str]] = {k: v for k, v in seeds_raw.items() if not k.startswith("_")}
    extra_path = out_dir / "glossary_extra.json"
    extra: dict[str, list[str]] = {}
    if extra_path.exists():
        extra = {k: v for k, v in msgspec.json.decode(extra_path.read_bytes()).items() if not k.startswith("_")}
    patterns = PatternSet(seeds)
    # Number words are checked on their own; as "renderings" (bojjhaṅga -> seven) they would blur both checks.
    number_words = set(msgspec.json.decode((out_dir / "numbers.json").read_bytes())["en"]["words"])
    # The dev suttas are excluded so the dev evaluation never sees its own references through the glossary.
    exclude = dev_texts()

    n_seg = 0
    en_df: Counter[str] = Counter()
    term_df: Counter[str] = Counter()
    co: dict[str, Counter[str]] = {k: Counter() for k in seeds}
    cap_count: Counter[str] = Counter()
    any_count: Counter[str] = Counter()
    pali_df: Counter[str] = Counter()
    pair: Counter[tuple[str, str]] = Counter()
    for translator, _, _, pli, en in aligned_segments(exclude):
        n_seg += 1
        ptoks = pali_tokens(pli)
        terms: set[str] = set()
        for pt in ptoks:
            terms |= patterns.match(pt)
        etoks = word_tokens(en)
        stems = {en_stem(t.lower) for t in etoks if len(t.lower) > 2 and t.lower not in EN_STOP}
        en_df.update(stems)
        term_df.update(terms)
        for k in terms:
            co[k].update(stems)
        if translator != "sujato":
            continue
        ptok_set = set(ptoks)
        pali_df.update(ptok_set)
        seen: set[str] = set()
        for t in etoks:
            f = fold(t.text)
            any_count[f] += 1
            if t.capital and not t.sentence_start and len(f) >= 4 and f not in seen:
                seen.add(f)
                cap_count[f] += 1
                key = name_key(f)
                for form in ptok_set:
                    if _name_form(key, fold(form)):
                        pair[(form, f)] += 1

    terms_out: dict[str, Term] = {}
    for key, pats in seeds.items():
        n = term_df[key]
        scored: list[tuple[float, str]] = []
        for e, c in co[key].items():
            # Dice keeps words that mostly travel with the term (its rendering) and drops its usual context words.
            dice = 2 * c / (n + en_df[e])
            lift = (c / n) / (en_df[e] / n_seg)
            if c >= 5 and dice >= 0.12 and lift >= 4.0 and e not in number_words:
                scored.append((dice * math.log(lift), e))
        renderings = [e for _, e in sorted(scored, reverse=True)[:6]]
        renderings += [en_stem(w) for w in extra.get(key, []) if en_stem(w) not in renderings]
        if n >= min_term_segments and renderings:
            terms_out[key] = Term(pali=pats, renderings=renderings, segments=n)

    names: dict[str, str] = {}
    forms: dict[str, str] = {}
    name_ok = {
        f
        for f, c in cap_count.items()
        # Names keep their capital nearly always.
        if c >= 3 and c >= 0.8 * any_count[f] and f not in NAME_EXCLUDE
    }
    covered: Counter[str] = Counter()
    for (pt, f), c in pair.items():
        # A Pali form stands for the name when the human translation writes the name in most segments that have
        # it: this keeps sakko (Sakka) and drops sakkā (can), keeps sāvatthinidānaṃ, drops abhinandati (Nanda).
        if f in name_ok and c >= 2 and c >= 0.5 * pali_df[pt]:
            forms[pt] = name_key(f)
            covered[f] += c
    for f in name_ok:
        if covered[f] >= 0.4 * cap_count[f]:
            names[f] = name_key(f)
    forms = {pt: k for pt, k in forms.items() if k in set(names.values())}
    built_from = f"bilara aligned segments={n_seg}, dev texts excluded={len(exclude)}"
    return (
        Glossary(version=VERSION, built_from=built_from, terms=dict(sorted(terms_out.items()))),
        NameList(
            version=VERSION,
            built_from=built_from,
            names=dict(sorted(names.items())),
            pali_forms=dict(sorted(forms.items())),
        ),
    )


def name_key(folded: str) -> str:
    """The stem under which a name is compared: final vowel off (sariputta -> sariputt, savatthi -> savatth)."""
    return folded[:-1] if folded[-1] in "aeiou" and len(folded) > 4 else folded


def _name_form(key: str, pali_folded: str) -> bool:
    """Could this (folded) Pali token carry the name? Long stems may sit inside compounds, short ones only inflect."""
    if len(key) >= 6 and key in pali_folded:
        return True
    return pali_folded.startswith(key) and pali_folded[len(key) :] in PALI_ENDINGS_FOLDED


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=DATA_DIR, help="data directory (default %(default)s)")
    args = ap.parse_args(argv)
    if not (SHARED / "corpus" / "bilara").is_dir():
        print(f"no corpus at {SHARED / 'corpus' / 'bilara'}", file=sys.stderr)
        return 2
    glossary, names = build(args.out)
    enc = msgspec.json.Encoder()
    (args.out / "glossary.json").write_bytes(msgspec.json.format(enc.encode(glossary), indent=1) + b"\n")
    (args.out / "names.json").write_bytes(msgspec.json.format(enc.encode(names), indent=1) + b"\n")
    print(f"{len(glossary.terms)} terms, {len(names.names)} names ({glossary.built_from})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
