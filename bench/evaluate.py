"""Run a PaliBench-style folder through the real API and workers and print every signal's figures (was ``trisk
evaluate``: the evaluation stack is a test and bench tool, so it is not part of the shipped command).

    .venv/bin/python bench/evaluate.py --limit 20              # a private stack: redis-server, API, one worker
    .venv/bin/python bench/evaluate.py --url URL --key KEY     # a running API with workers
    .venv/bin/python bench/evaluate.py --from-json run.json    # re-print the figures of a saved run
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.platform.settings import get_settings  # noqa: E402
from tests.support.evaluation import load_benchmark, report, run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus_dir = Path(get_settings().index.corpus_dir)
    p.add_argument("--bench", default=str(corpus_dir.parents[1] / "palibench-dev"))
    p.add_argument("--bilara-root", default=str(corpus_dir / "root" / "pli" / "ms"))
    p.add_argument("--url", help="a running API with workers (default: start both here)")
    p.add_argument("--key", help="with --url: an API key of that service (submit and read scopes)")
    p.add_argument("--redis-url", default=None, help="Redis for the started stack (default: a private redis-server)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--limit", type=int, help="first N passages only")
    p.add_argument("--checks", help="comma-separated checks (default: the service default)")
    p.add_argument("--json", help="also write the raw results here")
    p.add_argument("--from-json", help="print the figures of results saved earlier with --json")
    args = p.parse_args(argv)
    if args.from_json:  # re-print the figures of a saved run without running it again
        bench = load_benchmark(args.bench, args.bilara_root)
        print(report(bench, json.loads(Path(args.from_json).read_text(encoding="utf-8"))))
        return 0
    checks = args.checks.split(",") if args.checks else None
    print(
        run(
            args.bench,
            args.bilara_root,
            args.url,
            args.redis_url,
            args.workers,
            args.limit,
            checks,
            args.json,
            args.key,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
