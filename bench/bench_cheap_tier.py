"""Cheap-tier throughput with the translation lexicon's coverage signals off and on, in one run on the same machine.

The worker's own cheap tier (``pipeline.cheap_tier``: peer embeddings, every signal family, the critical checks,
hard flags, the routing score) over PaliBench dev passages of ten candidates, in alternating rounds (off, on, off,
on, ...) so that the load of a shared machine falls on both alike. Prints candidates per second for each and the
ratio (target: on >= 90% of off), by the wall clock and by this process's CPU time (which the load of others on a
shared machine moves much less).

    nice .venv/bin/python bench/bench_cheap_tier.py [--passages 60] [--rounds 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from challenge_set import load_dev  # noqa: E402

from service.core.critical import CriticalChecker  # noqa: E402
from service.core.detector.model import Detector  # noqa: E402
from service.core.embeddings import Embedder, open_embedder  # noqa: E402
from service.core.novelty_report import NoveltySkipped  # noqa: E402
from service.core.pipeline import cheap_tier  # noqa: E402
from service.core.records import DEFAULT_CHECKS, CandidateIn  # noqa: E402
from service.core.risk import RiskRegistry  # noqa: E402
from service.core.signals import LengthModel, load_length_model  # noqa: E402
from service.platform.settings import get_settings  # noqa: E402

TARGET = 0.90
Passages = list[tuple[str, list[CandidateIn]]]


def timed_cheap_tier(
    passages: Passages,
    *,
    peer: Embedder,
    length: LengthModel | None,
    critical: CriticalChecker,
    registry: RiskRegistry,
    detector: Detector | None = None,
) -> tuple[float, float]:
    """The worker's cheap tier over ``passages`` (source, candidates): (wall-clock seconds, this process's CPU)."""
    novelty = NoveltySkipped(reason="not part of this bench")
    t0, c0 = time.perf_counter(), time.process_time()
    for source, cands in passages:
        cheap_tier(
            source_text=source,
            source_lang="pli",
            target_lang="en",
            candidates=cands,
            checks=DEFAULT_CHECKS,
            novelty=novelty,
            peer_embedder=peer,
            source_embedder=None,
            embedder_signature={},
            length_model=length,
            critical=critical,
            registry=registry,
            detector=detector,
        )
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each setting (alternating)")
    args = ap.parse_args()
    settings = get_settings()
    sources, models = load_dev()
    pids = sorted(sources)[:: max(1, len(sources) // args.passages)][: args.passages]
    passages = [
        (sources[p], [CandidateIn(id=m, text=models[m][p], model=m) for m in sorted(models) if models[m].get(p)])
        for p in pids
    ]
    n_cands = sum(len(c) for _, c in passages)
    peer = open_embedder(dataclasses.replace(settings.embedding, backend=settings.embedding.peer_backend))
    registry = RiskRegistry.load(settings.risk.models_dir)
    length = load_length_model("pli", "en", settings.risk.models_dir)
    checkers = {"lexicon off": CriticalChecker(translation=False), "lexicon on": CriticalChecker()}
    assert checkers["lexicon on"].translation is not None, "no translation lexicon: trisk build-lexicon"

    def run(checker: CriticalChecker) -> tuple[float, float]:
        return timed_cheap_tier(passages, peer=peer, length=length, critical=checker, registry=registry)

    run(checkers["lexicon on"])  # warm up: models loaded, caches of the tokenisers filled
    secs = {name: 0.0 for name in checkers}
    cpu = {name: 0.0 for name in checkers}
    load0 = os.getloadavg()
    for _ in range(args.rounds):
        for name, checker in checkers.items():
            wall, used = run(checker)
            secs[name] += wall
            cpu[name] += used
    load1 = os.getloadavg()
    rate = {name: args.rounds * n_cands / s for name, s in secs.items()}
    cpu_rate = {name: args.rounds * n_cands / s for name, s in cpu.items()}
    print(
        f"cheap tier, {len(passages)} passages ({n_cands} candidates) x {args.rounds} rounds each, alternating; "
        f"load average {load0[0]:.2f} -> {load1[0]:.2f} on {os.cpu_count()} cores"
    )
    for name, r in rate.items():
        print(
            f"  {name:12s} {r:6.1f} candidates/s ({1000 / r:.1f} ms per candidate; "
            f"{1000 / cpu_rate[name]:.1f} ms of CPU)"
        )
    ratio = rate["lexicon on"] / rate["lexicon off"]
    # the CPU time this process used: on a shared machine the wall clock also counts the others' load
    cpu_ratio = cpu_rate["lexicon on"] / cpu_rate["lexicon off"]
    print(f"  on / off: {ratio:.3f} wall clock, {cpu_ratio:.3f} CPU time (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
