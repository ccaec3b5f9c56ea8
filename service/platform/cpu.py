"""How many CPUs this process may use: the ones it may run on, capped by its cgroup's CPU limit (a container's
``limits.cpu``, ``docker run --cpus``), which ``os.cpu_count()`` ignores: it counts the node's cores."""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["available_cores", "cgroup_cpu_limit"]

# cgroup v2 (one file: "<quota> <period>" or "max <period>"), then cgroup v1 (two files)
_V2 = Path("/sys/fs/cgroup/cpu.max")
_V1_QUOTA = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
_V1_PERIOD = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def cgroup_cpu_limit(v2: Path = _V2, v1_quota: Path = _V1_QUOTA, v1_period: Path = _V1_PERIOD) -> float | None:
    """The CPU limit in CPUs (1.5 for a quota of 150 ms per 100 ms), or None when there is none or none is readable."""
    try:
        quota, _, period = v2.read_text(encoding="ascii").strip().partition(" ")
        if quota == "max":
            return None
        return int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        q, p = int(v1_quota.read_text(encoding="ascii")), int(v1_period.read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None
    return q / p if q > 0 and p > 0 else None


def available_cores() -> int:
    """CPUs this process may run on, capped by the cgroup's limit rounded up (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)
