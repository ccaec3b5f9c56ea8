"""The review workbench's pages (``/ui``): sign-in, the queue, one item with its evidence and verdict, the
calibration picture and a batch's progress. Every page calls the service functions its JSON route calls; the
reviewer is the signed-in key, never a typed name."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

import msgspec
from litestar import Request, Response, Router, get, post
from litestar.datastructures import ResponseHeader
from litestar.enums import RequestEncodingType
from litestar.params import Body, Parameter
from litestar.response import Redirect, Template

from service.app.auth import authenticate_request, key_cache
from service.app.batches.services import batch_progress
from service.app.calibration import services as calibration
from service.app.review import services as review
from service.app.review.schemas import ClaimRequest, RenewRequest, VerdictRequest
from service.app.workbench.access import (
    COOKIE,
    SIGNIN_COOKIE,
    cookie,
    page_access,
    require_csrf,
    session_of,
    session_store,
)
from service.app.workbench.assets import FILES, IMMUTABLE
from service.app.workbench.errors import page_exception_handlers
from service.app.workbench.pages import filters_of, item_page
from service.app.workbench.render import CSP, page
from service.app.workbench.sessions import Session
from service.core.budget import DEFAULT_BUDGET
from service.core.typology import CATEGORIES, SPAN_SEVERITIES
from service.platform.auth import Principal
from service.platform.errors import Conflict, Forbidden, MalformedRequest, NotFound
from service.platform.settings import Settings
from service.review import MAX_OFFSET, ReviewQueue, get_review_settings
from service.state.durable import DurableStore, in_force
from service.state.risk_catalog import ModelCatalog
from service.state.store import Store

__all__ = ["CSP", "workbench_handlers"]

Status = Literal["pending", "open", "leased", "reviewed", "any"]
PAGE_SIZE = 50


class SignInForm(msgspec.Struct, forbid_unknown_fields=True):
    key: str = ""
    csrf: str = ""
    next: str = ""


class CsrfForm(msgspec.Struct, forbid_unknown_fields=True):
    csrf: str = ""


class ClaimForm(msgspec.Struct, forbid_unknown_fields=True):
    """Claim the next item with the queue's filters (the verdict form carries them too, to claim after it)."""

    csrf: str = ""
    tier: str = ""
    lang: str = ""
    model: str = ""
    batch: str = ""
    show: str = "flagged"  # "all": every candidate (never named `scope`: Litestar gives that name the ASGI scope)

    def kept(self) -> dict[str, str]:
        return filters_of({"tier": self.tier, "lang": self.lang, "model": self.model, "batch": self.batch,
                           "show": self.show})  # fmt: skip


class VerdictForm(ClaimForm, forbid_unknown_fields=True):
    label: str = ""
    error_category: str = ""
    note: str = ""
    lease_id: str = ""
    replaces: str = ""  # the id of her own verdict this one replaces
    active_seconds: str = ""  # how long the page was in front of her (its script counts)
    request_key: str = ""  # the page's own Idempotency-Key: the same form sent twice records one verdict
    then: str = "next"  # "next": claim the next item; "queue": back to the queue
    # the reviewer's word on each finding (a FindingJudgement) and each span she marked (an ErrorSpan), one JSON
    # object per field: a field sent once arrives as a string, sent again as a list
    judgement: str | list[str] = ""
    span: str | list[str] = ""


def _number(given: str, kind: type[int] | type[float], what: str) -> int | float | None:
    try:
        return kind(given) if given.strip() else None
    except ValueError as exc:
        raise MalformedRequest(f"{what} is not a number: {given[:40]!r}") from exc


def _objects(given: str | list[str], what: str) -> list[Any]:
    """The JSON objects of a repeated form field; their types are checked with the verdict's own (VerdictRequest)."""
    out = []
    for raw in [given] if isinstance(given, str) else given:
        if not raw:  # a finding left unjudged
            continue
        try:
            out.append(msgspec.json.decode(raw))
        except msgspec.DecodeError as exc:
            raise MalformedRequest(f"a {what} of the form is not JSON: {exc}") from exc
    return out


class LeaseForm(msgspec.Struct, forbid_unknown_fields=True):
    csrf: str = ""
    item_id: str = ""
    back: str = ""  # "leases": back to the reviewer's leases after a release


