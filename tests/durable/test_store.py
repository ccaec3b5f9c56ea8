"""The durable store on SQLite and PostgreSQL alike: append and read back, opinion numbering, adjudications, fits,
fitted models and activations, races, and the database's own refusal to change a stored row."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from service.companions.personas.store import PersonaStore
from service.companions.poller import Persona
from service.core.typology import ErrorSpan, FindingJudgement
from service.platform.auth import new_key
from service.platform.settings import DurableSettings
from service.review.adjudication_jobs import store_once
from service.state.durable import (
    Adjudication,
    DuplicateRecord,
    DurableStore,
    FitRecord,
    Label,
    StoreUnavailable,
    Verdict,
    make_engine,
)
from service.state.durable.access import AccessStore
from service.state.durable.schema import metadata
from service.state.durable.store import insert_verdict
from tests.durable_support import PostgresServer, migrated_store


@pytest.fixture
def tenant() -> str:
    return f"test-durable-{uuid.uuid4().hex[:10]}"


def add_verdict(store: DurableStore, tenant: str, item: str, label: Label = "VALID", **kw: Any) -> Verdict:
    args: dict[str, Any] = {
        "assessment_id": f"a-{item}",
        "candidate_id": "c",
        "reviewer": "alice",
        "error_category": None,
        "note": None,
        "lease_id": None,
        "snapshot": {"signals": {"s": 1.5}, "risk": {"score": 0.25}},
        **kw,
    }
    return store.add_verdict(tenant=tenant, item_id=item, label=label, **args)


def adjudication(tenant: str, adj_id: str, *, status: str = "done", label: Label | None = "MAJOR") -> Adjudication:
    return Adjudication(
        id=adj_id,
        tenant=tenant,
        created_at=time.time(),
        status=status,  # type: ignore[arg-type]
        label=label,
        reason=None,
        source="Evaṃ me sutaṃ.",
        candidate="Thus have I heard.",
        reference="So I have heard.",
        source_lang="pli",
        candidate_model="m1",
        item_id="item-1",
        panel="adj",
        panel_version="t1",
        prompt_version="v1",
        prompt_hash="h",
        judges=[{"id": "ja", "label": "MAJOR"}],
        votes={"MAJOR": 3},
        snapshot={"signals": {}},
    )


def run_at_once(n: int, work: Callable[[int], Any]) -> list[Any]:
    """Run work(0..n-1) in n threads released together; every result, or the first exception."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def go(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


# -- verdicts


def test_verdicts_read_back_as_written_numbered_per_item(durable_store: DurableStore, tenant: str) -> None:
    v1 = add_verdict(durable_store, tenant, "i1", "MAJOR", note="omits the agent", error_category="agency")
    v2 = add_verdict(durable_store, tenant, "i2", "VALID", lease_id="lease-1")
    v3 = add_verdict(durable_store, tenant, "i1", "MINOR", reviewer="bob")
    assert [v.opinion for v in (v1, v2, v3)] == [1, 1, 2]
    assert v1.id < v2.id < v3.id
    rows = durable_store.verdicts(tenant)
    assert rows == [v1, v2, v3]  # every field, the snapshot decoded and the timestamp to the bit
    assert rows[0].snapshot == {"signals": {"s": 1.5}, "risk": {"score": 0.25}}
    assert durable_store.verdicts(tenant, "i1") == [v1, v3]
    assert durable_store.verdicts(tenant, "nosuch") == []
    assert durable_store.verdicts(f"{tenant}-other") == []


