"""Lint and policy scan of the deployment: hadolint on the Dockerfile, checkov on k8s/ and the Dockerfile.

Every finding is fixed or waived with its reason in the repo (.checkov.yaml, `checkov.io/skip` annotations,
`# checkov:skip=` comments). Both tools run offline: hadolint is a local binary, checkov runs with --skip-download
(it then opens no network connection) and once per session.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.support import DOCKERFILE, K8S, ROOT, kustomization, manifest_docs

BIN = Path(sys.executable).parent
CHECKOV_CONFIG = ROOT / ".checkov.yaml"
FRAMEWORKS = ("kubernetes", "dockerfile", "secrets")


def _scanned_files() -> list[Path]:
    manifests = [K8S / name for name in kustomization()["resources"]]
    # the optional components' resources too (what an overlay adds is scanned like the base)
    components = sorted(p for p in (K8S / "components").glob("*/*.yaml") if p.name != "kustomization.yaml")
    return [*manifests, *components, K8S / "secrets.env.example", DOCKERFILE]


def run_checkov(files: list[Path], config: Path = CHECKOV_CONFIG) -> tuple[list[dict[str, Any]], float]:
    """checkov's JSON report (one entry per framework) and its run time in seconds."""
    cmd = [str(BIN / "checkov"), "--config-file", str(config), "--framework", *FRAMEWORKS]
    for path in files:
        cmd += ["-f", str(path.relative_to(ROOT))]
    # passed checks are reported too: test_checkov_read_every_file needs them
    cmd += ["--output", "json", "--skip-download", "--compact"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    seconds = time.perf_counter() - t0
    assert res.returncode in (0, 1), f"checkov did not run: {res.stderr[-2000:]}"
    report = json.loads(res.stdout)
    return (report if isinstance(report, list) else [report]), seconds


@pytest.fixture(scope="session")
def checkov_report() -> dict[str, dict[str, Any]]:
    report, seconds = run_checkov(_scanned_files())
    print(f"checkov: {seconds:.1f}s")
    return {r["check_type"]: r for r in report}


def _failures(report: dict[str, dict[str, Any]]) -> list[str]:
    return [
        f"{f['check_id']} {f['check_name']}: {f['resource']} ({f['file_path']})"
        for r in report.values()
        for f in r["results"]["failed_checks"]
    ]


def test_checkov_finds_nothing_unwaived(checkov_report: dict[str, dict[str, Any]]) -> None:
    assert set(checkov_report) == set(FRAMEWORKS), f"checkov scanned {sorted(checkov_report)}"
    assert not _failures(checkov_report), "\n".join(_failures(checkov_report))
    for r in checkov_report.values():
        assert r["summary"]["parsing_errors"] == 0, r["check_type"]


def test_checkov_read_every_file(checkov_report: dict[str, dict[str, Any]]) -> None:
    """A file checkov could not parse would pass with no checks run: every workload, the Dockerfile and the secrets
    template must have been checked (checkov has no checks for namespaces, budgets, policies, claims or CRDs)."""
    checked = [c for r in checkov_report.values() for k in ("passed_checks", "skipped_checks") for c in r["results"][k]]
    resources = {c["resource"] for c in checked}
    files = {Path(c["file_path"]).name for c in checked}
    for doc in manifest_docs():
        if doc.kind in ("Deployment", "StatefulSet", "Service", "ConfigMap", "ServiceAccount"):
            assert f"{doc.kind}.{doc.body['metadata']['namespace']}.{doc.name}" in resources, f"{doc} not checked"
    assert {DOCKERFILE.name, "secrets.env.example"} <= files


def test_every_waiver_gives_a_reason(checkov_report: dict[str, dict[str, Any]]) -> None:
    lines = CHECKOV_CONFIG.read_text(encoding="utf-8").splitlines()
    config = yaml.safe_load("\n".join(lines))
    for check in config["skip-check"]:
        at = lines.index(f"  - {check}")
        assert lines[at - 1].lstrip().startswith("#"), f"{check} is waived in .checkov.yaml without a reason above it"
        assert check in "\n".join(lines[:at]), f"the comment above {check} does not name it"
    for r in checkov_report.values():
        for skipped in r["results"].get("skipped_checks", []):
            reason = (skipped.get("check_result") or {}).get("suppress_comment", "")
            assert len(reason.strip()) > 20, f"{skipped['check_id']} on {skipped['resource']}: no reason given"


def test_hadolint_passes_the_dockerfile() -> None:
    res = subprocess.run(
        [str(BIN / "hadolint"), "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr
