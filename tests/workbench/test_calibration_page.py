"""The calibration page shows each check's precision from reviewers' judgements, the agreement between reviewers and
the activation history's comparisons, and keeps the session out of the page (issue 36)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from litestar.testing import TestClient

from service.app.workbench.access import COOKIE
from tests.support.leaks import assert_no_leaks
from tests.workbench.conftest import Seeded, sign_in


@pytest.fixture()
def tc(app: Any, seeded: Seeded) -> Any:
    with TestClient(app=app) as client:
        yield client


def test_precision_per_check_and_reviewer_agreement_on_the_page(tc: Any, seeded: Seeded) -> None:
    item = seeded.item("d")  # the candidate that says "three" where the Pali says four
    ana, ben = ({"Authorization": f"Bearer {seeded.key(who)}"} for who in ("ana", "ben"))
    listed = tc.get(f"/v1/review/items/{item}", headers=ana).json()["findings"]
    first = listed[0]["id"]
    said = {"label": "MAJOR", "error_category": "number", "findings": [{"finding": first, "decision": "accept"}]}
    assert tc.post(f"/v1/review/items/{item}/verdict", json=said, headers=ana).status_code == 201
    other = {"label": "MINOR", "findings": [{"finding": first, "decision": "reject"}]}
    assert tc.post(f"/v1/review/items/{item}/verdict", json=other, headers=ben).status_code == 201
    admin = {"Authorization": f"Bearer {seeded.key('admin')}"}
    report = tc.get("/v1/calibration/report", headers=admin).json()
    row = next(r for r in report["checks"]["precision"] if r["check"] == listed[0]["rule"] and r["model"] is None)
    assert (row["judged"], row["accepted"], row["rejected"]) == (2, 1, 1)
    (pair,) = report["agreement"]["pairs"]
    assert pair["n"] == 1 and pair["exact_agreement"] == 0.0

    signed = sign_in(tc, seeded.key("admin"))
    page = tc.get("/ui/calibration")
    html = page.text
    assert page.status_code == 200
    table = html[html.index('id="check-precision"') : html.index("</table>", html.index('id="check-precision"'))]
    assert f"<code>{listed[0]['rule']}</code>" in table and '50%<span class="ci">1/2' in table
    assert 'id="kappa-pairs"' in html and f"Ana ({seeded.keys['ana'][1]})" in html
    assert 'id="reviewer-recall"' in html
    # no session or key in the page (the cookie carries it; the page never does)
    cookie = tc.cookies.get(COOKIE)
    assert signed.status_code == 303 and cookie and seeded.key("admin") not in html
    found = re.search(r'name="csrf" value="([^"]*)"', html)
    assert_no_leaks(html, session_token=cookie, form_token=found.group(1) if found else "", urls=[str(page.url)])
