"""Screenshots of every page of the review workbench, on a private stack (the API and a worker as processes, a
private redis-server, a throwaway SQLite store), at 1280 px, into var/screenshots/ (not committed).

    .venv/bin/python bench/workbench_screenshots.py [--passages 40] [--out var/screenshots]

What it sets up: the AN 4.1 example (one candidate says "three" where the Pali says four), a batch of PaliBench dev
passages, and verdicts on the batch's candidates taken from PaliBench's outlier labels (MAJOR for an outlier, else
VALID; a stand-in reviewer, named so) so the calibration page has figures. Then a browser (Debian's chromium via
Playwright, scripts/browser.sh installs it) signs in as reviewer Ana, claims the AN 4.1 item, accepts one finding,
rejects the other, marks a span the findings missed and records a verdict, all with the keyboard, shows her leases,
lets a second reviewer open an item Ana holds and the AN 4.1 item (blind), and signs in as an admin for calibration
and the batch. Prints each file and what it shows. Needs the shared data folder for the batch (skipped without it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))

from service.platform.settings import SHARED_DIR, Settings  # noqa: E402
from service.review import item_id_of  # noqa: E402
from service.state.durable import open_store  # noqa: E402
from service.state.durable.access import issue_key  # noqa: E402
from tests.support.browser import chromium  # noqa: E402
from tests.support.evaluation import Stack, load_benchmark, request_item, wait_live  # noqa: E402

TENANT = "workbench-demo"
EXAMPLE = _ROOT / "openapi" / "examples" / "assessment-an4.1.json"
# selects the word "three" in the candidate, as a reviewer's mouse would
SELECT_THREE = """() => {
  const mark = Array.from(document.querySelectorAll("#candidate-text mark")).find(m => m.textContent === "three");
  const range = document.createRange();
  range.selectNodeContents(mark.firstChild);
  window.getSelection().removeAllRanges();
  window.getSelection().addRange(range);
}"""


def wait_done(api: httpx.Client, path: str, key: str, seconds: float = 900) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        body = api.get(path, headers={"Authorization": f"Bearer {key}"}).json()
        if body.get("status") == "done":
            return body
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not finish: {body.get('status')}")
        time.sleep(1.0)


def _label_batch(api: httpx.Client, key: str, batch_id: str, labels: dict[tuple[str, str], dict[str, float]]) -> int:
    """Verdicts from PaliBench's outlier labels on the batch's candidates (through the JSON API)."""
    auth = {"Authorization": f"Bearer {key}"}
    page = api.get(
        "/v1/review/queue", params={"batch": batch_id, "scope": "all", "status": "any", "limit": 500}, headers=auth
    ).json()
    n = 0
    for it in page["items"]:
        ref = labels.get((it["passage"], it["candidate_id"]))
        if ref is None:
            continue
        label = "MAJOR" if ref["outlier"] >= 0.5 else "VALID"
        r = api.post(
            f"/v1/review/items/{it['id']}/verdict",
            json={"label": label},
            headers=auth,
        )
        r.raise_for_status()
        n += 1
    return n


def sign_in(page: Any, url: str, key: str) -> None:
    page.goto(f"{url}/ui/signin")
    page.fill("#key", key)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=40, help="PaliBench dev passages in the demo batch")
    ap.add_argument("--out", default=str(_ROOT / "var" / "screenshots"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="trisk-screens-"))
    index = _ROOT / "var" / "index" / "pli-sutta.trisk"
    env = {
        "TRISK_DB_PATH": str(work / "trisk.db"),
        "TRISK_INDEX_PATH": str(index if index.exists() else work / "no-index.trisk"),
        "TRISK_LOG_FORMAT": "text",
    }
    stack = Stack(None, workers=1, env=env, log_dir=work)
    shots: list[tuple[str, str]] = []
    try:
        db = open_store(Settings.from_env(stack.env).durable)
        admin, _ = issue_key(db, TENANT, "lead", ["admin"])
        ana, _ = issue_key(db, TENANT, "Ana", ["review"])
        ben, _ = issue_key(db, TENANT, "Ben", ["review"])
        # the stand-in verdicts' key names their reviewer (a key is its reviewer)
        stand_in, _ = issue_key(db, TENANT, "palibench outlier labels (stand-in)", ["review"])
        api = httpx.Client(base_url=stack.url, timeout=60)
        wait_live(api, work)
        auth = {"Authorization": f"Bearer {admin}"}
        example = json.loads(EXAMPLE.read_text())
        aid = api.post("/v1/assessments", json=example, headers=auth).json()["id"]
        batch_id = None
        labels: dict[tuple[str, str], dict[str, float]] = {}
        if (SHARED_DIR / "palibench-dev").is_dir():
            bench = load_benchmark(SHARED_DIR / "palibench-dev", SHARED_DIR / "corpus" / "bilara", args.passages)
            labels = bench.labels
            items = [request_item(p) for p in bench.passages]
            batch_id = api.post("/v1/batches", json={"items": items}, headers=auth).json()["id"]
        print(f"waiting for the worker (logs in {work}) ...", flush=True)
        wait_done(api, f"/v1/assessments/{aid}", admin)
        if batch_id is not None:
            wait_done(api, f"/v1/batches/{batch_id}", admin)
            labelled = _label_batch(api, stand_in, batch_id, labels)
            print(f"{labelled} stand-in verdicts from PaliBench's labels", flush=True)
        flagged = item_id_of(aid, "d")
        with chromium() as browser:
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            page = ctx.new_page()

            def shot(name: str, what: str, full: bool = False) -> None:
                path = out / f"{name}.png"
                page.screenshot(path=str(path), full_page=full)
                shots.append((str(path), what))

            page.goto(f"{stack.url}/ui/queue")
            shot("01-signin", "the sign-in form (a key is exchanged for an HttpOnly session cookie)")
            sign_in(page, stack.url, ana)
            shot("02-queue", "the queue in budget order: tier, language, model, findings and lease state; filters")
            page.goto(f"{stack.url}/ui/queue?model=meta-llama/llama-3.1-70b")
            page.keyboard.press("n")  # claim next, with the page's filter: the AN 4.1 candidate that says "three"
            page.wait_for_url(f"**/ui/items/{flagged}**")
            shot("03-item", "one item: Pali source, the candidate with its findings marked, lease time, verdict form")
            shot("04-item-full", "the same item whole: clause-aligned peers, signals, risk, budget, judges", full=True)
            # the reviewer's word on each finding: the number finding holds (j, a), the list-size one does not (j, x)
            for key in ("j", "a", "j", "x"):
                page.keyboard.press(key)
            # an error no finding named: "three" selected in the candidate, marked (m) with the dialog's defaults
            page.evaluate(SELECT_THREE)
            page.keyboard.press("m")
            shot("05-span-dialog", "marking an error the findings missed: severity and MQM category for the selection")
            page.keyboard.press("Enter")
            page.keyboard.press("3")
            page.keyboard.press("e")
            page.keyboard.type("number")
            page.keyboard.press("Escape")
            page.keyboard.press("t")
            page.keyboard.type("says three things; the Pali says catunnaṃ, four")
            shot("06-verdict-typed", "a finding accepted, one rejected, a span added; MAJOR (3), category and note")
            shot("07-verdict-typed-full", "the same, whole page", full=True)
            with page.expect_navigation():
                page.keyboard.press("Control+Enter")  # records, then claims the next with the same filter: none left
            page.goto(f"{stack.url}/ui/items/{flagged}")
            shot("08-own-verdict", "the item after her verdict: its history shows the judgements and the span")
            page.goto(f"{stack.url}/ui/queue")
            page.keyboard.press("n")
            page.wait_for_url("**/ui/items/**")
            shot("09-next-item", "the next item claimed from the whole queue (n), with its lease clock")
            held = page.url
            page.goto(f"{stack.url}/ui/leases")
            shot("10-my-leases", "my leases: the items her key holds, whichever sign-in claimed them")
            other = browser.new_context(viewport={"width": 1280, "height": 900})
            page2 = other.new_page()
            sign_in(page2, stack.url, ben)
            page2.goto(held)
            page2.screenshot(path=str(out / "11-leased-to-another.png"))
            shots.append((str(out / "11-leased-to-another.png"), "a second reviewer on an item Ana holds: no verdict"))
            page2.goto(f"{stack.url}/ui/items/{flagged}")
            page2.screenshot(path=str(out / "12-second-opinion.png"), full_page=False)
            shots.append((str(out / "12-second-opinion.png"), "a blind second opinion: Ana's label hidden until Ben's"))
            other.close()
            page.click("text=Sign out")
            sign_in(page, stack.url, admin)
            page.goto(f"{stack.url}/ui/calibration")
            shot("13-calibration", "calibration: label counts, budget-recall chart", full=False)
            shot("14-calibration-full", "calibration whole: AUC and recall per score with intervals, judges, models",
                 full=True)  # fmt: skip
            if batch_id is not None:
                page.goto(f"{stack.url}/ui/batches/{batch_id}")
                shot("15-batch", "a batch: progress bar and counts, its candidates in the one ranking")
            page.goto(f"{stack.url}/ui/items/no-such-item-000000000000")
            shot("16-error", "an error page: the API's problem (status, title, wording), the workbench's style")
            ctx.close()
    finally:
        stack.close()
    for path, what in shots:
        print(f"{path}: {what}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    raise SystemExit(main())
