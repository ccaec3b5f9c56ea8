"""The real local model server (scripts/local-llm.sh): one chat through LLMClient, generation speed, GEMBA timings.

Figures for setting default ``max_tokens`` and deadlines against a small, slow CPU model; the judge scores it
returns are worth nothing and are printed only to show what the parser makes of them. Needs the cached build
(``scripts/local-llm.sh install``); reuses a server started with ``scripts/local-llm.sh start``.

Run from the repository root: ``.venv/bin/python bench/bench_local_llm.py [--passage mn12:52] [--unbounded 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from palibench_features import load_bench  # noqa: E402

from service.core.judges.llm import (  # noqa: E402
    ChatMessage,
    ChatResult,
    Endpoint,
    LLMClient,
    RetryPolicy,
    build_backtranslation_messages,
    build_gemba_messages,
    parse_score,
)
from tests.support.local_llm import local_llm  # noqa: E402

PROMPT_VERSION = "bench-local-llm"
# unbounded answers of this model run for minutes; the client's 60 s default read timeout would cut them off
LONG = httpx.Timeout(connect=5.0, read=900.0, write=30.0, pool=900.0)


def client() -> LLMClient:
    return LLMClient(retry=RetryPolicy(max_retries=0), requests_per_second=0, timeout=LONG)


def show(label: str, r: ChatResult, *, score: bool = False) -> None:
    text = (r.text or "").replace("\n", "\\n")
    text = text if len(text) <= 70 else f"{text[:67]}..."
    parsed = f"  parse_score -> {parse_score(r.text, r.finish_reason)}" if score else ""
    print(
        f"  {label:<34} {r.latency_ms / 1000:7.2f} s  prompt {r.usage.prompt_tokens:>5}  completion "
        f"{r.usage.completion_tokens:>5}  finish {r.finish_reason!s:<6} text {text!r}{parsed}"
    )


async def one_chat(c: LLMClient, ep: Endpoint) -> None:
    print("one chat completion through LLMClient.chat (max_tokens 8, temperature 0):")
    messages = [ChatMessage("user", "Say hello in one word.")]
    for i in range(2):  # the first one also warms the server up
        r = await c.chat(ep, messages, temperature=0.0, prompt_version=PROMPT_VERSION, max_tokens=8, use_cache=False)
        show(f"try {i + 1}", r)


async def generation_speed(base_url: str, model: str, n: int) -> None:
    """Streamed, so prompt evaluation (time to the first token) and generation (the rest) are measured apart."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Write a long story about a monk who walks from village to village."}],
        "temperature": 0.0,
        "max_tokens": n,
        "stream": True,
    }
    stamps: list[float] = []
    async with httpx.AsyncClient(timeout=LONG) as http:
        started = time.perf_counter()
        async with http.stream("POST", base_url + "/chat/completions", json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                delta = json.loads(line[6:])["choices"][0].get("delta", {})
                if delta.get("content"):
                    stamps.append(time.perf_counter())
    first, last = stamps[0] - started, stamps[-1] - started
    rate = (len(stamps) - 1) / (last - first) if len(stamps) > 1 else float("nan")
    print(f"generation speed (streamed, max_tokens {n}, short prompt):")
    print(f"  {len(stamps)} content chunks; first after {first:.2f} s; then {rate:.1f} tokens/s ({last:.2f} s total)")


async def prompt_sizes(base_url: str, model: str, sources: list[str], candidates: list[list[str]]) -> None:
    """Prompt tokens of every GEMBA and backtranslation prompt of the bench (tokenizer only, no generation)."""

    async def count(http: httpx.AsyncClient, messages: list[ChatMessage]) -> int:
        text = "\n".join(m.content for m in messages)
        res = await http.post(base_url.removesuffix("/v1") + "/extras/tokenize", json={"input": text, "model": model})
        res.raise_for_status()
        return len(res.json()["tokens"])

    async with httpx.AsyncClient(timeout=LONG) as http:
        gemba = [await count(http, build_gemba_messages(s, c[i])) for i, s in enumerate(sources) for c in candidates]
        back = [
            await count(http, build_backtranslation_messages(c[i])) for i in range(len(sources)) for c in candidates
        ]
        pali = [await count(http, [ChatMessage("user", s)]) for s in sources]
    chars = sum(len(s) for s in sources)
    print(f"prompt tokens, {len(sources)} passages x {len(candidates)} candidates (chat template not counted):")
    for name, values in (("GEMBA", gemba), ("backtranslation", back)):
        values = sorted(values)
        print(
            f"  {name:<16} median {statistics.median(values):>6.0f}  p95 {values[int(0.95 * len(values))]:>6}  "
            f"p99 {values[int(0.99 * len(values))]:>6}  max {values[-1]:>6}"
        )
    print(f"  Pali sources: {sum(pali) / chars:.3f} tokens per character ({chars / len(sources):.0f} characters mean)")


async def gemba(c: LLMClient, ep: Endpoint, source: str, candidates: list[str], unbounded: int) -> None:
    """Sequential calls, then three at once as a panel sends them; each prompt new to the server (llama.cpp reuses
    the previous prompt's shared prefix, i.e. the system prompt and the instructions, as it would in real use)."""
    print(f"GEMBA prompts (source {len(source)} characters, max_tokens 8 unless said otherwise):")
    sequential, concurrent = candidates[:3], candidates[3:6]
    for i, cand in enumerate(sequential):
        messages = build_gemba_messages(source, cand)
        r = await c.chat(ep, messages, temperature=0.0, prompt_version=PROMPT_VERSION, max_tokens=8)
        show(f"candidate {i}", r, score=True)
    if concurrent:
        started = time.perf_counter()
        results = await asyncio.gather(
            *(
                c.chat(
                    ep, build_gemba_messages(source, cand), temperature=0.0, prompt_version=PROMPT_VERSION, max_tokens=8
                )
                for cand in concurrent
            )
        )
        latencies = ", ".join(f"{r.latency_ms / 1000:.2f}" for r in results)
        wall = time.perf_counter() - started
        print(f"  {len(concurrent)} concurrent: all answered after {wall:.2f} s; each took {latencies} s")
    for i, cand in enumerate(sequential[:unbounded]):
        r = await c.chat(ep, build_gemba_messages(source, cand), temperature=0.0, prompt_version=PROMPT_VERSION)
        show(f"no max_tokens, candidate {i}", r, score=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passage", default="mn12:52", help="PaliBench passage id (default: 1,800 characters)")
    parser.add_argument("--unbounded", type=int, default=2, help="candidates also sent without max_tokens (0-3)")
    parser.add_argument("--stream-tokens", type=int, default=256)
    parser.add_argument("--no-sizes", action="store_true", help="skip counting the tokens of every bench prompt")
    args = parser.parse_args()
    bench = load_bench()
    i = bench.passage_ids.index(args.passage)
    source, candidates = bench.sources[i], [t[i] for t in bench.translations]
    started = time.perf_counter()
    with local_llm(build=False) as server:
        print(f"server {server.base_url} model {server.model} ready after {time.perf_counter() - started:.1f} s")
        ep = server.endpoint()
        async with client() as c:
            await one_chat(c, ep)
            await generation_speed(server.base_url, server.model, args.stream_tokens)
            await gemba(c, ep, source, candidates, args.unbounded)
        if not args.no_sizes:
            await prompt_sizes(server.base_url, server.model, bench.sources, bench.translations)


if __name__ == "__main__":
    asyncio.run(main())
