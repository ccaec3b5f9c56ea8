"""Access control through the real app: keys (401), scopes (403), tenants kept apart on every route (404 like an id
that never existed), rate limits (429 with their headers), the key CLI, security headers, CORS and /metrics."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from litestar.testing import TestClient

from service.app import create_app
from service.app.auth import KeyCache
from service.app.resources import Resources
from service.cli import main as cli
from service.core.novelty import NoveltyIndex
from service.core.risk import ReferenceDistribution, RiskModel, SignalWeight
from service.platform.auth import new_key, parse_token
from service.platform.settings import Settings
from service.state.durable import open_store
from service.state.durable.access import AccessStore
from tests.conftest import issue_test_key
from tests.worker_support import run_worker_burst

SOURCE = "Sattaratanasampannā, Tīsu sikkhāsu sikkhitā; Anuvicaranti mahāvīrā, Pahīnabhayabheravā."
GOOD = [
    "Endowed with the seven treasures, trained in the three trainings, the great heroes wander, fearless.",
    "Possessed of the seven gems, trained in the three trainings, great heroes roam about, fear abandoned.",
]
BODY = {
    "source": {"text": SOURCE, "lang": "pli", "ref": "sn22.76:7"},
    "candidates": [{"id": f"c{i}", "text": t} for i, t in enumerate(GOOD)],
    "checks": ["peer_distance", "hard_flags"],
}


@pytest.fixture()
def settings(test_settings: Settings) -> Settings:
    return replace(test_settings, redis=replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"))


@pytest.fixture()
def app_client(sn12_index: NoveltyIndex, settings: Settings) -> Iterator[TestClient[Any]]:
    """The app with no key on its requests: each test sends the key it means to test."""
    with TestClient(
        app=create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    ) as tc:
        yield tc


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_every_route_but_health_and_docs_needs_a_key(app_client: TestClient[Any]) -> None:
    assert app_client.get("/health/live").status_code == 200
    assert app_client.get("/schema/openapi.json").status_code == 200
    for method, path in [("GET", "/v1/assessments/x"), ("POST", "/v1/assessments"), ("GET", "/metrics")]:
        r = app_client.request(method, path, json=BODY if method == "POST" else None)
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.headers["www-authenticate"].startswith("Bearer")


def test_unknown_wrong_revoked_and_expired_keys_are_401(app_client: TestClient[Any], settings: Settings) -> None:
    good = issue_test_key(settings, scopes=("read",))
    key_id = good.split("_")[1]
    store = AccessStore(open_store(settings.durable))
    expired_token, expired = new_key("test-expiry", "old", ["read"], now=time.time() - 100, expires_at=time.time() - 1)
    store.add_key(expired)
    revoked = issue_test_key(settings, scopes=("read",))
    store.revoke_key(revoked.split("_")[1])
    assert app_client.get("/v1/calibration/models", headers=bearer(good)).status_code == 200
    messages = set()
    for token in (
        "not-a-key",
        f"trisk_{key_id}_{'A' * 43}",  # a real key id with a wrong secret
        f"trisk_{'0' * 12}_{'A' * 43}",  # an id that does not exist
        revoked,
        expired_token,
    ):
        r = app_client.get("/v1/calibration/models", headers=bearer(token))
        assert r.status_code == 401, token
        messages.add(r.json()["detail"])
    assert len(messages) == 1  # nothing tells a wrong secret from an unknown id
    # the same key in the other header works too
    assert app_client.get("/v1/calibration/models", headers={"X-API-Key": good}).status_code == 200


@pytest.mark.parametrize(
    ("scopes", "method", "path", "status"),
    [
        (("read",), "POST", "/v1/assessments", 403),
        (("read",), "GET", "/v1/review/queue", 403),
        (("submit",), "POST", "/v1/calibration/fits", 403),
        (("review",), "GET", "/v1/keys", 403),
        (("review",), "POST", "/v1/novelty", 403),
        (("submit",), "GET", "/metrics", 403),
        (("submit",), "POST", "/v1/assessments", 202),
        (("submit",), "GET", "/v1/calibration/models", 200),  # submit implies read
        (("review",), "GET", "/v1/review/queue", 200),
        (("admin",), "GET", "/metrics", 200),
        (("admin",), "GET", "/v1/review/queue", 200),  # admin implies the rest
    ],
)
def test_scopes(
    app_client: TestClient[Any], settings: Settings, scopes: tuple[str, ...], method: str, path: str, status: int
) -> None:
    token = issue_test_key(settings, scopes=scopes)
    r = app_client.request(method, path, headers=bearer(token), json=BODY if path == "/v1/assessments" else {})
    assert r.status_code == status, r.text
    if status == 403:
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["required_scope"] in ("submit", "review", "admin")


def test_a_query_parameter_given_twice_is_malformed(app_client: TestClient[Any], settings: Settings) -> None:
    token = issue_test_key(settings, scopes=("review",))
    r = app_client.get("/v1/adjudications?item_id=a&item_id=b", headers=bearer(token))
    assert r.status_code == 400 and "given 2 times" in r.json()["detail"]
    assert app_client.get("/v1/adjudications?item_id=a", headers=bearer(token)).status_code == 200


def test_openapi_declares_the_schemes_and_each_routes_scope(app_client: TestClient[Any]) -> None:
    doc = app_client.get("/schema/openapi.json").json()
    assert set(doc["components"]["securitySchemes"]) == {"bearerAuth", "apiKeyHeader"}
    seen = 0
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if path.startswith("/health"):
                assert not op.get("security"), path
                continue
            scopes = {s for req in op["security"] for s in next(iter(req.values()))}
            assert len(scopes) == 1 and scopes <= {"read", "submit", "review", "admin"}, (method, path)
            seen += 1
    assert seen >= 25


# ---------------------------------------------------------------------------------------------- two tenants


class Tenant:
    def __init__(self, client: TestClient[Any], settings: Settings, name: str) -> None:
        self.name = name
        self.client = client
        self.token = issue_test_key(settings, tenant=name, scopes=("admin",))

    def __call__(self, method: str, path: str, **kw: Any) -> Any:
        headers = {**kw.pop("headers", {}), **bearer(self.token)}
        return self.client.request(method, path, headers=headers, **kw)


def test_two_tenants_never_see_or_change_each_others_data(
    app_client: TestClient[Any], settings: Settings, sn12_index: NoveltyIndex
) -> None:
    """Tenant A creates one of everything; tenant B walks every route of the app with A's ids. A route added without
    a line here fails the coverage check at the end."""
    a = Tenant(app_client, settings, f"test-a-{uuid.uuid4().hex[:8]}")
    b = Tenant(app_client, settings, f"test-b-{uuid.uuid4().hex[:8]}")
    aid = a("POST", "/v1/assessments", json=BODY).json()["id"]
    bid = a("POST", "/v1/batches", json={"items": [BODY]}).json()["id"]
    run_worker_burst(settings)
    item = a("GET", "/v1/review/queue", params={"scope": "all"}).json()["items"][0]["id"]
    claimed = a("POST", "/v1/review/claims", json={"n": 1, "scope": "all"}).json()
    lease, ana = claimed["lease_id"], claimed["reviewer"]
    assert [i["id"] for i in claimed["items"]] == [item]
    verdict = a("POST", f"/v1/review/items/{item}/verdict", json={"label": "MAJOR", "lease_id": lease})
    assert verdict.status_code == 201, verdict.text
    adj = a("POST", "/v1/adjudications", json={"item_id": item, "reference": "so"}).json()["id"]
    a_key = a("POST", "/v1/keys", json={"name": "second", "scopes": ["read"]}).json()["record"]["key_id"]
    catalog = app_client.app.state.resources.catalog
    model = catalog.add_fitted(a.name, _model)
    catalog.activate(a.name, model.name)
    secret_a = a("GET", "/v1/callbacks/secret").json()["secret"]
    persona = a("POST", "/v1/personas", json=PERSONA).json()["id"]
    evaluation = a("POST", "/v1/poller/evaluations", json={**POLLER, "persona_id": persona}).json()["id"]
    grades = a("POST", "/v1/mata/grades", json=GRADE).json()["id"]
    mcq_run = a("POST", "/v1/mata/mcq-runs", json={"model": "m", "items": [MCQ]}).json()["id"]
    run_worker_burst(settings)  # the judge jobs: without a provider on the worker, every item reads skipped

    checks: dict[tuple[str, str], Callable[[], None]] = {}

    def expect(method: str, template: str, path: str, status: int, **kw: Any) -> None:
        def check() -> None:
            r = b(method, path, **kw)
            assert r.status_code == status, (method, path, r.status_code, r.text)

        checks[(method, template)] = check

    def expect_own(method: str, template: str, path: str, check_body: Callable[[Any], bool], **kw: Any) -> None:
        def check() -> None:
            r = b(method, path, **kw)
            assert r.status_code < 300 and check_body(r), (method, path, r.text)

        checks[(method, template)] = check

    expect("GET", "/v1/assessments/{assessment_id:str}", f"/v1/assessments/{aid}", 404)
    expect("GET", "/v1/batches/{batch_id:str}", f"/v1/batches/{bid}", 404)
    expect("GET", "/v1/batches/{batch_id:str}/results", f"/v1/batches/{bid}/results", 404)
    expect_own("GET", "/v1/review/queue", "/v1/review/queue?scope=all&status=any", lambda r: r.json()["total"] == 0)
    expect_own(
        "POST",
        "/v1/review/claims",
        "/v1/review/claims",
        lambda r: r.json()["items"] == [],
        json={"n": 5, "scope": "all"},
    )
    expect(
        "POST",
        "/v1/review/claims/{lease_id:str}/renew",
        f"/v1/review/claims/{lease}/renew",
        404,
        json={},
    )
    expect("DELETE", "/v1/review/claims/{lease_id:str}", f"/v1/review/claims/{lease}", 404)
    expect("GET", "/v1/review/items/{item_id:str}", f"/v1/review/items/{item}", 404)
    expect(
        "POST",
        "/v1/review/items/{item_id:str}/verdict",
        f"/v1/review/items/{item}/verdict",
        404,
        json={"label": "VALID"},
    )
    # another tenant's item reads as one that never existed (it was 200 [])
    expect("GET", "/v1/review/items/{item_id:str}/verdicts", f"/v1/review/items/{item}/verdicts", 404)
    expect_own("GET", "/v1/exports/verdicts", "/v1/exports/verdicts", lambda r: item not in r.text)
    expect("POST", "/v1/adjudications", "/v1/adjudications", 404, json={"item_id": item, "reference": "so"})
    expect_own("GET", "/v1/adjudications", "/v1/adjudications", lambda r: r.json() == [])
    expect("GET", "/v1/adjudications/{adjudication_id:str}", f"/v1/adjudications/{adj}", 404)
    expect_own("GET", "/v1/calibration/report", "/v1/calibration/report", lambda r: r.json()["labels"]["items"] == 0)
    expect_own("GET", "/v1/calibration/report.svg", "/v1/calibration/report.svg", lambda r: "0 items" in r.text)
    expect_own(
        "GET",
        "/v1/calibration/models",
        "/v1/calibration/models",
        lambda r: model.name not in {m["name"] for m in r.json()},
    )
    expect_own("GET", "/v1/calibration/activations", "/v1/calibration/activations", lambda r: r.json() == [])
    # B's demotion starts from B's active model (the shipped default), never from A's fitted one
    expect_own(
        "POST",
        "/v1/calibration/demotions",
        "/v1/calibration/demotions",
        lambda r: model.name not in r.text,
        json={"check": "critical.number"},
    )
    expect("POST", "/v1/calibration/models/{name:str}/activate", f"/v1/calibration/models/{model.name}/activate", 404)
    expect("POST", "/v1/calibration/fits", "/v1/calibration/fits", 422, json={})  # B has no labels: A's do not count
    expect_own("GET", "/v1/keys", "/v1/keys", lambda r: {k["tenant"] for k in r.json()} == {b.name})
    expect("DELETE", "/v1/keys/{key_id:str}", f"/v1/keys/{a_key}", 404)
    expect_own(
        "POST",
        "/v1/keys",
        "/v1/keys",
        lambda r: r.json()["record"]["tenant"] == b.name,
        json={"name": "mine", "scopes": ["read"]},
    )
    expect_own("GET", "/v1/callbacks/secret", "/v1/callbacks/secret", lambda r: r.json()["secret"] != secret_a)
    expect_own(
        "POST", "/v1/callbacks/secret/rotate", "/v1/callbacks/secret/rotate", lambda r: r.json()["tenant"] == b.name
    )
    personas = "/v1/personas/{persona_id:str}"
    expect_own("GET", "/v1/personas", "/v1/personas", lambda r: r.json() == [])
    expect("GET", personas, f"/v1/personas/{persona}", 404)
    expect("GET", f"{personas}/versions", f"/v1/personas/{persona}/versions", 404)
    expect("PUT", personas, f"/v1/personas/{persona}", 404, json={**PERSONA, "author": "stolen"})
    expect("DELETE", personas, f"/v1/personas/{persona}", 404)
    expect("POST", "/v1/poller/evaluations", "/v1/poller/evaluations", 404, json={**POLLER, "persona_id": persona})
    expect("GET", "/v1/poller/evaluations/{evaluation_id:str}", f"/v1/poller/evaluations/{evaluation}", 404)
    expect(
        "POST",
        "/v1/poller/agreement/stored",
        "/v1/poller/agreement/stored",
        404,
        json={"human": [{"item_id": "r", "scores": {"content": 80}}], "evaluations": [{"evaluation_id": evaluation}]},
    )
    expect("GET", "/v1/mata/grades/{grade_id:str}", f"/v1/mata/grades/{grades}", 404)
    expect("GET", "/v1/mata/mcq-runs/{run_id:str}", f"/v1/mata/mcq-runs/{mcq_run}", 404)
    # routes without tenant data: B gets its own answer, A's data is not involved
    expect_own("POST", "/v1/personas", "/v1/personas", lambda r: r.json()["id"] != persona, json=PERSONA)
    expect_own(
        "POST",
        "/v1/poller/evaluations",
        "/v1/poller/evaluations",
        lambda r: r.json()["id"] != evaluation,
        json={**POLLER, "strategy": "P0"},
    )
    expect_own(
        "POST",
        "/v1/poller/agreement",
        "/v1/poller/agreement",
        lambda r: r.json()["n_items"] == 1,
        json={"human": [{"item_id": "r", "scores": {"content": 80}}],
              "systems": [{"name": "s", "items": [{"item_id": "r", "scores": {"content": 90}}]}],
              "bootstrap": {"resamples": 100}},
    )  # fmt: skip
    expect_own("POST", "/v1/mata/grades", "/v1/mata/grades", lambda r: r.json()["id"] != grades, json=GRADE)
    expect_own(
        "POST", "/v1/mata/grades/batch", "/v1/mata/grades/batch", lambda r: r.json()["id"] != grades,
        json={"items": [GRADE]},
    )  # fmt: skip
    expect_own("POST", "/v1/mata/mcq-answers", "/v1/mata/mcq-answers", lambda r: r.json()["choice"] == "B",
               json={"text": "ANSWER: B"})  # fmt: skip
    expect_own("POST", "/v1/mata/mcq-variants", "/v1/mata/mcq-variants", lambda r: len(r.json()) == 6,
               json={"item": MCQ})  # fmt: skip
    expect_own("POST", "/v1/mata/mcq-runs", "/v1/mata/mcq-runs", lambda r: r.json()["id"] != mcq_run,
               json={"model": "m", "items": [MCQ]})  # fmt: skip
    expect_own(
        "POST",
        "/v1/mata/agreement",
        "/v1/mata/agreement",
        lambda r: r.json()["n_items"] == 1,
        json={"judge": {"rater": "j", "labels": [{"item_id": "1", "label": "correct"}]},
              "humans": [{"rater": "h", "labels": [{"item_id": "1", "label": "correct"}]}],
              "bootstrap": {"resamples": 100}},
    )  # fmt: skip
    expect("DELETE", "/v1/assessments/{assessment_id:str}", f"/v1/assessments/{aid}", 404)
    expect("DELETE", "/v1/batches/{batch_id:str}", f"/v1/batches/{bid}", 404)
    expect_own(
        "GET", "/v1/exports/assessments", "/v1/exports/assessments", lambda r: aid not in r.text and bid not in r.text
    )
    expect_own("POST", "/v1/assessments", "/v1/assessments", lambda r: r.json()["id"] != aid, json=BODY)
    expect_own("POST", "/v1/batches", "/v1/batches", lambda r: r.json()["id"] != bid, json={"items": [BODY]})
    expect_own(
        "POST",
        "/v1/batches/ndjson",
        "/v1/batches/ndjson",
        lambda r: r.json()["total"] == 1,
        content=__import__("json").dumps(BODY).encode(),
        headers={"content-type": "application/x-ndjson"},
    )
    expect_own("POST", "/v1/novelty", "/v1/novelty", lambda r: "index" in r.json(), json={"text": SOURCE})
    expect_own("GET", "/v1/novelty/{passage_id:str}", "/v1/novelty/sn22.76:7", lambda r: "index" in r.json())

    for check in checks.values():
        check()
    # and A's data is all still there, untouched by B's attempts
    assert a("GET", f"/v1/assessments/{aid}").json()["status"] == "done"
    assert a("GET", f"/v1/batches/{bid}").status_code == 200
    assert aid in a("GET", "/v1/exports/assessments").text
    assert [v["reviewer"] for v in a("GET", f"/v1/review/items/{item}/verdicts").json()] == [ana]
    assert item in a("GET", "/v1/exports/verdicts").text
    assert a("GET", f"/v1/review/items/{item}").json()["item"]["status"] == "reviewed"
    assert a("DELETE", f"/v1/review/claims/{lease}").status_code == 200  # B's release did not end A's lease
    assert a("GET", "/v1/callbacks/secret").json()["secret"] == secret_a
    assert len(a("GET", f"/v1/personas/{persona}/versions").json()) == 1
    assert a("GET", f"/v1/poller/evaluations/{evaluation}").json()["result"]["signature"]["persona_id"] == persona

    routes = {
        (method, route.path)
        for route in app_client.app.routes
        for handler in getattr(route, "route_handlers", [])
        for method in handler.http_methods
        # the workbench's pages have their own two-tenant walk (tests/workbench/test_pages.py)
        if method != "OPTIONS" and not route.path.startswith(("/health", "/schema", "/ui")) and route.path != "/"
    }
    # /metrics and /v1/workers are no tenant's: test_process_metrics_are_the_operators_not_any_tenants and
    # tests/core/test_worker_registry.py
    operators_only = {("GET", "/metrics"), ("GET", "/v1/workers")}
    assert routes - set(checks) - operators_only == set(), "routes the two-tenant walk does not cover"


PERSONA = {"author": "Bei Dao", "basic_information": "Born in Beijing in 1949."}
POLLER = {"poem": {"text": "卑鄙是卑鄙者的通行证"}, "interpretation": "An answer to an era of lies."}
GRADE = {"question": "2 + 2?", "answer": "4", "response": "four"}
MCQ = {"id": "q", "question": "2 + 2?", "options": [{"text": "3"}, {"text": "4", "correct": True}, {"text": "5"}]}


def _model(name: str) -> RiskModel:
    return RiskModel(
        name=name,
        version="1.0.0",
        description="a fitted model of tenant A",
        requires_peers=False,
        signals=[SignalWeight(name="novelty", weight=1.0, mean=0.0, sd=1.0)],
        reference=ReferenceDistribution(data="t", n=2, quantiles=[0.0, 1.0]),
    )


# ------------------------------------------------------------------------------------------------- limits


def test_rate_limit_per_key_and_tenant(sn12_index: NoveltyIndex, settings: Settings) -> None:
    limited = replace(settings, api=replace(settings.api, rate_per_key=3, rate_per_tenant=5))
    tenant = f"test-rl-{uuid.uuid4().hex[:8]}"
    one, two = issue_test_key(limited, tenant, ("read",)), issue_test_key(limited, tenant, ("read",))
    app = create_app(limited, resources=Resources(settings=limited, indexes={"pli": sn12_index}))
    with TestClient(app=app) as tc:
        first = tc.get("/v1/novelty/sn22.76:7", headers=bearer(one))
        assert first.status_code == 200
        assert first.headers["ratelimit-policy"] == '"key";q=3;w=60, "tenant";q=5;w=60'
        assert first.headers["ratelimit"].startswith('"key";r=2;t=')
        assert [tc.get("/v1/novelty/sn22.76:7", headers=bearer(one)).status_code for _ in range(3)] == [200, 200, 429]
        refused = tc.get("/v1/novelty/sn22.76:7", headers=bearer(one))
        assert refused.status_code == 429 and refused.headers["content-type"].startswith("application/problem+json")
        assert 1 <= int(refused.headers["retry-after"]) <= 60 and refused.json()["limit"] == "key"
        # the other key of the tenant has its own three, until the tenant's five are spent
        assert [tc.get("/v1/novelty/sn22.76:7", headers=bearer(two)).status_code for _ in range(3)] == [200, 200, 429]
        assert tc.get("/v1/novelty/sn22.76:7", headers=bearer(two)).json()["limit"] == "tenant"
        assert tc.get("/health/live").status_code == 200  # health is never limited


def _limit_failures(app_client: TestClient[Any], *, per_address: int, per_key: int) -> None:
    from service.platform.ratelimit import FailureLimiter

    resources = app_client.app.state.resources
    prefix = f"trisk:test:{uuid.uuid4().hex}:authfail:"
    resources.auth_failures = FailureLimiter(resources.redis, per_window=per_address, prefix=prefix)
    resources.key_failures = FailureLimiter(resources.redis, per_window=per_key, prefix=prefix + "key:")


def test_failed_authentications_per_address_are_limited_and_valid_keys_still_pass(
    app_client: TestClient[Any], settings: Settings
) -> None:
    """The finding: 1,200 of 1,200 bad keys got 401, none 429, each a database read. Past the address's ceiling its
    failures get 429 with Retry-After until the minute ends and cost no Redis round trip; issue 31: a valid key from
    the same address (a reviewer behind the fuzzer's NAT) still passes, where it got 429."""
    _limit_failures(app_client, per_address=5, per_key=0)
    valid = issue_test_key(settings, scopes=("read",))
    statuses = [
        app_client.get("/v1/novelty/sn22.76:7", headers=bearer(new_key("x", "guess", ["read"])[0])).status_code
        for _ in range(8)
    ]
    assert statuses == [401] * 5 + [429] * 3
    refused = app_client.get("/v1/novelty/sn22.76:7", headers=bearer(new_key("x", "guess", ["read"])[0]))
    assert refused.status_code == 429 and refused.headers["content-type"].startswith("application/problem+json")
    assert 1 <= int(refused.headers["retry-after"]) <= 60 and refused.json()["limit"] == "auth_failures"
    assert "TRISK_AUTH_FAILURES_PER_MINUTE" in refused.json()["detail"]
    assert app_client.get("/v1/novelty/sn22.76:7", headers=bearer(valid)).status_code == 200
    assert app_client.get("/health/live").status_code == 200  # no key, no limit


def test_failed_authentications_are_limited_per_presented_key_id(
    app_client: TestClient[Any], settings: Settings
) -> None:
    """Issue 31: a client presenting one key id with a wrong secret (a fuzzer's stale key) is refused after
    TRISK_AUTH_FAILURES_PER_KEY failures, with no further store read; other keys behind the same address go on, and so
    does the real key of that id (only failures are refused, so no one locks a key out by knowing its id)."""
    _limit_failures(app_client, per_address=100, per_key=3)
    victim = issue_test_key(settings, scopes=("read",))
    other = issue_test_key(settings, scopes=("read",))
    key_id = victim.split("_")[1]
    wrong = f"trisk_{key_id}_{'A' * 43}"
    reads: list[str] = []
    resources = app_client.app.state.resources
    resources.keys.store = _Counting(resources.keys.store, reads)
    statuses = [app_client.get("/v1/novelty/sn22.76:7", headers=bearer(wrong)).status_code for _ in range(6)]
    assert statuses == [401] * 3 + [429] * 3
    refused = app_client.get("/v1/novelty/sn22.76:7", headers=bearer(wrong))
    assert refused.json()["limit"] == "auth_failures_key" and "TRISK_AUTH_FAILURES_PER_KEY" in refused.json()["detail"]
    assert len(reads) <= 1  # the id's record is read once and then kept by the key cache
    assert app_client.get("/v1/novelty/sn22.76:7", headers=bearer(other)).status_code == 200
    assert app_client.get("/v1/novelty/sn22.76:7", headers=bearer(victim)).status_code == 200
    # another bad id from the same address has its own count (the address's ceiling, 100, is far away)
    fresh = new_key("x", "guess", ["read"])[0]
    assert app_client.get("/v1/novelty/sn22.76:7", headers=bearer(fresh)).status_code == 401


class _Counting:
    """A key store that records every lookup it is asked for."""

    def __init__(self, inner: Any, reads: list[str]) -> None:
        self.inner, self.reads = inner, reads

    def find_key(self, key_id: str) -> Any:
        self.reads.append(key_id)
        return self.inner.find_key(key_id)

    def touch_key(self, key_id: str, at: float) -> None:
        self.inner.touch_key(key_id, at)


class _OneKey:
    """A key store holding one key."""

    def __init__(self, key: Any) -> None:
        self.key = key

    def find_key(self, key_id: str) -> Any:
        return self.key if key_id == self.key.key_id else None

    def touch_key(self, key_id: str, at: float) -> None:
        pass


def test_random_key_ids_leave_the_key_cache_flat(settings: Settings) -> None:
    """The finding: every random well-formed key id added a cache entry that was never evicted (about 180 B each).
    Now unknown ids are remembered in a bounded LRU apart from the known keys: 10,000 random ids leave it flat."""
    import tracemalloc

    valid = issue_test_key(settings, scopes=("read",))
    known = parse_token(valid)
    assert known is not None
    real = AccessStore(open_store(settings.durable)).find_key(known[0])
    assert real is not None
    # the cache's memory is what is measured: a store that answers at once (the real one reads a table each time)
    store = _Counting(_OneKey(real), [])
    cache = KeyCache(store, max_items=1000)
    assert cache.find(known[0]) is not None
    ids = [uuid.uuid4().hex[:12] for _ in range(10_000)]
    for key_id in ids[:2000]:  # fills the unknown ids to their bound
        assert cache.find(key_id) is None
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for key_id in ids[2000:]:
        cache.find(key_id)
    grown = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    # 8,000 more ids: the tables stay at their bound (the dicts' slack comes and goes, about 0.1 MiB); unbounded, as
    # before, they were 1.4 MiB more
    assert len(cache) == 1001 and grown < 256 * 1024, (len(cache), grown)
    assert cache.find(known[0]) is not None  # the real key was never pushed out
    reads = store.reads
    reads.clear()
    assert cache.find(ids[-1]) is None and reads == []  # a repeated unknown id costs no database read
    assert len([cache.find(key_id) for key_id in ids[:10]]) == 10 and len(reads) == 10  # evicted ones are read again


def test_process_metrics_are_the_operators_not_any_tenants(app_client: TestClient[Any], settings: Settings) -> None:
    """The finding: /metrics showed process-wide figures (every tenant's traffic) to an admin of any tenant."""
    operator = issue_test_key(settings, scopes=("admin",))  # the test tenant is the operator (TRISK_OPERATOR_TENANTS)
    other = issue_test_key(settings, tenant=f"test-other-{uuid.uuid4().hex[:8]}", scopes=("admin",))
    ok = app_client.get("/metrics", headers=bearer(operator))
    assert ok.status_code == 200 and "trisk_http_requests_total" in ok.text
    refused = app_client.get("/metrics", headers=bearer(other))
    assert refused.status_code == 403 and "TRISK_OPERATOR_TENANTS" in refused.json()["detail"]
    assert "trisk_http_requests_total" not in refused.text


def test_keys_cli_create_list_revoke(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    tenant = f"test-cli-{uuid.uuid4().hex[:8]}"
    assert cli(["keys", "create", "--tenant", tenant, "--name", "ci", "--scopes", "submit,read"]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    key_id = token.split("_")[1]
    assert cli(["keys", "list", "--tenant", tenant]) == 0
    listing = capsys.readouterr().out
    assert key_id in listing and "active" in listing and token.split("_", 2)[2] not in listing  # never the secret
    assert cli(["keys", "revoke", key_id]) == 0
    assert cli(["keys", "list", "--tenant", tenant]) == 0
    assert "revoked" in capsys.readouterr().out
    stored = AccessStore(open_store(settings.durable)).find_key(key_id)
    assert stored is not None and stored.revoked_at is not None and stored.scopes == ["read", "submit"]


def test_a_tenant_keeps_a_way_in_a_key_cannot_revoke_itself_nor_the_last_admin_key(
    app_client: TestClient[Any], settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 31: an admin key revoked itself (200), leaving its tenant without an admin until the operator's CLI. Now
    409 with the reason for the calling key and for the tenant's last live admin key; the CLI still may."""
    tenant = f"test-keep-{uuid.uuid4().hex[:8]}"
    admin = issue_test_key(settings, tenant, ("admin",))
    admin_id = admin.split("_")[1]
    me = app_client.delete(f"/v1/keys/{admin_id}", headers=bearer(admin))
    assert me.status_code == 409 and me.headers["content-type"].startswith("application/problem+json")
    assert me.json()["reason"] == "self_revocation" and "cannot revoke itself" in me.json()["detail"]
    second = app_client.post("/v1/keys", json={"name": "b", "scopes": ["admin"]}, headers=bearer(admin)).json()["key"]
    second_id = second.split("_")[1]
    # the first admin is the tenant's other live admin: the second may revoke it ...
    reader = app_client.post("/v1/keys", json={"name": "r", "scopes": ["read"]}, headers=bearer(admin)).json()["key"]
    assert app_client.delete(f"/v1/keys/{admin_id}", headers=bearer(second)).status_code == 200
    # ... and the second is now the last admin key: none of the tenant's keys can revoke it through the API
    third = issue_test_key(settings, tenant, ("admin",))
    AccessStore(open_store(settings.durable)).revoke_key(third.split("_")[1])  # a revoked admin does not count
    assert app_client.delete(f"/v1/keys/{second_id}", headers=bearer(second)).status_code == 409
    assert app_client.delete(f"/v1/keys/{second_id}", headers=bearer(reader)).status_code == 403  # not an admin
    stored = AccessStore(open_store(settings.durable))
    last = stored.find_key(second_id)
    assert last is not None and last.revoked_at is None
    # the operator's CLI is the way out of the API's rule
    assert cli(["keys", "revoke", second_id]) == 0
    capsys.readouterr()
    last = stored.find_key(second_id)
    assert last is not None and last.revoked_at is not None


def test_the_last_admin_rule_is_the_stores_and_counts_only_live_admin_keys(settings: Settings) -> None:
    """The rule at the store, where the API asks it (``by``): an expired admin key does not keep the tenant's way in,
    and a non-admin key is revoked whatever the admins."""
    from service.platform.errors import Conflict

    tenant = f"test-keep-{uuid.uuid4().hex[:8]}"
    store = AccessStore(open_store(settings.durable))
    one = issue_test_key(settings, tenant, ("admin",)).split("_")[1]
    _, expired = new_key(tenant, "old", ["admin"], expires_at=time.time() + 0.5)
    store.add_key(expired)
    reader = issue_test_key(settings, tenant, ("read",)).split("_")[1]
    time.sleep(0.6)  # the key's life must run out (an expiry is a time that has to pass)
    with pytest.raises(Conflict, match="last admin key"):
        store.revoke_key(one, tenant=tenant, by=expired.key_id)
    assert store.revoke_key(reader, tenant=tenant, by=one).revoked_at is not None


def test_local_admin_key_file_is_kept_while_valid(settings: Settings, tmp_path: Any) -> None:
    path = tmp_path / "admin-key"
    assert cli(["keys", "local-admin", "--file", str(path)]) == 0
    first = path.read_text().strip()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert cli(["keys", "local-admin", "--file", str(path)]) == 0
    assert path.read_text().strip() == first  # valid: kept
    AccessStore(open_store(settings.durable)).revoke_key(first.split("_")[1])
    assert cli(["keys", "local-admin", "--file", str(path)]) == 0
    assert path.read_text().strip() != first  # revoked: replaced


def test_security_headers_and_cors(sn12_index: NoveltyIndex, settings: Settings, app_client: TestClient[Any]) -> None:
    r = app_client.get("/health/live", headers={"Origin": "https://evil.example"})
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "no-referrer" and r.headers["cache-control"] == "no-store"
    assert len(r.headers["x-request-id"]) == 32
    assert "access-control-allow-origin" not in r.headers  # CORS is off by default
    assert app_client.get("/health/live", headers={"X-Request-ID": "abc-123"}).headers["x-request-id"] == "abc-123"
    cors = replace(settings, api=replace(settings.api, cors_allow_origins="https://review.example"))
    app = create_app(cors, resources=Resources(settings=cors, indexes={"pli": sn12_index}))
    with TestClient(app=app) as tc:
        ok = tc.get("/health/live", headers={"Origin": "https://review.example"})
        assert ok.headers["access-control-allow-origin"] == "https://review.example"
        other = tc.get("/health/live", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