class SkipForm(ClaimForm, forbid_unknown_fields=True):
    """Leave an item: its lease (the reviewer's) is released; then the next item, or the queue."""

    lease_id: str = ""
    then: str = "next"


Form = Body(media_type=RequestEncodingType.URL_ENCODED)


def form_session(request: Request[Any, Any, Any], csrf: str) -> tuple[str, Session]:
    """The session a form was posted in, once the form's token matches it."""
    token, session = session_of(request)
    require_csrf(session, csrf)
    return token, session


def see_other(path: str) -> Redirect:
    """After a form (and for every page redirect): 303, so the browser follows with a GET."""
    return Redirect(path, status_code=303)


def _safe_next(path: str) -> str:
    """Only a page of the workbench itself: never another site, never a scheme-relative URL."""
    return path if path.startswith("/ui/") and not path.startswith("/ui//") and "\\" not in path else "/ui/"


def _principal(request: Request[Any, Any, Any]) -> Principal:
    user = request.scope.get("user")
    assert isinstance(user, Principal)  # the page's guard admitted it
    return user


def _filters(tier: str, lang: str, model: str, batch: str, show: str, status: str = "pending") -> review.QueueFilters:
    return review.QueueFilters(
        tier=tier or None,
        lang=lang or None,
        model=model or None,
        batch=batch or None,
        scope="all" if show == "all" else "flagged",
        status=status if status in ("pending", "open", "leased", "reviewed", "any") else "pending",  # type: ignore[arg-type]
    )


def _query(**kw: str) -> str:
    given = {k: v for k, v in kw.items() if v}
    return ("?" + urlencode(given)) if given else ""


@get("/", include_in_schema=False)
async def root() -> Redirect:
    return see_other("/ui/")


@get("/signin", include_in_schema=False, opt={"scope": None})
async def signin_page(request: Request[Any, Any, Any], settings: Settings, next: str = "") -> Template:
    token = secrets.token_urlsafe(24)
    form = page(request, "signin.html", signin_csrf=token, next=_safe_next(next) if next else "", error=None)
    form.cookies.append(cookie(request, SIGNIN_COOKIE, token, 600, "/ui/signin"))
    return form


@post("/signin", include_in_schema=False, status_code=303)
async def signin(
    request: Request[Any, Any, Any], settings: Settings, data: Annotated[SignInForm, Form]
) -> Response[Any]:
    expected = request.cookies.get(SIGNIN_COOKIE)
    if not expected or not data.csrf or expected != data.csrf:
        raise Forbidden("the sign-in form's token does not match (an old page, or another site's form); reload")
    principal = await authenticate_request(request, token=data.key.strip())
    key = await asyncio.to_thread(key_cache(request).find, principal.key_id)
    token, session = await session_store(request).create(
        principal.key_id,
        principal.tenant,
        settings.api.session_seconds,
        key_expires_at=key.expires_at if key is not None else None,
    )
    target = _safe_next(data.next) if data.next else "/ui/"
    response: Response[Any] = see_other(target)
    response.cookies.append(cookie(request, COOKIE, token, session.seconds_left(), "/ui"))
    response.cookies.append(cookie(request, SIGNIN_COOKIE, "", 0, "/ui/signin"))
    return response


@post("/signout", include_in_schema=False, status_code=303, **page_access("read"))
async def signout(
    request: Request[Any, Any, Any], settings: Settings, data: Annotated[CsrfForm, Form]
) -> Response[Any]:
    token, session = form_session(request, data.csrf)
    await session_store(request).delete(token, session)
    response: Response[Any] = see_other("/ui/signin?m=signed_out")
    response.cookies.append(cookie(request, COOKIE, "", 0, "/ui"))
    return response


@get("/", include_in_schema=False, **page_access("read"))
async def home(request: Request[Any, Any, Any]) -> Redirect:
    p = _principal(request)
    if p.allows("review"):
        return see_other("/ui/queue")
    return see_other("/ui/calibration" if p.allows("admin") else "/ui/batches")


