"""ARQ workers: jobs by kind (assessment tiers, judge jobs, callbacks), one failure policy, one worker context."""

from __future__ import annotations

import os

# OpenMP's default spin-waiting burns a core per idle thread on a shared 2-core box; it must be set before the
# embedding engine's runtime loads, i.e. before anything below imports it
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
