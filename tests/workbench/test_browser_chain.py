"""Issue 36: a shift's worth of keyboard verdicts in a real browser (Debian's chromium through Playwright): two
reviewers record ten verdicts in a row by Ctrl+Enter alone, with "Show: every candidate", and every page between is
checked for request state (session and form tokens) and for error pages. The third verdict used to answer 431."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from tests.support.browser import chromium, serve
from tests.support.leaks import assert_no_leaks
from tests.workbench.conftest import EXAMPLE, Seeded, cleanup, make_app, seed
from tests.worker_support import run_worker_burst

pytestmark = pytest.mark.long(60)

VERDICTS = 10


@pytest.fixture(scope="module")
def chain_seeded(wb_settings: Any) -> Iterator[Seeded]:
    """The workbench's seed (two copies of the example) and two more copies: 16 items, more than the chain needs."""
    with TestClient(app=make_app(wb_settings)) as tc:
        s = seed(wb_settings, tc)
        admin = {"Authorization": f"Bearer {s.key('admin')}"}
        for _ in range(2):
            assert tc.post("/v1/assessments", json=EXAMPLE, headers=admin).status_code == 202
        run_worker_burst(wb_settings)
    yield s
    cleanup(wb_settings, s.tenant, [k for _, k in s.keys.values()])


@pytest.fixture(scope="module")
def base_url(chain_seeded: Seeded) -> Iterator[str]:
    with serve(make_app(chain_seeded.settings)) as url:
        yield url


class Reviewer:
    """One browser context signed in with a key; every document it loads is checked."""

    def __init__(self, browser: Any, base_url: str, key: str) -> None:
        self.ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.ctx.new_page()
        self.base = base_url
        self.errors: list[str] = []
        self.statuses: list[tuple[int, str]] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on(
            "response",
            lambda r: self.statuses.append((r.status, r.url)) if r.request.resource_type == "document" else None,
        )
        self.page.goto(f"{base_url}/ui/queue?show=all")
        self.page.fill("#key", key)
        with self.page.expect_navigation():
            self.page.keyboard.press("Enter")
        self.check()

    def check(self) -> None:
        """The page now shown: no error page, no token in it or in its URL."""
        session = next(c["value"] for c in self.ctx.cookies() if c["name"] == "trisk_session")
        html = self.page.content()
        form = self.page.locator('input[name="csrf"]').first.get_attribute("value") or ""
        assert_no_leaks(html, session_token=session, form_token=form, urls=[self.page.url])
        bad = [(s, u) for s, u in self.statuses if s >= 400]
        assert not bad and 'class="problem"' not in html, (bad, self.page.url)
        assert not self.errors, self.errors

    def press(self, key: str) -> None:
        with self.page.expect_navigation():
            self.page.keyboard.press(key)
        self.check()


MODEL = "meta-llama/llama-3.1-70b"  # the AN 4.1 candidate that says "three" where the Pali says four

SELECT_THREE = """() => {
  const el = document.getElementById("candidate-text");
  const mark = Array.from(el.querySelectorAll("mark")).find(m => m.textContent === "three");
  const range = document.createRange();
  range.selectNodeContents(mark.firstChild);
  const sel = window.getSelection();
  sel.removeAllRanges();
  sel.addRange(range);
  const before = document.createRange();
  before.selectNodeContents(el);
  before.setEnd(mark.firstChild, 0);
  return Array.from(before.toString()).length;
}"""


