"""A reviewer's shift in a real browser: two reviewers work N items (default 50) of a PaliBench dev batch by
keyboard alone (claim with n, a label key, Ctrl+Enter to record and claim the next), with "Show: every candidate",
on a private stack (the API and a worker as processes, a private redis-server, a throwaway SQLite store). Every page
between is checked: error pages (a document answered 4xx/5xx, or the workbench's problem page) and leaks (the
session token anywhere, the form token outside its field, a URL holding either or grown past tests/support/leaks.py's
MAX_URL). Prints both counts (0 and 0 expected), the time per verdict and the load average.

    .venv/bin/python bench/workbench_chain.py [--items 50] [--passages 12]

Needs the shared data folder (PaliBench dev) and Debian's chromium (scripts/browser.sh).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))

from bench.workbench_screenshots import sign_in, wait_done  # noqa: E402
from service.platform.settings import SHARED_DIR, Settings  # noqa: E402
from service.state.durable import open_store  # noqa: E402
from service.state.durable.access import issue_key  # noqa: E402
from tests.support.browser import chromium  # noqa: E402
from tests.support.evaluation import Stack, load_benchmark, request_item, wait_live  # noqa: E402
from tests.support.leaks import leaks  # noqa: E402

TENANT = "workbench-chain"


class Shift:
    """One reviewer's browser; counts what the pages it was shown gave away or failed with."""

    def __init__(self, browser: Any, url: str, key: str) -> None:
        self.ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.ctx.new_page()
        self.error_pages: list[str] = []
        self.leaks: list[str] = []
        self.page.on(
            "response",
            lambda r: (
                self.error_pages.append(f"{r.status} {r.url}")
                if r.request.resource_type == "document" and r.status >= 400
                else None
            ),
        )
        sign_in(self.page, url, key)
        self.page.goto(f"{url}/ui/queue?show=all")
        self.check()

    def check(self) -> None:
        session = next((c["value"] for c in self.ctx.cookies() if c["name"] == "trisk_session"), "")
        form = self.page.locator('input[name="csrf"]').first.get_attribute("value") or ""
        html = self.page.content()
        if 'class="problem"' in html:
            self.error_pages.append(f"problem page at {self.page.url}")
        self.leaks += leaks(html, session_token=session, form_token=form, urls=[self.page.url])

    def press(self, key: str) -> None:
        with self.page.expect_navigation():
            self.page.keyboard.press(key)
        self.check()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=50, help="verdicts to record, alternating between two reviewers")
    ap.add_argument("--passages", type=int, default=12, help="PaliBench dev passages in the batch")
    args = ap.parse_args()
    if not (SHARED_DIR / "palibench-dev").is_dir():
        print(f"no PaliBench dev folder under {SHARED_DIR}: nothing to review", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="trisk-chain-"))
    env = {
        "TRISK_DB_PATH": str(work / "trisk.db"),
        "TRISK_INDEX_PATH": str(work / "no-index.trisk"),
        "TRISK_LOG_FORMAT": "text",
    }
    stack = Stack(None, workers=1, env=env, log_dir=work)
    try:
        db = open_store(Settings.from_env(stack.env).durable)
        admin, _ = issue_key(db, TENANT, "lead", ["admin"])
        keys = [issue_key(db, TENANT, name, ["review"])[0] for name in ("Ana", "Ben")]
        api = httpx.Client(base_url=stack.url, timeout=60)
        wait_live(api, work)
        bench = load_benchmark(SHARED_DIR / "palibench-dev", SHARED_DIR / "corpus" / "bilara", args.passages)
        items = [request_item(p) for p in bench.passages]
        batch = api.post("/v1/batches", json={"items": items}, headers={"Authorization": f"Bearer {admin}"}).json()
        print(f"waiting for the worker on {len(items)} passages (logs in {work}) ...", flush=True)
        wait_done(api, f"/v1/batches/{batch['id']}", admin)
        total = api.get(
            "/v1/review/queue", params={"scope": "all"}, headers={"Authorization": f"Bearer {admin}"}
        ).json()["total"]
        if total < args.items:
            print(f"only {total} items for {args.items} verdicts: give more --passages", file=sys.stderr)
            return 2
        with chromium() as browser:
            shifts = [Shift(browser, stack.url, k) for k in keys]
            for s in shifts:
                s.press("n")
            seconds: list[float] = []
            for k in range(args.items):
                s = shifts[k % 2]
                s.page.keyboard.press("13"[int(k % 5 == 0)])  # MAJOR now and then, else VALID
                t0 = time.perf_counter()
                s.press("Control+Enter")  # record, claim the next
                seconds.append(time.perf_counter() - t0)
                if "/ui/items/" not in s.page.url:
                    s.error_pages.append(f"verdict {k + 1} did not lead to the next item: {s.page.url}")
                    break
            errors = [e for s in shifts for e in s.error_pages]
            leaked = [e for s in shifts for e in s.leaks]
        given = sum(
            len(api.get(f"/v1/review/items/{it['id']}/verdicts", headers={"Authorization": f"Bearer {admin}"}).json())
            for it in api.get(
                "/v1/review/queue",
                params={"scope": "all", "status": "reviewed", "limit": 500},
                headers={"Authorization": f"Bearer {admin}"},
            ).json()["items"]
        )
    finally:
        stack.close()
    load = os.getloadavg()
    print(f"verdicts recorded by keyboard: {given} of {args.items} asked ({total} items in the queue)")
    print(f"error pages: {len(errors)}")
    for e in errors[:10]:
        print(f"  {e}")
    print(f"leaks: {len(leaked)}")
    for e in leaked[:10]:
        print(f"  {e}")
    if seconds:
        print(
            f"Ctrl+Enter to the next item: median {statistics.median(seconds) * 1000:.0f} ms, "
            f"max {max(seconds) * 1000:.0f} ms (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})"
        )
    return 0 if not errors and not leaked and given == args.items else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    raise SystemExit(main())
