"""The novelty endpoints through Litestar's test client: answers, problem+json errors, never a 5xx for bad input."""

from __future__ import annotations

from typing import Any

import pytest

from service.platform.settings import get_settings

MAX = get_settings().limits.max_text_chars
PASSAGE = "Sattaratanasampannā, Tīsu sikkhāsu sikkhitā; Anuvicaranti mahāvīrā, Pahīnabhayabheravā."


def test_score_new_text(client: Any) -> None:
    r = client.post(
        "/v1/novelty",
        json={"text": "Ekaṁ samayaṁ bhagavā sāvatthiyaṁ viharati jetavane. Navo pāṭho idha.", "lang": "pli"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body["raw"]) == set(body["z"]) == {"rare_words", "rare_char5", "formulas", "neighbour_sim"}
    assert body["band"] in {"low", "middle", "high"}
    assert 0 <= body["percentile"] <= 100
    assert len(body["neighbours"]) == 5
    assert all(0 <= n["similarity"] <= 1 for n in body["neighbours"])
    assert body["signature"]["id"] and body["signature"]["corpus_sha256"]
    assert body["source"] == "computed"


def test_corpus_passage_text_and_lookup_agree(client: Any) -> None:
    by_text = client.post("/v1/novelty", json={"text": PASSAGE}).json()
    by_id = client.get("/v1/novelty/sn22.76:7").json()
    assert by_text["source"] == "corpus" and by_text["passage_id"] == "sn22.76:7"
    assert by_text["index"] == by_id["index"]


def test_unknown_passage_is_404(client: Any) -> None:
    r = client.get("/v1/novelty/zz99:1")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "zz99:1" in r.json()["detail"]


@pytest.mark.parametrize(
    ("payload", "status", "needle"),
    [
        ({"text": ""}, 422, "empty"),
        ({"text": "   \n\t "}, 422, "empty"),
        ({"text": "dhammo " * (MAX // 7 + 1)}, 422, "limit"),
        ({"text": "dhammo desito", "lang": "san"}, 422, "no novelty index"),
        ({"text": "dhammo desito", "lang": "not a language"}, 422, "ISO 639"),
        ({"text": "ca pi vā"}, 422, "content words"),
        ({"text": 42}, 400, ""),
        ({"text": "dhammo", "lang": ["pli"]}, 400, ""),
        ({"text": "dhammo", "colour": "red"}, 400, "colour"),
        ({}, 400, "text"),
    ],
)
def test_bad_input_is_a_clear_4xx(client: Any, payload: dict[str, Any], status: int, needle: str) -> None:
    r = client.post("/v1/novelty", json=payload)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    assert needle in body["detail"]


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_malformed_json_is_400(client: Any, raw: bytes) -> None:
    r = client.post("/v1/novelty", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/problem+json")


def test_body_over_limit_is_413(client: Any) -> None:
    big = b'{"text": "' + b"a" * (get_settings().limits.max_body_bytes + 10) + b'"}'
    r = client.post("/v1/novelty", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413