def test_judgements_spans_and_timing_read_back_as_written(durable_store: DurableStore, tenant: str) -> None:
    said = (
        FindingJudgement("critical.list_size", "reject"),
        FindingJudgement("critical.name", "regrade", "minor"),
        FindingJudgement("critical.name#2", "accept"),
    )
    marked = (
        ErrorSpan("candidate", 4, 9, "major", "accuracy/omission", note="drops 'six'"),
        ErrorSpan("source", 0, 0, "minor", "style"),
    )
    judged = add_verdict(durable_store, tenant, "i1", "MINOR", findings=said, spans=marked)
    plain = add_verdict(durable_store, tenant, "i2", "VALID")
    with durable_store._insert() as con:  # the queue's insert, with the fields only it sets
        replaced = msgspec.structs.replace(
            plain, item_id="i3", supersedes=plain.id, lease_seconds=12.5, active_seconds=7.25
        )
        timed = insert_verdict(con, replaced)
    assert durable_store.verdicts(tenant) == [judged, plain, timed]
    back = durable_store.verdicts(tenant, "i1")[0]
    assert back.findings == said and back.spans == marked
    assert (plain.findings, plain.spans, plain.supersedes, plain.lease_seconds) == ((), (), None, None)
    assert durable_store.verdicts(tenant, "i3")[0].supersedes == plain.id
    assert durable_store.verdicts(tenant, "i3")[0].active_seconds == 7.25


def test_a_bad_label_is_refused_by_the_database(durable_store: DurableStore, tenant: str) -> None:
    with pytest.raises(sa.exc.IntegrityError):
        add_verdict(durable_store, tenant, "i1", "GREAT")  # type: ignore[arg-type]
    assert durable_store.verdicts(tenant) == []


def test_concurrent_verdicts_on_one_item_get_every_opinion_number_once(
    durable_store: DurableStore, tenant: str
) -> None:
    n = 12
    made = run_at_once(n, lambda i: add_verdict(durable_store, tenant, "hot", reviewer=f"r{i}"))
    assert sorted(v.opinion for v in made) == list(range(1, n + 1))
    # and the numbers given at write time are the ones every later read gives
    assert {v.id: v.opinion for v in made} == {v.id: v.opinion for v in durable_store.verdicts(tenant, "hot")}


# -- adjudications and fits


def test_adjudications_are_stored_once(durable_store: DurableStore, tenant: str) -> None:
    first = durable_store.add_adjudication(adjudication(tenant, "adj-1"))
    durable_store.add_adjudication(adjudication(tenant, "adj-2", status="skipped", label=None))
    assert durable_store.adjudication(tenant, "adj-1") == first
    assert durable_store.adjudication(f"{tenant}-other", "adj-1") is None
    assert [a.id for a in durable_store.adjudications(tenant)] == ["adj-1", "adj-2"]
    assert [a.id for a in durable_store.adjudications(tenant, "item-1")] == ["adj-1", "adj-2"]
    with pytest.raises(DuplicateRecord):
        durable_store.add_adjudication(adjudication(tenant, "adj-1", label="VALID"))
    # a second delivery of the adjudication job keeps the first record
    assert store_once(durable_store, adjudication(tenant, "adj-1", label="VALID")).label == "MAJOR"
    assert [a.label for a in durable_store.adjudications(tenant)] == ["MAJOR", None]


def test_fits_read_back(durable_store: DurableStore, tenant: str) -> None:
    rec = FitRecord("fit-1", tenant, "calibrated-x-v1", 1_700_000_000.125, {"rule": "r@1", "fit": {"auc": 0.81}})
    durable_store.add_fit(rec)
    assert durable_store.fits(tenant) == [rec]
    with pytest.raises(DuplicateRecord):
        durable_store.add_fit(rec)


# -- fitted models and activations


def _namer(tenant: str) -> Callable[[int], tuple[str, str, str]]:
    def name_for(n: int) -> tuple[str, str, str]:
        name = f"calibrated-{tenant}-v{n}"
        return name, f"{name}@1.0.0", msgspec.json.encode({"name": name}).decode()

    return name_for


