"""LLM judge benchmarks. Default: against the scripted OpenAI-protocol server (tests/fakes), the client's overhead,
its concurrency cap and the cascade's savings. ``--local N``: answers first against the real local model server
(scripts/local-llm.sh, llama.cpp with SmolLM2-135M): N PaliBench dev passages through a real API and worker with the
LLM tier on, timing each assessment to its cheap-tier result (status partial) and to its final result.

Run from the repository root:
    .venv/bin/python bench/bench_llm.py [--candidates 1000]
    .venv/bin/python bench/bench_llm.py --local 6 [--deadline 120] [--budget 0.2]
(``--local`` needs the index, ``make index``, and the local server's build, ``scripts/local-llm.sh install``; the
small model's judge scores are worth nothing: only the times and statuses are the point.)
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.core.judges.llm import (
    CascadeItem,
    Judge,
    LLMClient,
    Panel,
    RetryPolicy,
    run_cascade,
    score_candidate,
    select_judges,
)
from service.platform.settings import LLMSettings
from tests.fakes.openai_server import FakeOpenAIServer

LOCAL_CHECKS = ["peer_distance", "length_ratio", "hard_flags", "critical", "gemba", "backtranslation"]

SOURCE = (
    "Evaṁ me sutaṁ—ekaṁ samayaṁ bhagavā sāvatthiyaṁ viharati jetavane anāthapiṇḍikassa ārāme. Tatra kho bhagavā "
    "bhikkhū āmantesi: “bhikkhavo”ti. “Bhadante”ti te bhikkhū bhagavato paccassosuṁ. Bhagavā etadavoca: "
    "“sabbadhammamūlapariyāyaṁ vo, bhikkhave, desessāmi. Taṁ suṇātha, sādhukaṁ manasi karotha, bhāsissāmī”ti."
)
CANDIDATE = (
    "So I have heard. At one time the Buddha was staying near Sāvatthī in Jeta's Grove, Anāthapiṇḍika's monastery. "
    "There the Buddha addressed the mendicants, “Mendicants!” “Venerable sir,” they replied. The Buddha said this: "
    "“Mendicants, I will teach you the explanation of the root of all things. Listen and apply your mind well.”"
)


def panel(prefix: str = "") -> Panel:
    judges = [
        Judge(id="j-openai", model=f"{prefix}openai/hash-score", family="openai"),
        Judge(id="j-google", model=f"{prefix}google/hash-score", family="google"),
        Judge(id="j-xai", model=f"{prefix}xai/hash-score", family="xai"),
    ]
    return Panel(name="bench", version="1", judges=judges, judges_per_candidate=3)


class RecordingTransport(httpx.AsyncBaseTransport):
    """Wraps the real transport and records when each HTTP exchange was in flight (the upstream's share)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.intervals: list[tuple[float, float]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        started = time.perf_counter()
        response = await self.inner.handle_async_request(request)
        await response.aread()  # the body is upstream time too
        self.intervals.append((started, time.perf_counter()))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


async def overhead(server: FakeOpenAIServer, n: int) -> None:
    settings = LLMSettings(base_url=server.base_url, api_key="bench")
    selection = select_judges(panel(), "meta-llama/llama-3.3-70b-instruct")
    transport = RecordingTransport()
    async with LLMClient(max_concurrency=8, requests_per_second=0, transport=transport) as client:
        for i in range(20):  # warm up connections and code paths
            await score_candidate(client, selection, settings, source=SOURCE, candidate=f"{CANDIDATE} w{i}")
        transport.intervals.clear()
        per_candidate: list[float] = []
        for i in range(n):
            mark = len(transport.intervals)
            started = time.perf_counter()
            await score_candidate(client, selection, settings, source=SOURCE, candidate=f"{CANDIDATE} #{i}")
            wall = time.perf_counter() - started
            per_candidate.append(wall - union_length(transport.intervals[mark:]))
    per_candidate.sort()
    mean_ms = 1000 * sum(per_candidate) / n
    p50, p95 = 1000 * per_candidate[n // 2], 1000 * per_candidate[int(n * 0.95)]
    print(f"service-side overhead per judged candidate (3 judges, upstream time excluded), n={n}:")
    print(f"  mean {mean_ms:.3f} ms   p50 {p50:.3f} ms   p95 {p95:.3f} ms   (target < 5 ms)")

    # the same with an in-process transport: no sockets at all, everything measured is ours
    body = (
        b'{"choices":[{"message":{"role":"assistant","content":"87"},"finish_reason":"stop"}],'
        b'"model":"m","usage":{"prompt_tokens":300,"completion_tokens":1}}'
    )
    mock = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    async with LLMClient(max_concurrency=8, requests_per_second=0, transport=mock) as client:
        started = time.perf_counter()
        for i in range(n):
            await score_candidate(client, selection, settings, source=SOURCE, candidate=f"{CANDIDATE} #{i}")
        in_process = 1000 * (time.perf_counter() - started) / n
    print(f"  in-process (httpx MockTransport, includes httpx request/response handling): {in_process:.3f} ms")


async def concurrency(server: FakeOpenAIServer, n: int, limit: int) -> None:
    server.reset()
    settings = LLMSettings(base_url=server.base_url, api_key="bench")
    bench_panel = panel("slow/")  # per-judge model names are distinct; behaviour comes from the last part
    slow = Panel(
        name="slow",
        version="1",
        judges=[
            Judge(id=j.id, model=j.model.replace("hash-score", "slow-0.02"), family=j.family)
            for j in bench_panel.judges
        ],
        judges_per_candidate=3,
    )
    selection = select_judges(slow, "meta-llama/llama-3.3-70b-instruct")
    async with LLMClient(max_concurrency=limit, requests_per_second=0) as client:
        started = time.perf_counter()
        results = await asyncio.gather(
            *(
                score_candidate(client, selection, settings, source=SOURCE, candidate=f"{CANDIDATE} {i}")
                for i in range(n)
            )
        )
        elapsed = time.perf_counter() - started
        stats = client.stats(server.base_url)
    valid = sum(r.stats.n_valid for r in results)
    ok = stats.max_in_flight <= limit and server.max_in_flight <= limit
    print(f"{n} concurrent judged candidates (3 judges each, 20 ms upstream), max_concurrency={limit}:")
    print(
        f"  {stats.requests} requests in {elapsed:.2f} s, {valid} valid scores; max in flight: client "
        f"{stats.max_in_flight}, server {server.max_in_flight} -> {'OK' if ok else 'EXCEEDED'}"
    )
    if not ok:
        raise SystemExit("concurrency limit exceeded")


async def cascade_calls(server: FakeOpenAIServer, n: int) -> None:
    settings = LLMSettings(base_url=server.base_url, api_key="bench")
    rng = random.Random(7)
    items = [
        CascadeItem(
            id=f"c{i}",
            source=SOURCE,
            candidate=f"{CANDIDATE} ({i})",
            model="meta-llama/llama-3.3-70b-instruct",
            routing_score=rng.gauss(0.0, 1.0),
        )
        for i in range(n)
    ]
    retry = RetryPolicy(max_retries=2, backoff_base=0.01)
    print(f"upstream calls per {n} candidates, 3-judge panel (measured; cache off):")
    for backtranslation in (False, True):
        label = "GEMBA + backtranslation" if backtranslation else "GEMBA only"
        row = []
        for budget in (1.0, 0.2):
            server.reset()
            async with LLMClient(max_concurrency=16, requests_per_second=0, retry=retry) as client:
                started = time.perf_counter()
                result = await run_cascade(
                    client,
                    items,
                    panel(),
                    settings,
                    budget_fraction=budget,
                    max_calls=10 * n,
                    backtranslation=backtranslation,
                )
                elapsed = time.perf_counter() - started
            assert result.cost.calls == len(server.requests)
            row.append((budget, result.cost.calls, result.cost.prompt_tokens, result.cost.completion_tokens, elapsed))
        (_, full, full_p, full_c, t_full), (_, casc, casc_p, casc_c, t_casc) = row
        print(
            f"  {label:<24} no cascade: {full:>5} calls ({full_p:>8} prompt / {full_c:>5} completion tokens, "
            f"{t_full:.1f} s)   cascade @20%: {casc:>5} calls ({casc_p:>8} / {casc_c:>5}, {t_casc:.1f} s)"
            f"   saving {1 - casc / full:.0%}"
        )


def answers_first(n: int, deadline: float, budget: float) -> None:
    """Time to the cheap result and to the final result of ``n`` assessments with the LLM tier on."""
    from service.platform.settings import SHARED_DIR
    from tests.support.evaluation import Stack, load_benchmark, request_item, wait_ready
    from tests.support.local_llm import local_llm, profile_env

    bench = load_benchmark(SHARED_DIR / "palibench-dev", SHARED_DIR / "corpus" / "bilara", limit=n)
    with local_llm() as server:
        # the stack runs with the local profile as README describes it (`scripts/local-llm.sh env`, the shipped
        # `local` panel), the deadline and budget of this run on top
        env = {
            **profile_env(server.base_url),
            "TRISK_LLM_DEADLINE_SECONDS": str(deadline),
            "TRISK_LLM_REVIEW_BUDGET": str(budget),
        }
        stack = Stack(None, 1, env)
        try:
            with httpx.Client(base_url=stack.url, timeout=60, headers={"Authorization": f"Bearer {stack.key}"}) as api:
                wait_ready(api)
                posted: dict[str, float] = {}
                for p in bench.passages:
                    body = request_item(p, LOCAL_CHECKS)
                    r = api.post("/v1/assessments", json=body)
                    r.raise_for_status()
                    posted[r.json()["id"]] = time.monotonic()
                cheap: dict[str, float] = {}
                final: dict[str, dict] = {}
                ended: dict[str, float] = {}
                while len(final) < len(posted):
                    for aid, t0 in posted.items():
                        if aid in final:
                            continue
                        a = api.get(f"/v1/assessments/{aid}").json()
                        if a["status"] in ("partial", "done") and aid not in cheap:
                            cheap[aid] = time.monotonic() - t0
                        if a["status"] in ("done", "failed"):
                            final[aid], ended[aid] = a, time.monotonic() - t0
                    time.sleep(0.2)
        finally:
            stack.close()
    _report_answers_first(server.model, deadline, budget, posted, cheap, ended, final)


def _report_answers_first(
    model: str,
    deadline: float,
    budget: float,
    posted: dict[str, float],
    cheap: dict[str, float],
    ended: dict[str, float],
    final: dict[str, dict],
) -> None:
    import collections
    import statistics

    def row(label: str, xs: list[float]) -> str:
        xs = sorted(xs)
        p95 = xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]
        return f"{label:<28}{statistics.median(xs):8.1f}{p95:8.1f}{xs[-1]:8.1f}"

    candidates = sum(len(a["candidates"]) for a in final.values())
    print(f"answers first against {model} (local llama.cpp), {len(posted)} assessments, {candidates} candidates,")
    print(f"LLM deadline {deadline:g} s, review budget {budget:g}, one worker; seconds from POST:")
    print(f"{'':<28}{'p50':>8}{'p95':>8}{'max':>8}")
    print(row("cheap-tier result (partial)", list(cheap.values())))
    print(row("final result (done)", list(ended.values())))
    tiers = collections.Counter(a["llm_tier"]["status"] for a in final.values())
    print("LLM tier:", dict(tiers))
    checks: collections.Counter[str] = collections.Counter()
    judges: collections.Counter[str] = collections.Counter()
    cost = collections.Counter()
    for a in final.values():
        for name, counts in a["llm_tier"]["checks"].items():
            for status, k in counts.items():
                checks[f"{name}:{status}"] += k
        for detail in ((a.get("llm") or {}).get("details") or {}).values():
            for j in (detail.get("gemba_result") or {}).get("judges", []):
                judges[j["status"]] += 1
        for c in ((a.get("llm") or {}).get("judges") or {}).values():
            cost.update({k: c[k] for k in ("calls", "completion_tokens", "timeouts", "seconds")})
    print("checks:", dict(checks))
    print("GEMBA judge answers:", dict(judges))
    print("judge cost:", {k: round(v, 1) for k, v in cost.items()})


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--overhead-n", type=int, default=300)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--max-concurrency", type=int, default=LLMSettings().max_concurrency)
    parser.add_argument("--local", type=int, default=0, help="answers first against the local model server")
    parser.add_argument("--deadline", type=float, default=LLMSettings().deadline_seconds)
    parser.add_argument("--budget", type=float, default=LLMSettings().review_budget)
    args = parser.parse_args()
    if args.local:
        await asyncio.to_thread(answers_first, args.local, args.deadline, args.budget)
        return
    with FakeOpenAIServer() as server:
        await overhead(server, args.overhead_n)
        await concurrency(server, args.concurrent, args.max_concurrency)
        await cascade_calls(server, args.candidates)


if __name__ == "__main__":
    asyncio.run(main())
