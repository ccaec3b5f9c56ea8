"""The translation lexicon: build time and size with each aligner, and its quality on what it never saw.

    nice .venv/bin/python bench/bench_lexicon.py [--aligners eflomal,ibm1] [--write]

Quality, per aligner:
- precision of the top rendering against a hand-checked sample (tests/fixtures/lexicon_gold.tsv: 150 of the 500 most
  frequent Pali stems, function words left out);
- on the held-out segments (one text in twenty, never trained on): the share of the Pali content stems with a
  rendering in their segment's English (recall), and the share of English content words some Pali stem of their
  segment licenses (what the addition signal relies on).
``--write`` writes the first aligner's lexicon to models/lexicon/.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from service.core.critical.build_glossary import Segment  # noqa: E402
from service.core.critical.build_lexicon import build, write  # noqa: E402
from service.core.critical.renderings import (  # noqa: E402
    LEXICON_FILE,
    TranslationLexicon,
    content_word,
    english_stems,
    pali_stems,
)

GOLD = ROOT / "tests" / "fixtures" / "lexicon_gold.tsv"


def load_gold(path: Path = GOLD) -> dict[str, set[str] | None]:
    """stem -> accepted English stems (None: a function word, left out)."""
    out: dict[str, set[str] | None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        stem, accepted = line.split("\t")
        out[stem] = None if accepted == "-" else set(accepted.split(","))
    return out


def precision_at_1(lex: TranslationLexicon, gold: dict[str, set[str] | None]) -> tuple[float, int, int]:
    """(precision, correct, judged): a stem without any rendering counts as wrong."""
    judged = [(s, ok) for s, ok in gold.items() if ok is not None]
    hits = 0
    for s, ok in judged:
        r = lex.render.get(s)
        top = max(r.items(), key=lambda kv: kv[1])[0] if r else None
        hits += top in ok  # type: ignore[operator]
    return hits / len(judged), hits, len(judged)


def held_out_figures(lex: TranslationLexicon, segments: list[Segment]) -> tuple[float, float, int, int]:
    """(rendering recall of content stems, licensed share of English content words, their counts)."""
    found = total = lic = words = 0
    for seg in segments:
        src = pali_stems(seg.pli)
        en = [e for e in english_stems(seg.en) if content_word(e)]
        en_set = set(en)
        src_set = set(src)
        for s in src_set:
            r = lex.render.get(s)
            if not r or max(r.values()) < 0.2:  # not a content stem (its best rendering is weak)
                continue
            total += 1
            found += any(e in en_set for e, p in r.items() if p >= 0.1)
        for e in en:
            words += 1
            back = lex.source_of.get(e, {})
            lic += any(s in back or e in lex.render.get(s, {}) for s in src_set)
    return found / max(total, 1), lic / max(words, 1), total, words


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aligners", default="eflomal,ibm1")
    ap.add_argument("--write", action="store_true", help=f"write the first aligner's lexicon to {LEXICON_FILE}")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start")
    gold = load_gold()
    for k, aligner in enumerate(args.aligners.split(",")):
        t0 = time.perf_counter()
        data, held = build(aligner)
        secs = time.perf_counter() - t0
        out = LEXICON_FILE if args.write and k == 0 else Path(f"/tmp/trisk-lexicon-{aligner}.json.gz")
        size = write(data, out)
        lex = TranslationLexicon(data)
        p, hits, n = precision_at_1(lex, gold)
        recall, licensed, n_stems, n_words = held_out_figures(lex, held)
        print(
            f"{aligner:8s} build {secs:5.1f} s ({data.signature['build_seconds']}), {size / 1024:.0f} KiB, "
            f"{len(lex.render)} Pali / {len(lex.source_of)} English entries, {len(lex.privative)} privatives -> {out}"
        )
        print(f"         top rendering correct on the hand-checked sample: {p:.3f} ({hits}/{n})")
        print(
            f"         held-out ({len(held)} segments): Pali content stems rendered in their segment {recall:.3f} "
            f"(n={n_stems}); English content words licensed by a source stem {licensed:.3f} (n={n_words})"
        )
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
