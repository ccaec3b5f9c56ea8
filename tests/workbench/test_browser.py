"""The workbench in a real browser (Debian's chromium through Playwright, scripts/browser.sh installs it) against the
app served on loopback: sign in, claim, see the finding highlighted, record a verdict with the keyboard, see it counted
on the calibration page, sign out; a second reviewer cannot claim the item the first one holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.browser import chromium, serve
from tests.workbench.conftest import Seeded, make_app

MODEL = "meta-llama/llama-3.1-70b"  # the AN 4.1 candidate that says "three" where the Pali says four


@pytest.fixture(scope="module")
def base_url(seeded: Seeded) -> Iterator[str]:
    with serve(make_app(seeded.settings)) as url:
        yield url


@pytest.fixture(scope="module")
def browser(base_url: str) -> Iterator[Any]:
    # after the seeding: Playwright's sync API keeps an event loop running in this thread (no asyncio.run after it)
    with chromium() as b:
        yield b


def _sign_in(page: Any, base_url: str, key: str) -> None:
    page.goto(f"{base_url}/ui/queue")
    assert "/ui/signin" in page.url  # no session: the sign-in form first
    page.fill("#key", key)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{base_url}/ui/queue**")


@pytest.mark.slow
def test_review_in_a_browser(browser: Any, base_url: str, seeded: Seeded) -> None:
    ana_ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ben_ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ana, ben = ana_ctx.new_page(), ben_ctx.new_page()
    errors: list[str] = []
    ana.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    ana.on("pageerror", lambda e: errors.append(str(e)))

    _sign_in(ana, base_url, seeded.key("ana"))
    assert "trisk_session" not in ana.evaluate("document.cookie")  # HttpOnly: no script reads it
    stored = ana.evaluate("JSON.stringify([localStorage, sessionStorage])")
    # nothing kept in the browser but htmx's note of the current path (its page cache is off)
    assert ana.evaluate("Object.keys(localStorage).concat(Object.keys(sessionStorage))") == [
        "htmx-current-path-for-history"
    ]
    assert seeded.key("ana") not in stored
    assert seeded.key("ana") not in ana.content()

    ana.goto(f"{base_url}/ui/queue?model={MODEL}")
    ana.keyboard.press("n")  # claim next, keeping the page's filter
    ana.wait_for_url(f"{base_url}/ui/items/**")
    held = ana.url.split("?")[0]
    mark = ana.locator("#candidate-text mark", has_text="three").first
    assert mark.is_visible()
    assert mark.get_attribute("data-finding") == "1"
    assert "candidate says three" in ana.locator("#finding-1").inner_text()
    assert ana.locator("#lease .left").inner_text().count(":") == 1  # the lease clock runs (m:ss)
    assert ana.evaluate("document.documentElement.scrollWidth") <= 1280  # usable at 1280 px

    # a second reviewer cannot claim the item Ana holds: the claim gives the other copy, then nothing
    _sign_in(ben, base_url, seeded.key("ben"))
    ben.goto(f"{base_url}/ui/queue?model={MODEL}")
    ben.keyboard.press("n")
    ben.wait_for_url(f"{base_url}/ui/items/**")
    assert ben.url.split("?")[0] != held
    ben.keyboard.press("n")  # skip: nothing else to claim, and the skipped item's lease is released
    ben.wait_for_url(f"{base_url}/ui/queue**")
    assert "Nothing left to claim" in ben.content()
    ben.goto(held)
    assert ben.get_by_text("Leased to another reviewer").is_visible()
    assert ben.locator("#verdict-form").count() == 0

    # the verdict, by keyboard alone
    ana.keyboard.press("3")
    assert ana.locator("input[name=label][value=MAJOR]").is_checked()
    ana.keyboard.press("e")
    ana.keyboard.type("number")
    ana.keyboard.press("Escape")
    ana.keyboard.press("t")
    ana.keyboard.type("says three; the Pali says catunnaṃ, four")
    # record, then claim the next: the copy Ben skipped (his `n` on it released its lease)
    with ana.expect_navigation():
        ana.keyboard.press("Control+Enter")
    assert "/ui/items/" in ana.url and ana.url.split("?")[0] != held and "Your lease" in ana.content()
    ana.keyboard.press("q")  # leaving the item releases it: back to the queue
    ana.wait_for_url(f"{base_url}/ui/queue**")
    assert "Lease released" in ana.content()
    item_id = held.rsplit("/", 1)[1]
    admin = {"Authorization": f"Bearer {seeded.key('admin')}"}
    verdicts = httpx.get(f"{base_url}/v1/review/items/{item_id}/verdicts", headers=admin).json()
    assert [(v["label"], v["reviewer"], v["error_category"]) for v in verdicts] == [
        ("MAJOR", f"Ana ({seeded.keys['ana'][1]})", "number")
    ]
    assert verdicts[0]["note"] == "says three; the Pali says catunnaṃ, four"

    # counted on the calibration page (an admin's)
    ana.click("text=Sign out")
    ana.wait_for_url(f"{base_url}/ui/signin**")
    assert "Signed out." in ana.content()
    _sign_in(ana, base_url, seeded.key("admin"))  # (it checks the old session is gone: the sign-in form first)
    ana.goto(f"{base_url}/ui/calibration")
    assert ana.locator("#count-major").inner_text() == "1"
    assert ana.locator("#count-labels").inner_text() == "1"
    assert ana.locator(".chart svg polyline, .chart svg line").count() > 0
    ana.click("text=Sign out")
    ana.wait_for_url(f"{base_url}/ui/signin**")
    assert not errors, errors  # no script error, nothing the page's CSP refused
    ana_ctx.close()
    ben_ctx.close()
