#!/usr/bin/env python3
"""The companion judges (Poller, MATA) in a wing of their own (issue 35 item 2), as a rerunnable move.

    python3 scripts/relayout_companions.py            # move and rewrite (run from anywhere inside the checkout)
    python3 scripts/relayout_companions.py --check    # say what would change; exit 1 if anything would

``service/companions/`` holds the judges with their routes, their persona store and their job store; ``service/core``
keeps the translation-risk core alone (the shared LLM client, GEMBA and backtranslation stay in
``service/core/judges/llm``). Packages move whole with ``git mv``, so a module someone adds to one of them meanwhile
moves with it; the routes' packages (``service/app/poller``, ``service/app/mata``) are merged into the judges'
packages: every file but the old ``__init__.py`` moves, the emptied package goes. Then every reference is rewritten
(dotted module paths and file paths in every tracked text file, as ``scripts/relayout.py`` does, whose helpers this
uses). Public names are unchanged and no shim is left: ARQ stores the job name ``judge`` and its string arguments,
never a module path, and no stored record names a class. Running it again after a success changes nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import relayout  # (the helpers of the earlier move: git, the files we may rewrite, ruff)

# old path -> new path (a file or a whole package); applied in this order
MOVES: list[tuple[str, str]] = [
    ("service/core/judges/poller", "service/companions/poller"),
    ("service/core/judges/mata", "service/companions/mata"),
    ("service/app/personas", "service/companions/personas"),
    ("service/state/durable/personas.py", "service/companions/personas/store.py"),
    ("service/state/judge_jobs.py", "service/companions/judge_jobs.py"),
]
# old package -> existing package: its files move in beside the judge, its ``__init__.py`` goes
MERGES: list[tuple[str, str]] = [
    ("service/app/poller", "service/companions/poller"),
    ("service/app/mata", "service/companions/mata"),
]
WING = "service/companions"
WING_DOC = relayout.NEW_PACKAGES[WING]
SELF = "scripts/relayout_companions.py"


def sh(*cmd: str, cwd: Path) -> str:
    return relayout.sh(*cmd, cwd=cwd)


def _there(path: Path) -> bool:
    return path.exists() and (path.is_file() or any(p.name != "__pycache__" for p in path.iterdir()))


def move(root: Path, dry: bool) -> list[str]:
    done: list[str] = []
    if not (root / WING / "__init__.py").exists():
        done.append(f"create {WING}/__init__.py")
        if not dry:
            (root / WING).mkdir(parents=True, exist_ok=True)
            (root / WING / "__init__.py").write_text(f'"""{WING_DOC}"""\n', encoding="utf-8")
            sh("git", "add", f"{WING}/__init__.py", cwd=root)
    for old, new in MOVES:
        src, dst = root / old, root / new
        if not _there(src):
            if _there(dst):
                continue  # moved before
            raise relayout.Unclassified(f"{old}: neither it nor {new} exists: update the table in {SELF}")
        if _there(dst):
            raise relayout.Unclassified(f"{old} and {new} both exist: merge them by hand, then rerun")
        untracked = sh("git", "ls-files", "--others", "--exclude-standard", "--", old, cwd=root).split()
        if untracked:
            raise relayout.Unclassified(f"{old}: untracked files would stay behind: {untracked}")
        done.append(f"git mv {old} {new}")
        if not dry:
            dst.parent.mkdir(parents=True, exist_ok=True)
            sh("git", "mv", old, new, cwd=root)
            _drop_bytecode(src)
    for old, new in MERGES:
        files = sh("git", "ls-files", "--", old, cwd=root).split()
        for rel in files:
            name = rel.removeprefix(old + "/")
            if name == "__init__.py":
                continue
            if (root / new / name).exists():
                raise relayout.Unclassified(f"{rel} and {new}/{name} both exist: merge them by hand, then rerun")
            done.append(f"git mv {rel} {new}/{name}")
            if not dry:
                (root / new / name).parent.mkdir(parents=True, exist_ok=True)
                sh("git", "mv", rel, f"{new}/{name}", cwd=root)
        if f"{old}/__init__.py" in files:
            done.append(f"git rm {old}/__init__.py")
            if not dry:
                sh("git", "rm", "--quiet", f"{old}/__init__.py", cwd=root)
                _drop_bytecode(root / old)
    return done


def _drop_bytecode(src: Path) -> None:
    """The old place's bytecode (untracked) would leave a ghost package behind."""
    if src.is_dir():
        relayout.shutil.rmtree(src, ignore_errors=True)
    else:
        for pyc in (src.parent / "__pycache__").glob(f"{src.stem}.*.pyc"):
            pyc.unlink()


