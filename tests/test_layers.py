"""The folder layout is the architecture: every import of service/ and workers/ points down the layers (DEVELOPERS.md
"Layout"), the two wings of one layer (review, the companion judges) leave each other alone, and no modules import
each other in a circle, whether the import runs at start, in a function or only for the type checker."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# top first; a module may import from its own layer and the ones below it; a layer of several wings (prefixes)
# lets a module import its own wing only (the companion judges may use core, platform and state, never review)
LAYERS: list[tuple[str, ...]] = [
    ("service.app", "service.cli", "workers"),
    ("service.review", "service.companions"),
    ("service.state",),
    ("service.core",),
    ("service.platform",),
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in [*ROOT.glob("service/**/*.py"), *ROOT.glob("workers/**/*.py")]:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The modules of this tree that ``name`` imports (``from a import b`` is ``a.b`` when that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            # ``from a import b``: the module a.b when there is one, else a name of a
            targets.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
    resolved = set()
    for target in targets:
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


# a wing's routes (``service/companions/<judge>/controllers.py``) stand in the web layer: they use its auth and deps
WEB_IN_A_WING = re.compile(r"service\.companions\.\w+\.controllers")


def _place(module: str) -> tuple[int, str] | None:
    """The layer's depth and the wing (its prefix) a module belongs to."""
    if WEB_IN_A_WING.fullmatch(module):
        return 0, LAYERS[0][0]
    for depth, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                return depth, p
    return None  # service/__init__.py: the version, importable from anywhere


def _layer(module: str) -> int | None:
    place = _place(module)
    return None if place is None else place[0]


def test_every_module_has_a_layer() -> None:
    assert [m for m in MODULES if _layer(m) is None and m != "service"] == []


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{a} -> {b}"
        for a, targets in GRAPH.items()
        for b in targets
        if (la := _layer(a)) is not None and (lb := _layer(b)) is not None and lb < la
    ]
    assert upward == []


def test_wings_of_a_layer_import_only_themselves() -> None:
    across = [
        f"{a} -> {b}"
        for a, targets in GRAPH.items()
        for b in targets
        if (pa := _place(a)) is not None and (pb := _place(b)) is not None and pa[0] == pb[0] > 0 and pa[1] != pb[1]
    ]
    assert across == []


def test_the_scoring_core_holds_no_companion_judge() -> None:
    """The translation-risk core alone: the companions' packages live in their wing, and core imports none of it."""
    assert not [m for m in MODULES if m.startswith("service.core.") and re.search(r"\.(poller|mata)(\.|$)", m)]
    assert "service.companions.poller.controllers" in MODULES and _layer("service.companions.poller.controllers") == 0
    assert _layer("service.companions.judge_jobs") == _layer("service.review")


def test_no_modules_import_each_other_in_a_circle() -> None:
    circles, state = [], dict.fromkeys(GRAPH, 0)  # 0 unseen, 1 on the path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(GRAPH[node]):
            if state[nxt] == 1:
                circles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif state[nxt] == 0:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(GRAPH):
        if state[start] == 0:
            visit(start, [start])
    assert circles == []
