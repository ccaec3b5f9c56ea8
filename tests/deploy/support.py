"""Readers of the deployment files for the tests: the k8s/ manifests, the kustomization and the Dockerfile."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
DOCKERFILE = ROOT / "Dockerfile"
# the oldest Kubernetes the manifests are written for (the preStop `sleep` action is on by default from 1.30) and
# the newest the validator bundles; k8s/README.md states the same floor
MIN_KUBERNETES = "1.30.0"


@dataclass(frozen=True)
class Doc:
    """One resource of a manifest file."""

    path: Path
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    def __str__(self) -> str:
        return f"{self.path.name}: {self.kind}/{self.name}"


def kustomization(k8s: Path = K8S) -> dict[str, Any]:
    return dict(yaml.safe_load((k8s / "kustomization.yaml").read_text(encoding="utf-8")))


def manifest_docs(k8s: Path = K8S) -> list[Doc]:
    """Every resource of every file the kustomization lists, in order."""
    docs = []
    for name in kustomization(k8s)["resources"]:
        path = k8s / name
        for body in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if body:
                docs.append(Doc(path, body))
    return docs


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    matches = [d for d in docs if d.kind == kind and d.name == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def pod_spec(doc: Doc) -> dict[str, Any]:
    return dict(doc.body["spec"]["template"]["spec"])


def containers(doc: Doc) -> list[dict[str, Any]]:
    spec = pod_spec(doc)
    return [*spec.get("initContainers", []), *spec["containers"]]


@dataclass
class Stage:
    """One stage of the Dockerfile: its base, its alias and its instructions (name, argument text)."""

    base: str
    alias: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, name: str) -> list[str]:
        return [args for instr, args in self.instructions if instr == name]

    def env(self) -> dict[str, str]:
        """The ENV of this stage (KEY=VALUE forms, as the Dockerfile writes them)."""
        out: dict[str, str] = {}
        for args in self.all("ENV"):
            for token in shlex.split(args):
                key, _, value = token.partition("=")
                out[key] = value
        return out


@dataclass
class Dockerfile:
    args: dict[str, str]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def stage(self, alias: str) -> Stage:
        return next(s for s in self.stages if s.alias == alias)


def parse_dockerfile(path: Path = DOCKERFILE) -> Dockerfile:
    """Instructions with continuation lines joined and comments dropped; ARGs before the first FROM substituted."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#") or not line:
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        instr, _, rest = line.partition(" ")
        instr, rest = instr.upper(), rest.strip()
        if instr == "ARG" and not stages:
            key, _, value = rest.partition("=")
            args[key] = value
        elif instr == "FROM":
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], rest)
            parts = base.split()
            alias = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], alias=alias))
        else:
            stages[-1].instructions.append((instr, rest))
    return Dockerfile(args=args, stages=stages)


def exec_form(args: str) -> list[str]:
    """A CMD or RUN in JSON exec form as a list; shell form split like a shell would."""
    if args.startswith("["):
        return list(yaml.safe_load(args))
    return shlex.split(args)