def _maps() -> tuple[dict[str, str], dict[str, str]]:
    """Dotted and slashed old -> new, the merged packages included (``service.app.poller.x`` is
    ``service.companions.poller.x``)."""
    pairs = [(o.removesuffix(".py"), n.removesuffix(".py")) for o, n in [*MOVES, *MERGES]]
    return {o.replace("/", "."): n.replace("/", ".") for o, n in pairs}, dict(pairs)


def _pattern(names: list[str]) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.])({relayout._alternation(names)})(?![\w])")


# ``from service.state import judge_jobs, lanes``: a moved module imported from its old package by name
def _from_package_pattern(dots: dict[str, str]) -> re.Pattern[str]:
    parents = sorted({old.rpartition(".")[0] for old in dots})
    return re.compile(
        rf"^(?P<indent>[ \t]*)from (?P<pkg>{relayout._alternation(parents)}) import (?P<names>\([^)]*\)|[^\n#]*)$",
        re.M,
    )


def rewrite_text(text: str, where: str, is_python: bool) -> str:
    dots, slashes = _maps()
    if is_python:

        def one(m: re.Match[str]) -> str:
            groups: dict[str, list[str]] = {}
            for item in (x.strip() for x in m["names"].strip().strip("()").replace("\n", " ").split(",")):
                if not item:
                    continue
                full = f"{m['pkg']}.{item.split(' as ')[0].strip()}"
                if full in dots and dots[full].rpartition(".")[2] != full.rpartition(".")[2]:
                    raise relayout.Unclassified(f"{where}: `from {m['pkg']} import` a renamed module: by hand")
                groups.setdefault(dots[full].rpartition(".")[0] if full in dots else m["pkg"], []).append(item)
            if list(groups) == [m["pkg"]]:
                return m[0]
            return "\n".join(f"{m['indent']}from {pkg} import {', '.join(items)}" for pkg, items in groups.items())

        text = _from_package_pattern(dots).sub(one, text)
    text = _pattern(list(dots)).sub(lambda m: dots[m[1]], text)
    return _pattern(list(slashes)).sub(lambda m: slashes[m[1]], text)


def rewrite(root: Path, dry: bool) -> list[str]:
    changed: dict[str, str] = {}
    for rel in relayout.tracked_text_files(root):
        path = root / rel
        if rel == SELF or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite_text(text, rel, rel.endswith((".py", ".mako")))
        if new != text:
            changed[rel] = new
    if not dry:
        for rel, new in changed.items():
            (root / rel).write_text(new, encoding="utf-8")
    return sorted(changed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if the run would change something")
    args = ap.parse_args(argv)
    root = Path(sh("git", "rev-parse", "--show-toplevel", cwd=Path.cwd()).strip())
    try:
        changed = rewrite(root, dry=True)  # every reference placed before anything is written
        moves = move(root, args.check)
        if not args.check:
            changed = rewrite(root, dry=False)
    except relayout.Unclassified as exc:
        print(f"relayout_companions: {exc.code}", file=sys.stderr)
        return 2
    if args.check:
        print("\n".join([*moves, *(f"would rewrite {f}" for f in changed)]) or "nothing to do")
        return 1 if moves or changed else 0
    if changed:
        relayout.tidy(root, changed)
        sh("git", "add", "--", *changed, cwd=root)
    for line in moves:
        print(line)
    print(f"{len(moves)} moves, {len(changed)} files rewritten" if moves or changed else "nothing to do")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
