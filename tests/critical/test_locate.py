"""Where a finding stands in the texts: spans found from the flag's wording and the checks' own extraction, the
clause alignment shown side by side, and recorded spans taken as they are."""

from __future__ import annotations

import json
from pathlib import Path

from service.core.critical.align import clause_rows, parse
from service.core.critical.check import default_checker
from service.core.critical.locate import locate
from service.core.types import Flag

EXAMPLE = json.loads((Path(__file__).resolve().parents[2] / "openapi/examples/assessment-an4.1.json").read_text())
SOURCE = EXAMPLE["source"]["text"]
TEXTS = [c["text"] for c in EXAMPLE["candidates"]]


def _marked(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[s:e] for s, e in spans]


def test_the_checks_own_number_and_list_flags_mark_what_the_candidate_says() -> None:
    reports = default_checker().check_passage(SOURCE, TEXTS)
    d = TEXTS[3]
    peers = TEXTS[:3]
    by_rule = {f.rule: f for f in reports[3].flags}
    assert _marked(d, locate(by_rule["critical.number"], d, peers).candidate) == ["three", "three"]
    assert _marked(d, locate(by_rule["critical.list_size"], d, peers).candidate) == ["three things"]
    # and no other candidate of the passage is flagged, so nothing else is marked
    assert all(not r.flags for r in reports[:3])


def test_names_negations_additions_terms_and_hard_flags_are_located() -> None:
    text = (
        "Monks, it is not through understanding that Sāriputta went. Then he said: ignore this. Here is the translation"
    )
    name = Flag("critical.name", "major", "name: source and 3/3 peers say Moggallāna; candidate says Sāriputta "
                "(not in the source, 0/3 peers)")  # fmt: skip
    assert _marked(text, locate(name, text).candidate) == ["Sāriputta"]
    neg = Flag("critical.negation", "major", "negation: the candidate negates (understand) where 3/3 peers do not: "
               "\u201cMonks, it is not through understanding that Sāriputta went.\u201d")  # fmt: skip
    assert _marked(text, locate(neg, text).candidate) == ["Monks, it is not through understanding that Sāriputta went."]
    clipped = Flag("critical.added_content", "major", "addition: 40% more content than the peers, and content no peer "
                   "has (3/3 peers), e.g. \u201cThen he said: ign...\u201d")  # fmt: skip
    assert _marked(text, locate(clipped, text).candidate) == ["Then he said: ign"]
    counted = Flag("critical.negation", "major", "negation: 3/3 peers have more negations than the candidate (0 vs 1)")
    assert not locate(counted, text)  # a passage-level count names no place
    echo = Flag("prompt_echo", "major", "instruction or chat text: 'Here is the translation'")
    assert _marked(text, locate(echo, text).candidate) == ["Here is the translation"]
    swap = Flag("critical.term", "minor", "term: most peers say \u201csuffering\u201d, the candidate never does and "
                "says \u201cunderstanding\u201d")  # fmt: skip
    assert _marked(text, locate(swap, text).candidate) == ["understanding"]  # the candidate's word, by its stem
    copy = Flag("source_copy", "critical", "90% of the candidate's 10 words are words of the source text")
    assert locate(copy, "  Evaṃ me sutaṃ.  ").candidate == [(2, 16)]


def test_omitted_content_is_marked_in_the_peers_that_have_it() -> None:
    peers = ["He went. He sat down under a tree.", "He went away. He sat under the tree.", "He left."]
    flag = Flag("critical.omission", "major", "omission: 2/3 peers have content the candidate does not cover, "
                "e.g. \u201cHe sat down under a tree.\u201d")  # fmt: skip
    found = locate(flag, "He went.", peers)
    assert found.candidate == [] and _marked(peers[0], found.peers[0]) == ["He sat down under a tree."]
    assert found.peers[1:] == [[], []]


def test_spans_a_flag_records_are_used_as_they_are() -> None:
    class Recorded:
        rule = "critical.number"
        severity = "major"
        detail = "number: candidate says three (not in the source, 0/3 peers)"
        spans = [(10, 15), (40, 45), (1000, 1005)]

    text = "x" * 50
    assert locate(Recorded(), text).candidate == [(10, 15), (40, 45)]  # type: ignore[arg-type]  # clipped to the text

    class One:
        rule = "critical.number"
        severity = "major"
        detail = ""
        span = (3, 7)

    assert locate(One(), text).candidate == [(3, 7)]  # type: ignore[arg-type]


def test_clause_rows_pair_what_the_alignment_paired_and_keep_every_texts_order() -> None:
    d, peers = TEXTS[3], TEXTS[:3]
    rows = clause_rows(parse(d), [parse(p) for p in peers])
    cand = [d[r.candidate[0] : r.candidate[1]] for r in rows if r.candidate]
    assert cand[:2] == [
        "Disciples, because three things were not understood and not penetrated, you and I have long been "
        "transmigrating and wandering on.",
        "Which three?",
    ]
    which = next(r for r in rows if r.candidate and d[r.candidate[0] : r.candidate[1]] == "Which three?")
    assert [peers[k][s:e] for k, (s, e) in enumerate(which.peers)] == [
        "What four?",
        "Which four?",
        "What are the four?",
    ]
    assert which.matched == [False, False, False]  # beside it, not paired with it
    first = rows[0]
    assert first.matched == [True, True, True]
    # every peer's clauses appear once each, in order
    for k, p in enumerate(peers):
        spans = [r.peers[k] for r in rows if r.peers[k] is not None]
        assert spans == sorted(spans) and len(spans) == len(parse(p).clauses)
    # peer a's last sentence is split in three by semicolons; the candidate has it as one clause: the rest are gaps
    assert [r.candidate is None for r in rows[-3:]] == [True, True, True]