def test_models_get_the_next_free_name_and_a_new_version(durable_store: DurableStore, tenant: str) -> None:
    assert durable_store.models(tenant) == [] and durable_store.models_version(tenant) == 0
    name, body = durable_store.add_model(tenant, _namer(tenant))
    assert name.endswith("-v1") and msgspec.json.decode(body) == {"name": name}
    before = durable_store.models_version(tenant)
    name2, _ = durable_store.add_model(tenant, _namer(tenant))
    assert name2.endswith("-v2") and durable_store.models_version(tenant) != before
    assert [n for n, _ in durable_store.models(tenant)] == [name, name2]
    assert durable_store.models(f"{tenant}-other") == []


def test_concurrent_fits_never_take_the_same_name(durable_store: DurableStore, tenant: str) -> None:
    n = 6
    names = [name for name, _ in run_at_once(n, lambda _: durable_store.add_model(tenant, _namer(tenant)))]
    assert sorted(names, key=lambda s: int(s.rsplit("v", 1)[1])) == [
        f"calibrated-{tenant}-v{k}" for k in range(1, n + 1)
    ]
    assert len(durable_store.models(tenant)) == n


def test_the_latest_activation_is_the_active_model(durable_store: DurableStore, tenant: str) -> None:
    assert durable_store.active(tenant) is None
    durable_store.activate(tenant, "m1", "m1@1")
    latest = durable_store.activate(tenant, "m2", "m2@1")
    assert durable_store.active(tenant) == latest
    assert durable_store.active(f"{tenant}-other") is None


def test_an_activation_records_who_whether_forced_why_and_the_comparison(
    durable_store: DurableStore, tenant: str
) -> None:
    plain = durable_store.activate(tenant, "m1", "m1@1")
    forced = durable_store.activate(
        tenant,
        "m2",
        "m2@1",
        activated_by="ana (k1)",
        forced=True,
        reason="truncations matter less here",
        body={"kind": "fit", "comparison": {"loses": True}},
    )
    assert durable_store.activations(tenant) == [plain, forced]
    assert (plain.forced, plain.reason, plain.body, plain.activated_by) == (False, None, {}, None)
    assert durable_store.active(tenant) == forced and forced.body["comparison"] == {"loses": True}


# -- append-only, enforced by the database


APPEND_ONLY = sorted(t.name for t in metadata.sorted_tables if t.info["append_only"])


def test_every_table_says_whether_it_is_append_only() -> None:
    for table in metadata.sorted_tables:
        assert isinstance(table.info.get("append_only"), bool), f"{table.name}: declare info={{'append_only': ...}}"
    assert APPEND_ONLY == [
        "adjudications",
        "api_key_revocations",
        "api_keys",
        "callback_secrets",
        "fits",
        "model_activations",
        "persona_versions",
        "risk_models",
        "schema_compat",
        "verdicts",
    ]
    # the mutable tables: a key's last-used time, the records of work (parts fill in; the purge deletes) and the
    # review queue (priorities refreshed, leases, verdict counts; its rows go with their assessment)
    assert sorted(t.name for t in metadata.sorted_tables if not t.info["append_only"]) == [
        "api_key_last_used",
        "assessments",
        "batches",
        "idempotency_keys",
        "judge_jobs",
        "review_items",
        "score_pool",
    ]


def _one_row_each(store: DurableStore, tenant: str) -> None:
    add_verdict(store, tenant, "i1")
    store.add_adjudication(adjudication(tenant, f"adj-{tenant}"))
    store.add_fit(FitRecord(f"fit-{tenant}", tenant, "m", 1.0, {}))
    store.add_model(tenant, _namer(tenant))
    store.activate(tenant, "m", "m@1")
    access = AccessStore(store)
    _, key = new_key(tenant, "k", ["read"])
    access.add_key(key)
    access.revoke_key(key.key_id)
    access.callback_secret(tenant)
    PersonaStore(store).create(tenant, Persona(author="Bei Dao", basic_information="Born in Beijing in 1949."))