@get("/queue", include_in_schema=False, **page_access("review"))
async def queue_page(
    request: Request[Any, Any, Any],
    review_queue: ReviewQueue,
    db: DurableStore,
    tenant: str,
    tier: str = "",
    lang: str = "",
    model: str = "",
    batch: str = "",
    show: str = "flagged",
    status: str = "pending",
    offset: int = Parameter(default=0, ge=0, le=MAX_OFFSET),
) -> Template:
    filters = _filters(tier, lang, model, batch, show, status)
    listed = await review.queue_page(review_queue, tenant, filters, offset=offset, limit=PAGE_SIZE)
    keep = filters_of({"tier": tier, "lang": lang, "model": model, "batch": batch, "show": show})
    return page(
        request,
        "queue.html",
        page=listed,
        day=await _day(review_queue, db, tenant, review.acting_reviewer(_principal(request)).name),
        filters=filters,
        keep=keep,
        status=filters.status,
        prev_query=_query(**keep, status=status, offset=str(max(0, offset - PAGE_SIZE)) if offset else ""),
        next_query=_query(**keep, status=status, offset=str(listed.next_offset or "")),
    )


@dataclass(frozen=True)
class Day:
    """A reviewer's day: verdicts given since midnight (UTC), items her leases hold, flagged items pending per tier."""

    done_today: int
    leased_to_me: int
    pending_by_tier: dict[str, str]  # tier -> count as the queue shows it ("1,000+" past the bound)


async def _day(queue: ReviewQueue, db: DurableStore, tenant: str, me: str) -> Day:
    midnight = time.time() // 86_400 * 86_400
    done = await asyncio.to_thread(db.verdicts_given, tenant, me, midnight)

    async def count(f: review.QueueFilters) -> str:
        listed = await review.queue_page(queue, tenant, f, offset=0, limit=1)
        return f"{listed.total:,}" + ("" if listed.total_exact else "+")

    mine = await review.queue_page(
        queue, tenant, review.QueueFilters(scope="all", status="leased", leased_to=me), offset=0, limit=1
    )
    tiers = ("top_1", "top_5", "top_10", "top_20")
    counts = await asyncio.gather(*(count(review.QueueFilters(tier=t)) for t in tiers))
    return Day(done, mine.total, dict(zip(tiers, counts, strict=True)))


@post("/claim", include_in_schema=False, status_code=303, **page_access("review"))
async def claim_next(
    request: Request[Any, Any, Any], review_queue: ReviewQueue, tenant: str, data: Annotated[ClaimForm, Form]
) -> Redirect:
    token, _ = form_session(request, data.csrf)
    return await _claim_and_go(request, review_queue, tenant, token, data)


async def _claim_and_go(
    request: Request[Any, Any, Any], review_queue: ReviewQueue, tenant: str, token: str, form: ClaimForm
) -> Redirect:
    """Lease the next item through the claim logic of ``POST /v1/review/claims`` and open it."""
    f = _filters(form.tier, form.lang, form.model, form.batch, form.show)
    lease = await review.claim(
        review_queue,
        tenant,
        review.acting_reviewer(_principal(request)),
        ClaimRequest(
            n=1,
            tier=f.tier,
            lang=f.lang,
            model=f.model,
            batch=f.batch,
            scope=f.scope,
        ),
    )
    keep = form.kept()
    if not lease.items:
        return see_other("/ui/queue" + _query(**keep, m="empty"))
    return see_other(f"/ui/items/{lease.items[0].id}" + _query(**keep))


@get("/items/{item_id:str}", include_in_schema=False, **page_access("review"))
async def item(
    request: Request[Any, Any, Any],
    item_id: str,
    review_queue: ReviewQueue,
    store: Store,
    db: DurableStore,
    tenant: str,
    tier: str = "",
    lang: str = "",
    model: str = "",
    batch: str = "",
    show: str = "",
) -> Template:
    detail = await review.item_detail(review_queue, store, db, tenant, item_id)
    me = review.acting_reviewer(_principal(request)).name
    # a lease is the reviewer's (her key's), whichever session took it
    holder = detail.item.leased_to
    mine = holder is not None and holder == me
    keep = filters_of({"tier": tier, "lang": lang, "model": model, "batch": batch, "show": show})
    rs = get_review_settings()
    counted = in_force(detail.verdicts)
    own = next((v for v in reversed(counted) if v.reviewer == me), None)
    return page(
        request,
        "item.html",
        view=item_page(detail),
        d=detail,
        own=own,
        # her own verdict may be replaced for a while (a slip); a second opinion is another reviewer's
        can_replace=own is not None and time.time() - own.created_at <= rs.replace_seconds,
        # blind: others' labels and notes only once she has given her own
        blind=rs.blind_second_opinions and own is None,
        others=[v for v in counted if v.reviewer != me],
        mine=mine,
        lease_expires=detail.item.lease_expires if mine else None,
        leased_by_other=holder is not None and not mine,
        keep=keep,
        keep_query=_query(**keep),
        labels=("VALID", "MINOR", "MAJOR"),
        severities=SPAN_SEVERITIES,
        categories=CATEGORIES,
        request_key=secrets.token_urlsafe(18),
    )


