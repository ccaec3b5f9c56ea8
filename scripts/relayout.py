#!/usr/bin/env python3
"""The folder layout of issue 23 item 5, as a rerunnable move: ``git mv`` per the table below, then every reference.

    python3 scripts/relayout.py            # move and rewrite (run from anywhere inside the checkout)
    python3 scripts/relayout.py --check    # say what would change; exit 1 if anything would

Layers, from the top down (an import only ever points down the list):
    service/app/        the web layer (Litestar)            workers/   the ARQ jobs        service/cli.py
    service/review/     human review and calibration: the review queue, panel adjudications, fits
    service/state/      what is kept: the durable store, the records store over it, job lanes, the worker registry,
                        companion judge jobs, the risk catalog
    service/companions/ the companion judges (Poller, MATA) with their routes, personas and jobs (since issue 35)
    service/core/       the scoring core; its LLM judges (the client, GEMBA/backtranslation) in core/judges/
    service/platform/   settings, errors, telemetry, redaction, API keys, rate limits, callbacks, outbound HTTP, ...
    tests/support/      the evaluation stack and the private redis-server (test and bench tools, not shipped)

Whole packages move as one ``git mv``, so a module someone adds to one of them meanwhile moves with it. A reference
is a dotted module path (imports, ``from service.core import x``, patch targets, ``-m`` arguments, package data) or a
file path (comments, docs, manifests) in any tracked text file outside ``models/`` and vendored files. Public names
are unchanged and no shim is left behind: ARQ stores job names and string arguments, never module paths, and no
stored record names a class. A reference the table cannot place (``service.core.x`` where x is neither moved nor
listed as staying) stops the run before anything is written, as does a moved file that finds its way with
``__file__`` and would change depth. Running it again after a success changes nothing.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

# old path -> new path (a file or a whole package); applied in this order
MOVES: list[tuple[str, str]] = [
    # the platform pieces every layer stands on
    ("service/core/settings.py", "service/platform/settings.py"),
    ("service/core/errors.py", "service/platform/errors.py"),
    ("service/core/telemetry.py", "service/platform/telemetry.py"),
    ("service/core/redact.py", "service/platform/redact.py"),
    ("service/core/auth.py", "service/platform/auth.py"),
    ("service/core/ratelimit.py", "service/platform/ratelimit.py"),
    ("service/core/redis_client.py", "service/platform/redis_client.py"),
    ("service/core/callbacks.py", "service/platform/callbacks.py"),
    ("service/core/bounded_http.py", "service/platform/bounded_http.py"),
    ("service/core/retry.py", "service/platform/retry.py"),
    ("service/core/cpu.py", "service/platform/cpu.py"),
    ("service/core/sealing.py", "service/platform/sealing.py"),
    # the state: the durable store and what the API and workers keep through it and in Redis
    ("service/core/durable", "service/state/durable"),
    ("service/core/store.py", "service/state/store.py"),
    ("service/core/views.py", "service/state/views.py"),
    ("service/core/lanes.py", "service/state/lanes.py"),
    ("service/core/worker_registry.py", "service/state/worker_registry.py"),
    ("service/core/judge_jobs.py", "service/companions/judge_jobs.py"),  # on since issue 35
    ("service/core/risk_catalog.py", "service/state/risk_catalog.py"),
    # human review and calibration (above the state: they read verdicts and labels from it)
    ("service/core/review", "service/review"),
    ("service/core/calibration", "service/review/calibration"),
    # the judges of the scoring core: the cascade's results are part of an assessment's records
    ("service/core/llm", "service/core/judges/llm"),
    # the companion judges, a wing of their own since issue 35 (scripts/relayout_companions.py moves the rest)
    ("service/core/mata", "service/companions/mata"),
    ("service/core/poller", "service/companions/poller"),
    # test and bench tools out of the shipped package
    ("service/evaluation.py", "tests/support/evaluation.py"),
    ("service/local_redis.py", "tests/support/local_redis.py"),
]

# packages the moves create, with their one-line docstrings
NEW_PACKAGES: dict[str, str] = {
    "service/platform": "The platform pieces every layer stands on: settings, errors, telemetry, redaction, API keys, "
    "rate limits,\nRedis errors, callbacks' address policy, bounded outbound HTTP, retries, CPUs, sealed secrets.",
    "service/state": "What trisk keeps: the durable store, the records store over it, the job lanes and worker "
    "registry in Redis,\ncompanion judge jobs, the risk catalog.",
    "service/core/judges": "The LLM judges of the scoring core: the shared client and the cascade's GEMBA and "
    "backtranslation checks (llm).",
    "service/companions": "The companion judges, a wing beside the translation-risk core: Poller (a judge in a poet's "
    "persona scores\nreaders' interpretations; personas) and MATA (grades, multiple-choice runs), each with its "
    "routes, over the core's LLM\nclient.",
}

# what stays in the scoring core (service/core/): a module found there that is neither here nor moved stops the run
STAYS_IN_CORE = {
    "artifacts", "budget", "chrf", "corpus", "metrics", "ngrams", "novelty", "novelty_report", "palibench",
    "pipeline", "ranking", "records", "risk", "text", "types", "typology",
    "critical", "embeddings", "signals", "judges", "detector", "findings",
}  # fmt: skip
# what stays directly under service/ (the packages the moves fill included)
STAYS_IN_SERVICE = {"app", "cli", "core", "platform", "state", "review", "companions"}

SELF = "scripts/relayout.py"
# tracked files whose text is not ours to rewrite (data, vendored code)
SKIP = re.compile(r"^(models/|service/app/docs_static/|service/app/workbench/static/|openapi/)")
TEXT_SUFFIXES = {
    ".py", ".pyi", ".md", ".toml", ".cfg", ".ini", ".txt", ".sh", ".yaml", ".yml", ".json", ".mako", ".sql",
    ".html", ".env", ".example", ".conf", "",
}  # fmt: skip


class Unclassified(SystemExit):
    pass


def sh(*cmd: str, cwd: Path) -> str:
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout


def dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def module_map() -> dict[str, str]:
    return {dotted(old): dotted(new) for old, new in MOVES}


def path_map() -> dict[str, str]:
    return {old.removesuffix(".py"): new.removesuffix(".py") for old, new in MOVES}


# ---------------------------------------------------------------------------------------------------- moving files
def check_depth(root: Path, old: str, new: str) -> None:
    """A moved file that finds its way from ``__file__`` (``parents[2]``, ``.parent.parent``) must keep its depth."""
    if old.count("/") == new.count("/"):
        return
    src = root / old
    files = [src] if src.is_file() else sorted(src.rglob("*.py"))
    for f in files:
        text = f.read_text(encoding="utf-8")
        for n, line in enumerate(text.splitlines(), 1):
            if "__file__" in line and re.search(r"parents\[\d\]|\.parent\.parent", line):
                raise Unclassified(
                    f"{f.relative_to(root)}:{n}: finds a path from __file__ and moves {old} -> {new} (depth changes): "
                    "fix it by hand, then rerun"
                )


def move(root: Path, dry: bool) -> list[str]:
    done: list[str] = []
    for old, new in MOVES:
        src, dst = root / old, root / new
        src_there = src.exists() and (src.is_file() or any(p.name != "__pycache__" for p in src.iterdir()))
        if dst.is_dir() and all(p.name == "__pycache__" for p in dst.iterdir()):
            shutil.rmtree(dst)  # bytecode left by an earlier run that was undone (git reset): not a package
        if not src_there and dst.exists():
            continue  # moved before
        if not src_there:
            raise Unclassified(f"{old}: neither it nor {new} exists: update the table in {SELF}")
        if dst.exists():
            raise Unclassified(f"{old} and {new} both exist: merge them by hand, then rerun")
        untracked = sh("git", "ls-files", "--others", "--exclude-standard", "--", old, cwd=root).split()
        if untracked:
            raise Unclassified(f"{old}: untracked files would stay behind: {untracked} (commit or remove them)")
        check_depth(root, old, new)
        done.append(f"git mv {old} {new}")
        if dry:
            continue
        for pkg, doc in NEW_PACKAGES.items():
            if new.startswith(pkg + "/") and not (root / pkg / "__init__.py").exists():
                (root / pkg).mkdir(parents=True, exist_ok=True)
                (root / pkg / "__init__.py").write_text(f'"""{doc}"""\n', encoding="utf-8")
                sh("git", "add", f"{pkg}/__init__.py", cwd=root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        sh("git", "mv", old, new, cwd=root)
        if src.is_dir():  # bytecode of the old place (untracked) would shadow nothing, but leaves a ghost package
            shutil.rmtree(src, ignore_errors=True)
        else:
            for pyc in (src.parent / "__pycache__").glob(f"{src.stem}.*.pyc"):
                pyc.unlink()
    return done


# ---------------------------------------------------------------------------------------------- rewriting references
def _alternation(names: list[str]) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


def compile_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    mods, paths = module_map(), path_map()
    dot = re.compile(rf"(?<![\w.])({_alternation(list(mods))})(?![\w])")
    slash = re.compile(rf"(?<![\w.])({_alternation(list(paths))})(?![\w])")
    return dot, slash


# ``from service import x`` / ``from service.core import x, y`` (one line, or parenthesised over several)
FROM_PACKAGE = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<pkg>service|service\.core) import (?P<names>\([^)]*\)|[^\n]*)$", re.M
)


def _rewrite_from_package(text: str, where: str) -> str:
    mods = module_map()

    def one(m: re.Match[str]) -> str:
        indent, pkg, names = m["indent"], m["pkg"], m["names"]
        comment = ""
        if not names.startswith("(") and "#" in names:
            names, comment = names.split("#", 1)
            comment = "  #" + comment
        body = names.strip().strip("()")
        if "#" in body:
            raise Unclassified(f"{where}: a comment inside `from {pkg} import (...)`: split it by hand, then rerun")
        groups: dict[str, list[str]] = {}
        for item in (x.strip() for x in body.replace("\n", " ").split(",")):
            if not item:
                continue
            name = item.split(" as ")[0].strip()
            full = f"{pkg}.{name}"
            # not moved: a staying module (every module there is moved or staying: unplaced_modules) or an attribute
            target = mods[full].rpartition(".")[0] if full in mods else pkg
            groups.setdefault(target, []).append(item)
        if list(groups) == [pkg]:
            return m[0]
        return "\n".join(f"{indent}from {t} import {', '.join(items)}{comment}" for t, items in groups.items())

    return FROM_PACKAGE.sub(one, text)


def rewrite_text(text: str, where: str, is_python: bool) -> str:
    dot, slash = compile_patterns()
    mods, paths = module_map(), path_map()
    if is_python:
        text = _rewrite_from_package(text, where)
    text = dot.sub(lambda m: mods[m[1]], text)
    return slash.sub(lambda m: paths[m[1]], text)


LEFTOVER = re.compile(r"(?<![\w.])service[./]core[./]([A-Za-z_]\w*)")


def leftovers(text: str, where: str) -> list[str]:
    """References the table cannot place: ``service.core.x`` with x neither moved nor staying."""
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in LEFTOVER.finditer(line):
            if m[1] not in STAYS_IN_CORE:
                bad.append(f"{where}:{n}: {m[0]}")
    return bad


def unplaced_modules(root: Path) -> list[str]:
    """What stands in service/ or service/core/ now and is neither moved nor listed as staying: the table must say."""
    names = []
    for folder, stays in (("service", STAYS_IN_SERVICE), ("service/core", STAYS_IN_CORE)):
        moved = {Path(old).name.removesuffix(".py") for old, _ in MOVES if str(Path(old).parent) == folder}
        for p in (root / folder).iterdir():
            if p.name in ("__init__.py", "__pycache__") or (p.is_file() and p.suffix != ".py"):
                continue
            stem = p.name.removesuffix(".py")
            if stem not in moved and stem not in stays:
                names.append(f"{folder}/{p.name}")
    return names


def tracked_text_files(root: Path) -> list[str]:
    out = []
    for rel in sh("git", "ls-files", cwd=root).splitlines():
        if rel == SELF or SKIP.match(rel):
            continue
        p = Path(rel)
        if p.suffix in TEXT_SUFFIXES or p.name in ("Makefile", "Dockerfile", ".dockerignore", ".gitignore"):
            out.append(rel)
    return out


def rewrite(root: Path, dry: bool) -> list[str]:
    changed: dict[str, str] = {}
    problems: list[str] = []
    for rel in tracked_text_files(root):
        path = root / rel
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite_text(text, rel, rel.endswith((".py", ".mako")))
        problems += leftovers(new, rel)
        if new != text:
            changed[rel] = new
    # data and vendored files are not rewritten, but a moved module named there must be seen to
    dot, slash = compile_patterns()
    for rel in sh("git", "ls-files", cwd=root).splitlines():
        if SKIP.match(rel) and rel.endswith((".json", ".md", ".txt", ".yaml")) and (root / rel).is_file():
            text = (root / rel).read_text(encoding="utf-8", errors="replace")
            problems += [
                f"{rel}: names {m[1]} (data: rewrite it by hand)" for m in (dot.search(text), slash.search(text)) if m
            ]
    if problems:
        raise Unclassified("references the table cannot place (nothing written):\n  " + "\n  ".join(problems))
    if not dry:
        for rel, new in changed.items():
            (root / rel).write_text(new, encoding="utf-8")
    return sorted(changed)


def tidy(root: Path, files: list[str]) -> None:
    """Import blocks sorted again (a module's new path sorts elsewhere) and formatted; what ruff cannot fix is
    reported (a longer path can push a comment past 120 columns: rewrap it by hand)."""
    ruff = root / ".venv" / "bin" / "ruff"
    exe = str(ruff) if ruff.exists() else shutil.which("ruff")
    py = [f for f in files if f.endswith(".py")]
    if not exe or not py:
        print("ruff not found: run `ruff check --select I --fix` yourself", file=sys.stderr)
        return
    subprocess.run([exe, "check", "--quiet", "--select", "I", "--fix", *py], cwd=root, check=False)
    subprocess.run([exe, "format", "--quiet", *py], cwd=root, check=False)  # the suite checks the format too
    left = subprocess.run([exe, "check", "--quiet", *py], cwd=root, capture_output=True, text=True)
    if left.returncode:
        print("ruff still reports (fix by hand):\n" + left.stdout, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if the run would change something")
    args = ap.parse_args(argv)
    root = Path(sh("git", "rev-parse", "--show-toplevel", cwd=Path.cwd()).strip())
    try:
        unplaced = unplaced_modules(root)
        if unplaced:
            raise Unclassified(f"neither moved nor staying: {unplaced}: add them to MOVES or STAYS_IN_CORE/SERVICE")
        changed = rewrite(root, dry=True)  # every reference placed before anything is written
        moves = move(root, args.check)
        if not args.check:
            changed = rewrite(root, dry=False)
    except Unclassified as exc:
        print(f"relayout: {exc.code}", file=sys.stderr)
        return 2
    if args.check:
        print("\n".join([*moves, *(f"would rewrite {f}" for f in changed)]) or "nothing to do")
        return 1 if moves or changed else 0
    if changed:
        tidy(root, changed)
        sh("git", "add", "--", *changed, cwd=root)
    for line in moves:
        print(line)
    print(f"{len(moves)} moves, {len(changed)} files rewritten" if moves or changed else "nothing to do")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