# tables of the store's own bookkeeping, without a tenant: the row the migration wrote is the one to protect
UNTENANTED = {"schema_compat": "revision"}


@pytest.mark.parametrize("table", APPEND_ONLY)
@pytest.mark.parametrize("statement", ["UPDATE {t} SET {c} = 'stolen' {where}", "DELETE FROM {t}"])
def test_a_stored_row_cannot_be_changed(durable_store: DurableStore, tenant: str, table: str, statement: str) -> None:
    _one_row_each(durable_store, tenant)
    column = UNTENANTED.get(table, "tenant")
    where = "" if table in UNTENANTED else "WHERE tenant = :tenant"
    count = sa.text(f"SELECT COUNT(*) FROM {table} {where}")
    with durable_store.engine.connect() as con:
        before = con.execute(count, {"tenant": tenant}).scalar_one()
    assert before >= 1 if table in UNTENANTED else before == 1
    # straight SQL, past the store's methods: the database itself refuses
    with pytest.raises(DBAPIError, match="append-only"), durable_store.engine.begin() as con:
        con.execute(sa.text(statement.format(t=table, c=column, where=where)), {"tenant": tenant})
    with durable_store.engine.connect() as con:
        assert con.execute(count, {"tenant": tenant}).scalar_one() == before


@pytest.mark.parametrize("table", APPEND_ONLY)
def test_postgres_refuses_truncate(
    pg: PostgresServer, pg_session_database: DurableSettings, tenant: str, table: str
) -> None:
    # row triggers do not see TRUNCATE (SQLite has none; its DELETE without WHERE is refused above)
    with migrated_store(pg_session_database) as store:
        _one_row_each(store, tenant)
        with pytest.raises(DBAPIError, match="append-only"), store.engine.begin() as con:
            con.execute(sa.text(f"TRUNCATE {table}"))


def test_a_database_that_does_not_answer_is_a_503_without_its_password(tmp_path: Any) -> None:
    # nothing listens on port 1: the connection is refused at once
    url = sa.make_url("postgresql+psycopg://trisk:s3cret@127.0.0.1:1/trisk")
    store = DurableStore(make_engine(url))
    try:
        for call in (lambda: store.verdicts("t"), lambda: store.activate("t", "m", "m@1")):
            with pytest.raises(StoreUnavailable) as info:
                call()
            assert info.value.status_code == 503
            assert "postgresql at 127.0.0.1:1/trisk" in str(info.value) and "s3cret" not in str(info.value)
    finally:
        store.engine.dispose()


def test_a_full_sqlite_disk_is_a_503_and_nothing_half_written(tmp_path: Any, tenant: str) -> None:
    """SQLITE_FULL ("database or disk is full"), made here by capping the file at the pages it has: every writer
    answers StoreUnavailable (503 with Retry-After), and reads go on."""
    from tests.durable_support import migrated_store, sqlite_settings

    with migrated_store(sqlite_settings(tmp_path)) as store:
        add_verdict(store, tenant, "i0")
        with store.engine.connect() as con:
            pages = con.exec_driver_sql("PRAGMA page_count").scalar()

        @sa.event.listens_for(store.engine, "connect")
        def _cap(dbapi_con: Any, _: Any) -> None:
            dbapi_con.execute(f"PRAGMA max_page_count = {pages}")

        store.engine.dispose()  # new connections, each capped
        big = "x" * 200_000  # more than the free pages hold
        for call in (
            lambda: store.add_fit(FitRecord(f"fit-{tenant}", tenant, "m", 1.0, {"note": big})),
            lambda: PersonaStore(store).create(tenant, Persona(author="Bei Dao", basic_information=big)),
        ):
            with pytest.raises(StoreUnavailable) as info:
                call()
            assert info.value.status_code == 503 and info.value.retry_after, info.value
            assert "full" in str(info.value), info.value
        assert [v.item_id for v in store.verdicts(tenant)] == ["i0"]