@post("/items/{item_id:str}/verdict", include_in_schema=False, status_code=303, **page_access("review"))
async def verdict(
    request: Request[Any, Any, Any],
    item_id: str,
    review_queue: ReviewQueue,
    store: Store,
    tenant: str,
    data: Annotated[VerdictForm, Form],
) -> Redirect:
    token, _ = form_session(request, data.csrf)
    lease_id = data.lease_id or None  # the verdict's rules check that it holds the item and is this reviewer's
    try:  # the JSON route's own limits (lengths), through its own request type
        given = msgspec.convert(
            {
                "label": data.label,
                "note": data.note.strip() or None,
                "error_category": data.error_category.strip() or None,
                "lease_id": lease_id,
                "findings": _objects(data.judgement, "judgement"),
                "spans": _objects(data.span, "span"),
                "replaces": _number(data.replaces, int, "replaces"),
                "active_seconds": _number(data.active_seconds, float, "active_seconds"),
            },
            VerdictRequest,
        )
    except msgspec.ValidationError as exc:
        raise MalformedRequest(str(exc)) from exc
    who = review.acting_reviewer(_principal(request))
    await review.record_verdict(review_queue, store, tenant, who, item_id, given, data.request_key[:200] or None)
    if lease_id is not None:
        # the item is reviewed: the lease (one item) is done; an already ended lease is no matter
        with contextlib.suppress(NotFound, Conflict):  # the lease ended meanwhile
            await review.release(review_queue, tenant, who, lease_id)
    if data.then == "next":
        return await _claim_and_go(request, review_queue, tenant, token, data)
    return see_other("/ui/queue" + _query(**data.kept(), m="recorded"))


@post("/leases/{lease_id:str}/renew", include_in_schema=False, status_code=303, **page_access("review"))
async def renew(
    request: Request[Any, Any, Any],
    lease_id: str,
    review_queue: ReviewQueue,
    tenant: str,
    data: Annotated[LeaseForm, Form],
) -> Redirect:
    form_session(request, data.csrf)
    who = review.acting_reviewer(_principal(request))
    await review.renew(review_queue, tenant, who, lease_id, RenewRequest())
    target = f"/ui/items/{data.item_id}" if data.item_id else "/ui/queue"
    return see_other(target + "?m=renewed")


@post("/leases/{lease_id:str}/release", include_in_schema=False, status_code=303, **page_access("review"))
async def release(
    request: Request[Any, Any, Any],
    lease_id: str,
    review_queue: ReviewQueue,
    tenant: str,
    data: Annotated[LeaseForm, Form],
) -> Redirect:
    form_session(request, data.csrf)
    await review.release(review_queue, tenant, review.acting_reviewer(_principal(request)), lease_id)
    return see_other("/ui/leases?m=released" if data.back == "leases" else "/ui/queue?m=released")


@post("/items/{item_id:str}/skip", include_in_schema=False, status_code=303, **page_access("review"))
async def skip(
    request: Request[Any, Any, Any],
    item_id: str,
    review_queue: ReviewQueue,
    tenant: str,
    data: Annotated[SkipForm, Form],
) -> Redirect:
    """Leave an item without a verdict (``n`` on it, or back to the queue): the next item is claimed first, while
    this one is still held (so the claim does not hand it straight back), then its lease is released."""
    token, _ = form_session(request, data.csrf)
    go = await _claim_and_go(request, review_queue, tenant, token, data) if data.then == "next" else None
    if data.lease_id:
        with contextlib.suppress(NotFound, Conflict):  # ended meanwhile, or reviewed: nothing left to release
            await review.release(review_queue, tenant, review.acting_reviewer(_principal(request)), data.lease_id)
    return go or see_other("/ui/queue" + _query(**data.kept(), m="released"))


