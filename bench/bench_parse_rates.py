"""Parse rates of a real model server per judge prompt: GEMBA, error spans, Poller (en, zh), MATA grades (en, te), MCQ.

Each prompt is the service's own (built by the same functions the judges use), sent once at temperature 0 with the
local profile's call sizes (``scripts/local-llm.sh env``), and read by the service's own parser. Printed per prompt:
answers that parse, the parse errors by cause, median and max answer time, completion tokens. The judgements are
worth nothing at this model size; the point is which model gives answers the service can read within the caps.

Run from the repository root against a running server (``scripts/local-llm.sh start``, or any OpenAI-compatible
server on loopback):
    .venv/bin/python bench/bench_parse_rates.py [--base-url http://127.0.0.1:8089/v1 --model NAME] [--n 6]
        [--protocol trisk|paper] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from palibench_features import load_bench  # noqa: E402

from service.companions.mata import (  # noqa: E402  # noqa: E402
    McqItem,
    McqOption,
    build_grade_messages,
    build_mcq_messages,
    mcq_variants,
    parse_grade,
    read_mcq_answer,
)
from service.companions.poller import DIMENSIONS, Persona, build_poller_messages, parse_poller_answer  # noqa: E402
from service.core.judges.llm import (  # noqa: E402
    ChatMessage,
    Endpoint,
    LLMClient,
    RetryPolicy,
    build_gemba_messages,
    build_spans_messages,
    locate_quote,
    parse_score,
    parse_spans,
)
from tests.support.local_llm import profile_env  # noqa: E402

SCRIPT = REPO_ROOT / "scripts" / "local-llm.sh"

PERSONA_ZH = Persona(
    author="北岛",
    aliases=["Bei Dao"],
    basic_information="1949年生于北京，诗人，《今天》杂志的创办人之一。早年当过建筑工人，七十年代开始写诗。",
    experience_and_views="我不相信宏大的词语；诗应当拒绝人群的语言。诗人的任务是在沉默中说出真话。",
    critics_comments="评论家称他的早期诗歌是朦胧诗派的声音，冷峻、警句式，充满怀疑精神。",
)
PERSONA_EN = Persona(
    author="Matsuo Bashō",
    basic_information="A poet of the Edo period who travelled on foot across Japan and wrote travel diaries.",
    experience_and_views="A poem should catch the moment when the eternal shows itself in the everyday.",
    critics_comments="Critics praise the lightness (karumi) of his late style.",
)
POEMS_ZH = [
    ("回答", "卑鄙是卑鄙者的通行证，\n高尚是高尚者的墓志铭。\n看吧，在那镀金的天空中，\n飘满了死者弯曲的倒影。"),
    ("宣告", "也许最后的时刻到了\n我没有留下遗嘱\n只留下笔，给我的母亲\n我并不是英雄"),
]
POEMS_EN = [
    ("The old pond", "An old silent pond.\nA frog jumps into the pond.\nSplash! Silence again."),
    ("Autumn", "This road:\nno one goes down it\nautumn evening."),
]
INTERPRETATIONS = [
    "The poem sets a moment of stillness against a sudden sound, and the silence afterwards is deeper for it.",
    "The speaker refuses the heroic words of his time; he speaks plainly of loss and of what remains.",
    "It is a poem about loneliness: the path nobody walks is the poet's own way.",
]
GRADES_EN = [
    ("Which river flows through Rajahmundry?", "Godavari", "The Godavari river flows through Rajahmundry."),
    ("Who wrote the Telugu Mahabharata's first parts?", "Nannaya", "It was Tikkana."),
    ("What is the capital of Andhra Pradesh?", "Amaravati", "Amaravati is the capital."),
    ("How many days are in a leap year?", "366", "A leap year has 365 days."),
]
GRADES_TE = [
    ("రాజమండ్రి గుండా ఏ నది ప్రవహిస్తుంది?", "గోదావరి", "గోదావరి నది"),
    ("ఆంధ్ర మహాభారతం మొదటి భాగాలను ఎవరు రాశారు?", "నన్నయ", "తిక్కన"),
    ("ఒక వారంలో ఎన్ని రోజులు ఉంటాయి?", "ఏడు", "ఏడు రోజులు"),
    ("తెలుగు భాష ఏ భాషా కుటుంబానికి చెందినది?", "ద్రావిడ", "ఇండో-యూరోపియన్"),
]
MCQ_ITEMS = [
    McqItem(
        "q1",
        "Which river flows through Rajahmundry?",
        [McqOption("Krishna"), McqOption("Kaveri"), McqOption("Godavari", True), McqOption("Ganga")],
    ),
    McqItem(
        "q2",
        "How many days are in a leap year?",
        [McqOption("364"), McqOption("365"), McqOption("366", True), McqOption("367")],
    ),
]


class Prompt:
    def __init__(self, kind: str, messages: list[ChatMessage], max_tokens: int, parse: Callable[..., str | None]):
        self.kind, self.messages, self.max_tokens, self.parse = kind, messages, max_tokens, parse


def _gemba(n: int, cap: int) -> list[Prompt]:
    bench = load_bench()
    prompts = []
    for k in range(n):
        i, m = (k * 37) % len(bench.sources), k % len(bench.models)
        if len(bench.sources[i]) > 1200:  # keep within the profile's context; the long ones are timed elsewhere
            i = (i + 1) % len(bench.sources)
        messages = build_gemba_messages(bench.sources[i], bench.translations[m][i])
        prompts.append(Prompt("gemba", messages, cap, lambda t, f: parse_score(t, f)[1]))
    return prompts


def _spans(n: int, cap: int) -> list[Prompt]:
    """The error-span prompt on the GEMBA prompts' passages: an answer parses or fails by cause; of one that parses,
    how many quotes the candidate has is printed (the service locates them, never guesses)."""
    bench = load_bench()
    prompts = []
    for k in range(n):
        i, m = (k * 37) % len(bench.sources), k % len(bench.models)
        if len(bench.sources[i]) > 1200:
            i = (i + 1) % len(bench.sources)
        candidate = bench.translations[m][i]

        def parse(text: str | None, finish: str | None, _candidate: str = candidate) -> str | None:
            spans, error = parse_spans(text, finish)
            if spans:  # parsed: how many of its quotes the candidate has is printed beside it, not a parse error
                found = sum(1 for s in spans if locate_quote(_candidate, s.quote) is not None)
                print(f"    error spans: {found} of {len(spans)} quotes found in the candidate", flush=True)
            return error

        prompts.append(Prompt("spans", build_spans_messages(bench.sources[i], candidate), cap, parse))
    return prompts


def _poller(language: str, n: int, cap: int, protocol: str) -> list[Prompt]:
    poems = POEMS_ZH if language == "zh" else POEMS_EN
    persona = PERSONA_ZH if language == "zh" else PERSONA_EN
    prompts = []
    for k in range(n):
        title, poem = poems[k % len(poems)]
        kwargs: dict[str, Any] = {"protocol": protocol} if protocol != "trisk" else {}
        messages = build_poller_messages(
            strategy="P3",
            language=language,  # type: ignore[arg-type]
            poem=poem,
            title=title,
            interpretation=INTERPRETATIONS[k % len(INTERPRETATIONS)],
            dimensions=list(DIMENSIONS),
            persona=persona,
            **kwargs,
        )

        def parse(text: str | None, finish: str | None) -> str | None:
            p = parse_poller_answer(text, finish, dimensions=list(DIMENSIONS), persona=persona)
            if p.error:
                return p.error
            scored = len(p.scores)
            return None if scored == len(DIMENSIONS) else f"scored {scored} of 8"

        prompts.append(Prompt(f"poller-{language}", messages, cap, parse))
    return prompts


def _grades(language: str, n: int, cap: int, protocol: str) -> list[Prompt]:
    rows = GRADES_TE if language == "te" else GRADES_EN
    prompts = []
    for k in range(n):
        q, a, r = rows[k % len(rows)]
        kwargs: dict[str, Any] = {"protocol": protocol} if protocol != "trisk" else {}
        messages = build_grade_messages(language=language, question=q, answer=a, response=r, **kwargs)  # type: ignore[arg-type]

        def parse(text: str | None, finish: str | None, _lang: str = language) -> str | None:
            kw: dict[str, Any] = {"protocol": protocol} if protocol != "trisk" else {}
            return parse_grade(text, finish, language=_lang, **kw).error

        prompts.append(Prompt(f"mata-{language}", messages, cap, parse))
    return prompts


def _mcq(n: int, cap: int, protocol: str) -> list[Prompt]:
    variants = [v for item in MCQ_ITEMS for v in mcq_variants(item)]
    prompts = []
    for k in range(n):
        v = variants[(k * 5) % len(variants)]
        kwargs: dict[str, Any] = {"protocol": protocol} if protocol != "trisk" else {}
        messages = build_mcq_messages(
            language="en", question=v.question, options=[(o.label, o.text) for o in v.options], **kwargs
        )
        labels = [o.label for o in v.options]

        def parse(text: str | None, finish: str | None, _labels: list[str] = labels) -> str | None:
            kw: dict[str, Any] = {"protocol": protocol} if protocol != "trisk" else {}
            reading = read_mcq_answer(text, finish, labels=_labels, **kw)
            return getattr(reading, "error", None)

        prompts.append(Prompt("mcq-en", messages, cap, parse))
    return prompts


async def run(base_url: str, model: str, n: int, env: dict[str, str], protocol: str) -> dict[str, Any]:
    gemba_cap = int(env.get("TRISK_LLM_GEMBA_MAX_TOKENS", "16"))
    text_cap = int(env.get("TRISK_LLM_TEXT_MAX_TOKENS", "1024"))
    read = float(env.get("TRISK_LLM_READ_TIMEOUT", "60"))
    prompts = [
        *_gemba(n, gemba_cap),
        *_spans(n, text_cap),
        *_poller("en", n, text_cap, protocol),
        *_poller("zh", n, text_cap, protocol),
        *_grades("en", n, text_cap, protocol),
        *_grades("te", n, text_cap, protocol),
        *_mcq(n, text_cap, protocol),
    ]
    endpoint = Endpoint(base_url, "", model)
    timeout = httpx.Timeout(connect=5.0, read=read, write=30.0, pool=read)
    rows: dict[str, list[dict[str, Any]]] = {}
    # one at a time, as the local profile sends them (concurrency 1)
    async with LLMClient(retry=RetryPolicy(max_retries=0), requests_per_second=0, timeout=timeout) as client:
        for p in prompts:
            started = time.perf_counter()
            try:
                r = await client.chat(
                    endpoint,
                    p.messages,
                    temperature=0.0,
                    prompt_version="bench-parse",
                    max_tokens=p.max_tokens,
                    use_cache=False,
                )
                error = p.parse(r.text, r.finish_reason)
                row = {
                    "error": error,
                    "seconds": time.perf_counter() - started,
                    "prompt": r.usage.prompt_tokens,
                    "completion": r.usage.completion_tokens,
                    "raw": (r.text or "")[:300],
                }
            except Exception as exc:  # an upstream failure is a result too (a read timeout: the cap is too high)
                row = {
                    "error": f"upstream: {type(exc).__name__}",
                    "seconds": time.perf_counter() - started,
                    "prompt": 0,
                    "completion": 0,
                    "raw": None,
                }
            rows.setdefault(p.kind, []).append(row)
            print(
                f"  {p.kind:<10} {row['seconds']:6.1f} s  prompt {row['prompt']:>5}  completion "
                f"{row['completion']:>4}  {row['error'] or 'parsed'}",
                flush=True,
            )
    summary: dict[str, Any] = {}
    for kind, rs in rows.items():
        parsed = sum(1 for r in rs if r["error"] is None)
        times = [r["seconds"] for r in rs]
        summary[kind] = {
            "parsed": parsed,
            "asked": len(rs),
            "rate": round(parsed / len(rs), 3),
            "errors": dict(Counter(r["error"] for r in rs if r["error"] is not None)),
            "median_s": round(statistics.median(times), 1),
            "max_s": round(max(times), 1),
            "max_prompt_tokens": max(r["prompt"] for r in rs),
            "example": next((r["raw"] for r in rs if r["raw"]), None),
            "answers": [{"error": r["error"], "raw": r["raw"]} for r in rs],
        }
    return {"model": model, "protocol": protocol, "caps": {"gemba": gemba_cap, "text": text_cap}, "prompts": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default=None, help="default: the local server (scripts/local-llm.sh url)")
    parser.add_argument("--model", default=None, help="default: the local server's model name")
    parser.add_argument("--n", type=int, default=6, help="prompts of each kind")
    parser.add_argument("--protocol", default="trisk", choices=["trisk", "paper"])
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = parser.parse_args()
    base_url = args.base_url or subprocess.run([str(SCRIPT), "url"], capture_output=True, text=True).stdout.strip()
    env = profile_env(base_url)
    model = args.model or subprocess.run([str(SCRIPT), "model"], capture_output=True, text=True).stdout.strip()
    print(f"server {base_url} model {model}; caps from `scripts/local-llm.sh env`; {args.n} prompts per kind")
    summary = asyncio.run(run(base_url, model, args.n, env, args.protocol))
    print(f"\n{'prompt':<10} {'parsed':>8} {'median s':>9} {'max s':>7} {'prompt tok':>10}  errors")
    for kind, s in summary["prompts"].items():
        print(
            f"{kind:<10} {s['parsed']:>3}/{s['asked']:<4} {s['median_s']:>9} {s['max_s']:>7} "
            f"{s['max_prompt_tokens']:>10}  {s['errors'] or ''}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(summary, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
