"""The workbench's pages over HTTP (Litestar's test client): sign-in and its cookie, CSRF, sign-out and expiry, scopes
per page, the API's wording on error pages, the reviewer taken from the key, highlights, leases, two tenants."""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from service.app.workbench.assets import ASSETS, IMMUTABLE, PINNED, STATIC_DIR, URLS, integrity
from service.app.workbench.controllers import CSP
from service.app.workbench.sessions import MAX_PER_KEY, SessionStore
from service.review import item_id_of
from service.state.durable import open_store
from service.state.durable.access import AccessStore, issue_key
from tests.support.leaks import assert_no_leaks
from tests.workbench.conftest import Seeded, cleanup, form_token, make_app, make_settings, seed, sign_in


@pytest.fixture()
def tc(app: Any, seeded: Seeded) -> Any:
    with TestClient(app=app) as client:
        yield client


def _cookie_header(response: Any, name: str) -> str:
    found = [v for v in response.headers.get_list("set-cookie") if v.startswith(f"{name}=")]
    assert found, f"no {name} cookie set"
    return found[0]


def _item_url(seeded: Seeded, candidate: str) -> str:
    return f"/ui/items/{seeded.item(candidate)}"


def test_sign_in_gives_an_httponly_strict_session_cookie_and_the_key_is_never_shown(tc: Any, seeded: Seeded) -> None:
    r = tc.get("/ui/queue", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/signin?")
    r = sign_in(tc, seeded.key("ana"))
    assert r.status_code == 303 and r.headers["location"] == "/ui/"
    cookie = _cookie_header(r, "trisk_session").lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    assert seeded.key("ana") not in r.headers.get("location", "")
    secret = seeded.key("ana").split("_", 2)[2]  # trisk_<key id>_<secret>: the secret itself may hold "_"
    for path in ("/ui/queue", _item_url(seeded, "d"), f"/ui/batches/{seeded.batch_id}"):
        page = tc.get(path)
        assert page.status_code == 200, (path, page.text[:500])
        assert secret not in page.text and seeded.key("ana") not in page.text
        assert page.headers["content-security-policy"] == CSP


def test_a_refused_sign_in_says_what_the_api_says(tc: Any, seeded: Seeded) -> None:
    bogus = "trisk_000000000000_" + "A" * 43
    api = tc.get("/v1/review/queue", headers={"Authorization": f"Bearer {bogus}"})
    form = tc.get("/ui/signin")
    r = tc.post("/ui/signin", data={"key": bogus, "csrf": form_token(form.text), "next": ""}, follow_redirects=False)
    assert r.status_code == 401 == api.status_code
    assert api.json()["detail"] in r.text
    assert "trisk_session" not in r.headers.get("set-cookie", "")
    # a sign-in form from elsewhere (no matching token in this browser's cookie) is refused before the key is read
    with TestClient(app=make_app(seeded.settings)) as other:
        r = other.post("/ui/signin", data={"key": seeded.key("ana"), "csrf": "forged", "next": ""})
        assert r.status_code == 403 and "trisk_session" not in r.headers.get("set-cookie", "")


def test_every_form_needs_the_sessions_token(tc: Any, seeded: Seeded) -> None:
    sign_in(tc, seeded.key("ben"))
    for path, data in [
        ("/ui/claim", {"model": "no-such-model"}),
        (f"/ui/items/{seeded.item('c')}/verdict", {"label": "VALID", "then": "queue"}),
        ("/ui/signout", {}),
    ]:
        r = tc.post(path, data={**data, "csrf": "not-the-token"}, follow_redirects=False)
        assert r.status_code == 403, (path, r.status_code)
        assert "form&#39;s token does not match" in r.text or "form's token does not match" in r.text
    verdicts = tc.get(
        f"/v1/review/items/{seeded.item('c')}/verdicts", headers={"Authorization": f"Bearer {seeded.key('admin')}"}
    ).json()
    assert verdicts == []  # nothing was recorded by the refused form
    assert tc.get("/ui/queue").status_code == 200  # and the session is still there


def test_sign_out_ends_the_session_for_good(tc: Any, seeded: Seeded) -> None:
    sign_in(tc, seeded.key("ben"))
    token = tc.cookies.get("trisk_session")
    page = tc.get("/ui/queue")
    r = tc.post("/ui/signout", data={"csrf": form_token(page.text)}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/signin?m=signed_out"
    assert "max-age=0" in _cookie_header(r, "trisk_session").lower()
    tc.cookies.set("trisk_session", token, path="/ui")  # the old cookie, replayed
    assert tc.get("/ui/queue", follow_redirects=False).status_code == 303


def test_a_session_ends_with_its_time_and_with_its_key(wb_settings: Any, seeded: Seeded) -> None:
    short = make_settings(wb_settings, session_seconds=1)
    with TestClient(app=make_app(short)) as tc:
        sign_in(tc, seeded.key("reader"))
        assert tc.get(f"/ui/batches/{seeded.batch_id}").status_code == 200
        time.sleep(1.3)
        r = tc.get(f"/ui/batches/{seeded.batch_id}", follow_redirects=False)
        assert r.status_code == 303 and "signin" in r.headers["location"]
    store = open_store(wb_settings.durable)
    token, record = issue_key(store, seeded.tenant, "soon revoked", ["read"])
    with TestClient(app=make_app(wb_settings)) as tc:
        sign_in(tc, token)
        assert tc.get("/ui/batches").status_code == 200
        AccessStore(store).revoke_key(record.key_id)
        tc.app.state.resources.keys.forget(record.key_id)  # the cache's 5 s, skipped
        r = tc.get("/ui/batches", follow_redirects=False)
        assert r.status_code == 303 and "signin" in r.headers["location"]


def test_each_page_needs_its_scope_and_says_so_in_the_apis_words(tc: Any, seeded: Seeded) -> None:
    api = tc.post("/v1/calibration/fits", json={}, headers={"Authorization": f"Bearer {seeded.key('ana')}"})
    assert api.status_code == 403
    sign_in(tc, seeded.key("ana"))
    r = tc.get("/ui/calibration")
    assert r.status_code == 403 and api.json()["detail"].replace("'", "&#39;") in r.text
    sign_in(tc, seeded.key("reader"))
    assert tc.get("/ui/queue").status_code == 403
    assert tc.get(f"/ui/batches/{seeded.batch_id}").status_code == 200


def test_the_flagged_candidate_shows_its_finding_marked_and_aligned(tc: Any, seeded: Seeded) -> None:
    sign_in(tc, seeded.key("admin"))
    tc.headers["Authorization"] = f"Bearer {seeded.key('admin')}"  # for the JSON route beside the page
    page = tc.get(_item_url(seeded, "d")).text
    marks = re.findall(r'<mark class="sev-major" data-n="([0-9,]+)"[^>]*>([^<]+)</mark>', page)
    assert ("1", "three") in marks or any(text == "three" and "1" in n.split(",") for n, text in marks)
    assert "number: source and 3/3 peers say four; candidate says three" in page
    queue = tc.get("/v1/review/queue", params={"model": "meta-llama/llama-3.1-70b"}).json()
    assert [f["rule"] for f in queue["items"][0]["flags"]] == ["critical.number", "critical.list_size"]
    assert "critical.number" in tc.get("/ui/queue?model=meta-llama/llama-3.1-70b").text
    assert "marked in the candidate" in page
    # the peers are aligned by clause: "Which three?" sits beside the peers' "What four?"
    row = re.search(r"<tr class=\"\">\s*<td class=\"cand\">Which <mark[^>]*>three</mark>\?</td>(.*?)</tr>", page, re.S)
    assert row and "What four?" in row.group(1) and "Which four?" in row.group(1)
    assert 'lang="pi"' in page and "Catunnaṁ" in page  # the Pali as written, NFC


def test_claim_verdict_and_calibration_use_the_apis_logic_and_the_keys_reviewer(tc: Any, seeded: Seeded) -> None:
    sign_in(tc, seeded.key("ana"))
    queue = tc.get("/ui/queue?model=meta-llama/llama-3.1-70b")
    r = tc.post("/ui/claim", data={"csrf": form_token(queue.text), "model": "meta-llama/llama-3.1-70b"},
                follow_redirects=False)  # fmt: skip
    assert r.status_code == 303
    # the riskiest open item of this model: the candidate that says "three", of the assessment or the batch's copy
    item_path = r.headers["location"].split("?")[0]
    copies = {_item_url(seeded, "d"), f"/ui/items/{item_id_of(seeded.batch_assessment_id, 'd')}"}
    assert item_path in copies
    item_id = item_path.rsplit("/", 1)[1]
    page = tc.get(r.headers["location"])
    assert "Your lease" in page.text and 'id="lease"' in page.text
    lease_id = re.search(r'name="lease_id" value="([0-9a-f]+)"', page.text).group(1)
    # Ben cannot claim it (the claim logic leases each item once) and cannot judge it on the page
    with TestClient(app=make_app(seeded.settings)) as ben:
        sign_in(ben, seeded.key("ben"))
        q = ben.get("/ui/queue")
        claims = []
        for _ in range(3):
            got = ben.post("/ui/claim", data={"csrf": form_token(q.text), "model": "meta-llama/llama-3.1-70b"},
                           follow_redirects=False)  # fmt: skip
            claims.append(got.headers["location"].split("?")[0])
        assert item_path not in claims and claims[0] in copies  # the other copy, then nothing
        assert claims[1:] == ["/ui/queue", "/ui/queue"]
        held = ben.get(item_path).text
        assert "Leased to another reviewer" in held and 'id="verdict-form"' not in held
    r = tc.post(
        f"{item_path}/verdict",
        data={"csrf": form_token(page.text), "label": "MAJOR", "error_category": "number", "note": "three, not four",
              "lease_id": lease_id, "then": "queue"},
        follow_redirects=False,
    )  # fmt: skip
    assert r.status_code == 303 and "m=recorded" in r.headers["location"]
    admin = {"Authorization": f"Bearer {seeded.key('admin')}"}
    verdicts = tc.get(f"/v1/review/items/{item_id}/verdicts", headers=admin).json()
    assert [(v["label"], v["reviewer"], v["lease_id"]) for v in verdicts] == [
        ("MAJOR", f"Ana ({seeded.keys['ana'][1]})", lease_id)
    ]
    # the lease is given back: the item is reviewed, not leased any more
    assert tc.get(f"/v1/review/items/{item_id}", headers=admin).json()["item"]["status"] == "reviewed"
    report = tc.get("/v1/calibration/report", headers=admin).json()
    sign_in(tc, seeded.key("admin"))
    cal = tc.get("/ui/calibration").text
    assert f'<dd id="count-major">{report["labels"]["MAJOR"]}</dd>' in cal and report["labels"]["MAJOR"] >= 1
    # a reviewed item says it has a verdict, hidden until one's own (a blind second opinion)
    again = tc.get(item_path).text
    assert "already has 1 verdict by other reviewers" in again and "three, not four" not in again


def test_batch_page_shows_progress_and_the_one_ranking(tc: Any, seeded: Seeded) -> None:
    sign_in(tc, seeded.key("reader"))
    page = tc.get(f"/ui/batches/{seeded.batch_id}").text
    assert '<progress max="1" value="1"' in page and "done · 1 of 1 finished" in page
    assert "hx-get" not in page  # a finished batch stops polling
    prios = [float(x) for x in re.findall(r'<td class="num">(\d+\.\d{3})</td>', page)]
    assert len(prios) == 4 and prios == sorted(prios, reverse=True)
    assert "/ui/items/" not in page  # a read key sees the ranking, not the review pages
    frag = tc.get(f"/ui/batches/{seeded.batch_id}/progress")
    assert frag.status_code == 200 and "<html" not in frag.text and "<progress" in frag.text


def test_another_tenants_ids_answer_as_if_they_did_not_exist(app: Any, wb_settings: Any, seeded: Seeded) -> None:
    with TestClient(app=app) as tc:
        other = seed(wb_settings, tc)
        try:
            sign_in(tc, other.key("admin"))
            for path in (_item_url(seeded, "d"), f"/ui/batches/{seeded.batch_id}"):
                r = tc.get(path)
                assert r.status_code == 404 and "Not found" in r.text, path
            cal = tc.get("/ui/calibration").text
            assert '<dd id="count-items">0</dd>' in cal
            q = tc.get("/ui/queue?scope=all&status=any").text
            assert seeded.assessment_id not in q
        finally:
            cleanup(wb_settings, other.tenant, [k for _, k in other.keys.values()])


def test_assets_are_pinned_and_named_with_their_hashes(tc: Any, seeded: Seeded) -> None:
    """Issue 36: static files were sent no-store and uncompressed on every page; now each has a URL of its hash,
    cached for good, gzipped for browsers that take it, and its old unhashed name is not served."""
    assert integrity(STATIC_DIR / "htmx.min.js") == PINNED["htmx.min.js"]
    page = tc.get("/ui/signin").text
    for name, sri in ASSETS.items():
        url = URLS[name]
        digest = hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:10]
        assert url.endswith(f".{digest}{Path(name).suffix}") and f'{url}" integrity="{sri}"' in page
        r = tc.get(url, headers={"accept-encoding": "gzip"})
        assert r.status_code == 200 and integrity_of(r.content) == sri  # (the client undoes the gzip)
        assert r.headers["content-encoding"] == "gzip" and r.headers["cache-control"] == IMMUTABLE
        assert int(r.headers["content-length"]) < len(r.content)
        plain = tc.get(url, headers={"accept-encoding": "identity"})
        assert "content-encoding" not in plain.headers and integrity_of(plain.content) == sri
        assert tc.get(f"/ui/static/{name}").status_code == 404
    assert "<script>" not in page and "style=" not in page  # nothing inline: the CSP allows none


def test_a_first_visit_is_asked_to_sign_in_not_told_its_session_ended(app: Any, seeded: Seeded) -> None:
    with TestClient(app=app) as fresh:
        first = fresh.get("/ui/queue", follow_redirects=False)
        assert first.headers["location"] == "/ui/signin?next=%2Fui%2Fqueue"
        assert "session has ended" not in fresh.get(first.headers["location"]).text
        fresh.cookies.set("trisk_session", "an-old-one", path="/ui")
        assert "m=ended" in fresh.get("/ui/queue", follow_redirects=False).headers["location"]


def _contrast(fg: str, bg: str) -> float:
    def lum(h: str) -> float:
        rgb = [int(h[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((lum(fg), lum(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_severity_and_label_colours_pass_wcag_aa_on_every_background_they_sit_on() -> None:
    """Issue 36: the MINOR label was 3.64:1 on white; AA asks 4.5:1 for text."""
    css = (STATIC_DIR / "workbench.css").read_text()
    var = dict(re.findall(r"--([\w-]+): (#[0-9a-fA-F]{6})", css))
    # the page, the cards, a chosen label; text on a highlight is ink, not a severity colour
    backgrounds = ["#ffffff", var["bg"], "#f4f8ff"]
    assert _contrast(var["ink"], var["mark-critical"]) >= 4.5
    for name in ("critical", "major", "minor", "info", "valid", "muted"):
        worst = min(_contrast(var[name], bg) for bg in backgrounds)
        assert worst >= 4.5, (name, var[name], round(worst, 2))


def integrity_of(body: bytes) -> str:
    import base64
    import hashlib

    return "sha384-" + base64.b64encode(hashlib.sha384(body).digest()).decode()


async def test_sessions_per_key_are_capped() -> None:
    from redis.asyncio import Redis

    from tests.conftest import TEST_REDIS_URL

    r = Redis.from_url(TEST_REDIS_URL)
    store = SessionStore(r)
    key_id = uuid.uuid4().hex[:12]
    try:
        tokens = [(await store.create(key_id, "t", 60, key_expires_at=None))[0] for _ in range(MAX_PER_KEY + 2)]
        assert [await store.get(t) is not None for t in tokens] == [False, False] + [True] * MAX_PER_KEY
        # a key that expires sooner ends its sessions with it
        _, s = await store.create(key_id, "t", 3600, key_expires_at=time.time() + 5)
        assert s.expires_at <= time.time() + 5
        assert not [k async for k in r.scan_iter(match="trisk:ws:trisk_*")]  # never the token itself as a key
    finally:
        keys = [k async for k in r.scan_iter(match="trisk:ws:*", count=1000)]
        mine = [k for k in keys if key_id.encode() in k]
        for t in tokens:
            await store.delete(t)
        if mine:
            await r.delete(*mine)
        await r.aclose()


def _checked(tc: Any, r: Any) -> Any:
    """``r`` after checking its page and its redirect for request state (the session's tokens)."""
    token = tc.cookies.get("trisk_session")
    found = re.search(r'name="csrf" value="([^"]*)"', r.text)
    form = found.group(1) if found else ""
    if not form:  # a redirect: the form token of the session, from a page of it
        form = form_token(tc.get("/ui/leases").text)
    assert_no_leaks(r.text, session_token=token, form_token=form, urls=[str(r.url), r.headers.get("location", "")])
    return r


def test_no_page_or_url_carries_request_state_and_every_candidate_is_shown(tc: Any, seeded: Seeded) -> None:
    """Issue 36: a query parameter named ``scope`` got Litestar's ASGI scope (cookies and all) and wrote it into the
    page's hidden fields and the item URL, which grew with every verdict; "Show: every candidate" was ignored."""
    sign_in(tc, seeded.key("ben"))
    api = {"Authorization": f"Bearer {seeded.key('admin')}"}
    every = tc.get("/v1/review/queue", params={"scope": "all"}, headers=api).json()["total"]
    flagged = tc.get("/v1/review/queue", headers=api).json()["total"]
    queue = _checked(tc, tc.get("/ui/queue?show=all"))
    assert len(re.findall(r'<a href="/ui/items/', queue.text)) == every
    assert '<option value="all" selected>' in queue.text and 'name="show" value="all"' in queue.text
    assert len(re.findall(r'<a href="/ui/items/', _checked(tc, tc.get("/ui/queue")).text)) == flagged
    csrf = form_token(queue.text)
    for _ in range(2):  # claim, skip to the next (n), each redirect and page checked
        r = _checked(tc, tc.post("/ui/claim", data={"csrf": csrf, "show": "all"}, follow_redirects=False))
        assert r.headers["location"].endswith("?show=all")
        page = _checked(tc, tc.get(r.headers["location"]))
        lease = re.search(r'name="lease_id" value="([0-9a-f]+)"', page.text).group(1)
        skipped = tc.post(
            r.headers["location"].split("?")[0] + "/skip",
            data={"csrf": csrf, "lease_id": lease, "show": "all", "then": "next"},
            follow_redirects=False,
        )
        _checked(tc, skipped)
        item = r.headers["location"].split("?")[0].rsplit("/", 1)[1]
        assert tc.get(f"/v1/review/items/{item}", headers=api).json()["item"]["status"] == "open"  # released
        r = skipped
        nxt = _checked(tc, tc.get(r.headers["location"]))
        lease = re.search(r'name="lease_id" value="([0-9a-f]+)"', nxt.text).group(1)
        verdict = tc.post(
            r.headers["location"].split("?")[0] + "/verdict",
            data={"csrf": csrf, "label": "VALID", "lease_id": lease, "show": "all", "then": "next"},
            follow_redirects=False,
        )
        _checked(tc, verdict)
        assert len(verdict.headers["location"]) < 120
    _checked(tc, tc.get("/ui/leases"))
    # error pages: the workbench's own policy, its stylesheet, and no request state either
    for path, status in (
        ("/ui/no-such-page", 404),
        ("/ui/items/nosuchitem-000000000000", 404),
        ("/ui/calibration", 403),
    ):
        err = _checked(tc, tc.get(path))
        assert err.status_code == status and err.headers["content-security-policy"] == CSP, path
        assert f'<link rel="stylesheet" href="{URLS["workbench.css"]}"' in err.text
    for lease_page in re.findall(r'action="/ui/leases/([0-9a-f]+)/release"', tc.get("/ui/leases").text):
        tc.post(f"/ui/leases/{lease_page}/release", data={"csrf": csrf})


def test_a_lease_is_the_reviewers_whichever_sign_in_took_it(seeded: Seeded) -> None:
    """Issue 36: after signing in again a reviewer found her own items "leased to another reviewer"."""
    with TestClient(app=make_app(seeded.settings)) as first, TestClient(app=make_app(seeded.settings)) as second:
        sign_in(first, seeded.key("ana"))
        csrf = form_token(first.get("/ui/queue").text)
        r = first.post("/ui/claim", data={"csrf": csrf, "show": "all"}, follow_redirects=False)
        item_path = r.headers["location"].split("?")[0]
        sign_in(second, seeded.key("ana"))
        page = second.get(item_path).text
        assert "Your lease" in page and "Leased to another reviewer" not in page and 'id="verdict-form"' in page
        mine = second.get("/ui/leases").text
        assert item_path in mine
        lease = re.search(r'action="/ui/leases/([0-9a-f]+)/release"', mine).group(1)
        done = second.post(
            f"/ui/leases/{lease}/release",
            data={"csrf": form_token(mine), "back": "leases"},
            follow_redirects=False,
        )
        assert done.headers["location"] == "/ui/leases?m=released"
        assert item_path not in second.get("/ui/leases").text


def test_the_verdict_form_carries_judgements_of_findings_and_spans(tc: Any, seeded: Seeded) -> None:
    """Issue 36 item 2 over HTTP: each finding's select sends a judgement (JSON), each marked span a span; one of
    each arrives as a string, more as a list; a judgement the item has no finding for is refused, nothing stored."""
    sign_in(tc, seeded.key("admin"))
    item_path = _item_url(seeded, "d")
    page = tc.get(item_path).text
    options = [(json.loads(v), d) for v, d in re.findall(r"<option value='([^']+)' data-decision=\"(\w+)\"", page)]
    assert ({"finding": "critical.number", "decision": "accept"}, "accept") in options
    assert ({"finding": "critical.list_size", "decision": "regrade", "severity": "minor"}, "regrade") in options
    csrf = form_token(page)
    api = {"Authorization": f"Bearer {seeded.key('admin')}"}
    before = tc.get(f"/v1/review/items/{seeded.item('d')}/verdicts", headers=api).json()
    bad = tc.post(
        f"{item_path}/verdict",
        data={"csrf": csrf, "label": "MINOR", "then": "queue", "judgement": '{"finding":"nope","decision":"accept"}'},
        follow_redirects=False,
    )
    assert bad.status_code == 422 and "not a finding of this item" in bad.text
    span = '{"side":"source","start":0,"end":4,"severity":"minor","category":"accuracy/name"}'
    good = tc.post(
        f"{item_path}/verdict",
        data={
            "csrf": csrf,
            "label": "MINOR",
            "then": "queue",
            "judgement": ['{"finding":"critical.number","decision":"accept"}', ""],
            "span": span,
        },
        follow_redirects=False,
    )
    assert good.status_code == 303, good.text
    after = tc.get(f"/v1/review/items/{seeded.item('d')}/verdicts", headers=api).json()
    assert len(after) == len(before) + 1
    assert after[-1]["findings"] == [{"finding": "critical.number", "decision": "accept", "severity": None}]
    assert after[-1]["spans"][0]["category"] == "accuracy/name" and after[-1]["spans"][0]["end"] == 4


def test_a_reviewers_day_blind_second_opinions_and_replacing_her_own_verdict(seeded: Seeded) -> None:
    """Issue 36 item 4: the queue shows what she did today and what is left; another reviewer's label is hidden until
    she has given hers; her own verdict may be replaced (the page says so), never doubled."""
    api = {"Authorization": f"Bearer {seeded.key('admin')}"}
    with TestClient(app=make_app(seeded.settings)) as ana, TestClient(app=make_app(seeded.settings)) as ben:
        fresh = ana.get("/v1/review/queue", params={"scope": "all", "status": "open"}, headers=api).json()["items"]
        item_id = fresh[0]["id"]  # an item no one has judged yet (earlier tests judged some)
        item_path = f"/ui/items/{item_id}"
        sign_in(ana, seeded.key("ana"))
        sign_in(ben, seeded.key("ben"))
        queue = ana.get("/ui/queue").text
        done = int(re.search(r'id="done-today">(\d+)<', queue).group(1))
        assert re.search(r'id="left-top_1">[\d,]+\+?<', queue) and 'id="left-mine"' in queue
        page = ana.get(item_path).text
        r = ana.post(
            f"{item_path}/verdict",
            data={"csrf": form_token(page), "label": "MAJOR", "note": "ana's secret reason", "then": "queue",
                  "active_seconds": "12"},
            follow_redirects=False,
        )  # fmt: skip
        assert r.status_code == 303, r.text
        assert int(re.search(r'id="done-today">(\d+)<', ana.get("/ui/queue").text).group(1)) == done + 1
        # Ben does not see Ana's label or note before his own verdict
        theirs = ben.get(item_path).text
        assert 'id="blind"' in theirs and "ana&#39;s secret reason" not in theirs and "by Ana" not in theirs
        ben.post(
            f"{item_path}/verdict",
            data={"csrf": form_token(theirs), "label": "VALID", "then": "queue"},
            follow_redirects=False,
        )
        after = ben.get(item_path).text
        assert "by Ana" in after and "ana&#39;s secret reason" in after and 'id="own"' in after
        # Ana's own page: her verdict, and the form replaces it
        mine = ana.get(item_path).text
        assert 'id="own"' in mine and "You can still replace" in mine
        own_id = re.search(r'name="replaces" value="(\d+)"', mine).group(1)
        ana.post(
            f"{item_path}/verdict",
            data={"csrf": form_token(mine), "label": "MINOR", "replaces": own_id, "then": "queue"},
            follow_redirects=False,
        )
        kept = ana.get(f"/v1/review/items/{item_id}/verdicts", headers=api).json()
        anas = [v for v in kept if v["reviewer"].startswith("Ana")]
        assert [(v["label"], v["supersedes"]) for v in anas] == [("MAJOR", None), ("MINOR", int(own_id))]
        assert anas[0]["active_seconds"] == 12.0