@get("/leases", include_in_schema=False, **page_access("review"))
async def leases_page(request: Request[Any, Any, Any], review_queue: ReviewQueue, tenant: str) -> Template:
    """The items the reviewer's live leases hold, whichever session (or API client) took them."""
    me = review.acting_reviewer(_principal(request)).name
    held = await review.queue_page(
        review_queue,
        tenant,
        review.QueueFilters(scope="all", status="leased", leased_to=me),
        offset=0,
        limit=PAGE_SIZE,
    )
    return page(request, "leases.html", page=held)


@get("/calibration", include_in_schema=False, **page_access("admin"))
async def calibration_page(
    request: Request[Any, Any, Any],
    catalog: ModelCatalog,
    tenant: str,
    source: Literal["human", "panel"] = "human",
    model: str = "",
) -> Template:
    name = model or None
    report, chart, models, history = await asyncio.gather(
        calibration.report(catalog, tenant, source, name, None, DEFAULT_BUDGET),
        calibration.svg(catalog, tenant, source, name, None),
        calibration.list_models(catalog, tenant),
        calibration.activations(catalog, tenant),
    )
    return page(
        request,
        "calibration.html",
        report=report,
        chart=chart,
        models=models,
        history=list(reversed(history)),
        source=source,
        model=model,
        judge_rule=get_review_settings().judge_error_max_score,
    )


@get("/batches", include_in_schema=False, **page_access("read"))
async def batches_page(request: Request[Any, Any, Any], id: str = "") -> Template | Redirect:
    if id.strip():
        return see_other(f"/ui/batches/{id.strip()}")
    return page(request, "batches.html")


@get("/batches/{batch_id:str}", include_in_schema=False, **page_access("read"))
async def batch_page(
    request: Request[Any, Any, Any],
    batch_id: str,
    store: Store,
    review_queue: ReviewQueue,
    tenant: str,
    offset: int = Parameter(default=0, ge=0, le=MAX_OFFSET),
) -> Template:
    progress = await batch_progress(store, tenant, batch_id)
    items = await review.queue_page(
        review_queue,
        tenant,
        review.QueueFilters(batch=batch_id, scope="all", status="any"),
        offset=offset,
        limit=PAGE_SIZE,
    )
    return page(
        request,
        "batch.html",
        progress=progress,
        items=items,
        can_review=_principal(request).allows("review"),
        prev_query=_query(offset=str(max(0, offset - PAGE_SIZE)) if offset else ""),
        next_query=_query(offset=str(items.next_offset or "")),
    )


@get("/batches/{batch_id:str}/progress", include_in_schema=False, **page_access("read"))
async def batch_progress_fragment(
    request: Request[Any, Any, Any], batch_id: str, store: Store, tenant: str
) -> Template:
    return page(request, "batch_progress.html", progress=await batch_progress(store, tenant, batch_id))


@get("/ui/static/{file:str}", include_in_schema=False, name="workbench-static")
async def static_file(request: Request[Any, Any, Any], file: str) -> Response[bytes]:
    """A static file by its hashed name (``assets.FILES``): cached for good, gzipped when the browser takes it."""
    asset = FILES.get(file)
    if asset is None:
        raise NotFound(f"no static file {file!r}")
    headers = {"cache-control": IMMUTABLE, "vary": "accept-encoding"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["content-encoding"] = "gzip"
        return Response(asset.gzipped, media_type=asset.media_type, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


def workbench_handlers() -> list[Any]:
    """The root's redirect, the ``/ui`` router of pages and their static files, for the app's route handlers."""
    pages = Router(
        path="/ui",
        route_handlers=[
            signin_page,
            signin,
            signout,
            home,
            queue_page,
            claim_next,
            item,
            verdict,
            skip,
            renew,
            release,
            leases_page,
            calibration_page,
            batches_page,
            batch_page,
            batch_progress_fragment,
        ],
        exception_handlers=page_exception_handlers(),
        response_headers=[ResponseHeader(name="content-security-policy", value=CSP)],
        include_in_schema=False,
    )
    return [root, pages, static_file]
