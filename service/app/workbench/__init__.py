"""The review workbench: server-rendered pages on the API's own services (queue, item, verdicts, calibration,
batches) behind a sign-in with an API key; see ``controllers``."""

from __future__ import annotations

import time
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from litestar.contrib.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig

from service.app.workbench.controllers import workbench_handlers
from service.app.workbench.errors import with_page_errors
from service.app.workbench.pages import ago, budget_words, pct, signal_words

__all__ = ["template_config", "with_page_errors", "workbench_handlers"]

TEMPLATES = Path(__file__).parent / "templates"


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    """Jinja2 over the workbench's templates, escaping everything (texts are the tenant's, never trusted)."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True), auto_reload=False)
    env.globals.update(pct=pct, ago=ago, budget_words=budget_words, signal_words=signal_words, utc=_utc)
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(env))
