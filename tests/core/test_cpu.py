"""The CPUs a process may use: its cgroup's limit, not the node's cores."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.core.embeddings import encoder_threads
from service.platform import cpu
from service.platform.settings import EmbeddingSettings


def test_the_cgroup_limit_is_read_from_v2_then_v1(tmp_path: Path) -> None:
    v2, q, p = tmp_path / "cpu.max", tmp_path / "quota", tmp_path / "period"
    v2.write_text("150000 100000\n")
    assert cpu.cgroup_cpu_limit(v2, q, p) == 1.5
    v2.write_text("max 100000\n")
    assert cpu.cgroup_cpu_limit(v2, q, p) is None
    v2.unlink()
    q.write_text("200000\n")
    p.write_text("100000\n")
    assert cpu.cgroup_cpu_limit(v2, q, p) == 2.0
    q.write_text("-1\n")
    assert cpu.cgroup_cpu_limit(v2, q, p) is None


def test_threads_follow_the_limit_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    mp = monkeypatch
    mp.setattr(cpu, "cgroup_cpu_limit", lambda: 1.2)
    mp.setattr(cpu.os, "sched_getaffinity", lambda _: set(range(64)))
    assert cpu.available_cores() == 2  # a 1.2-CPU limit on a 64-core node: two threads, not 64
    assert encoder_threads(EmbeddingSettings(threads=0)) == 2
    assert encoder_threads(EmbeddingSettings(threads=3)) == 3
    mp.setattr(cpu, "cgroup_cpu_limit", lambda: None)
    assert cpu.available_cores() == 64