@pytest.mark.slow
def test_each_finding_accepted_or_rejected_and_a_missed_span_added_by_keyboard(
    base_url: str, chain_seeded: Seeded
) -> None:
    """Issue 36 item 2: on the item page, j/k choose a finding, a accepts it, x rejects it; a selection in the
    candidate and m mark an error span; the verdict keeps them all, and the API returns them."""
    with chromium() as browser:
        ana = Reviewer(browser, base_url, chain_seeded.key("ana"))
        ana.page.goto(f"{base_url}/ui/queue?model={MODEL}&show=all")
        ana.check()
        ana.press("n")
        item = ana.page.url.split("?")[0].rsplit("/", 1)[1]
        # at 800 px the verdict panel sits below the texts, never over the candidate, and nothing widens the page:
        # the clause table scrolls in its own box
        ana.page.set_viewport_size({"width": 800, "height": 900})
        text, panel = ana.page.locator("#candidate-text").bounding_box(), ana.page.locator("aside.panel").bounding_box()
        assert panel["y"] >= text["y"] + text["height"], (text, panel)
        assert ana.page.evaluate("document.documentElement.scrollWidth") <= 800
        cells = ana.page.eval_on_selector_all(
            "table.aligned tr:first-child td",
            "tds => tds.map(td => [td.getBoundingClientRect().left, td.getBoundingClientRect().right])",
        )
        assert all(a[1] <= b[0] + 1 for a, b in itertools.pairwise(cells)), cells  # side by side, no overlap
        ana.page.set_viewport_size({"width": 1280, "height": 900})
        ids = ana.page.eval_on_selector_all("select.judgement", "els => els.map(e => e.dataset.findingId)")
        assert ids[:2] == ["critical.number", "critical.list_size"], ids
        for key in ("j", "a", "j", "x"):
            ana.page.keyboard.press(key)
        assert ana.page.locator("#finding-1").get_attribute("class").count("judged-accept") == 1
        start = ana.page.evaluate(SELECT_THREE)
        ana.page.keyboard.press("m")
        assert ana.page.locator("#span-dialog").is_visible()
        ana.page.keyboard.press("Enter")  # the defaults: major, accuracy/mistranslation
        assert "three" in ana.page.locator("#spans").inner_text(), ana.errors
        ana.page.keyboard.press("e")
        ana.page.keyboard.type("number")
        ana.page.keyboard.press("Enter")  # Enter in a field never records the verdict
        assert f"/ui/items/{item}" in ana.page.url and ana.page.locator("#verdict-form").count() == 1
        ana.page.keyboard.press("Escape")
        ana.page.keyboard.press("3")
        ana.press("Control+Enter")
        admin = {"Authorization": f"Bearer {chain_seeded.key('admin')}"}
        for got in (
            httpx.get(f"{base_url}/v1/review/items/{item}/verdicts", headers=admin).json()[0],
            httpx.get(f"{base_url}/v1/review/items/{item}", headers=admin).json()["verdicts"][0],
        ):
            assert got["label"] == "MAJOR" and got["error_category"] == "number"
            assert got["findings"] == [
                {"finding": "critical.number", "decision": "accept", "severity": None},
                {"finding": "critical.list_size", "decision": "reject", "severity": None},
            ]
            assert got["spans"] == [
                {
                    "side": "candidate",
                    "start": start,
                    "end": start + 5,
                    "severity": "major",
                    "category": "accuracy/mistranslation",
                    "note": None,
                }
            ]
        ana.page.goto(f"{base_url}/ui/items/{item}")
        shown = ana.page.locator("section.history").inner_text()
        assert "accepted" in shown and "rejected" in shown and "“three”" in shown
        ana.press("q")
        ana.ctx.close()


@pytest.mark.slow
def test_ten_keyboard_verdicts_in_a_row_by_two_reviewers(base_url: str, chain_seeded: Seeded) -> None:
    with chromium() as browser:
        ana = Reviewer(browser, base_url, chain_seeded.key("ana"))
        ben = Reviewer(browser, base_url, chain_seeded.key("ben"))
        for r in (ana, ben):
            assert "/ui/queue?show=all" in r.page.url
            r.press("n")  # claim the first item, every candidate shown
        judged: list[str] = []
        for k in range(VERDICTS):
            r = (ana, ben)[k % 2]
            assert "/ui/items/" in r.page.url and "Your lease" in r.page.content(), r.page.url
            judged.append(r.page.url.split("?")[0].rsplit("/", 1)[1])
            r.page.keyboard.press(("1", "3")[k % 3 == 0])  # VALID or MAJOR, by the keys 1 and 3
            r.press("Control+Enter")  # record, claim the next
            assert len(r.page.url) < 200, r.page.url
        assert len(set(judged)) == VERDICTS
        admin = {"Authorization": f"Bearer {chain_seeded.key('admin')}"}
        who = {}
        for item in judged:
            verdicts = httpx.get(f"{base_url}/v1/review/items/{item}/verdicts", headers=admin).json()
            assert len(verdicts) == 1, verdicts
            who[item] = verdicts[0]["reviewer"]
        assert sorted(set(who.values())) == sorted(f"{n} ({chain_seeded.keys[n.lower()][1]})" for n in ("Ana", "Ben"))
        for r in (ana, ben):
            r.press("q")  # leave the last item claimed: its lease is released
            assert "/ui/queue" in r.page.url
            r.ctx.close()
