"""Health routes: liveness, readiness and the workers' heartbeats."""

from __future__ import annotations

from service.app.health.controllers import HealthController, WorkerController

__all__ = ["HealthController", "WorkerController"]
