"""A real browser for the workbench: Debian's chromium (installed by scripts/browser.sh) driven by Playwright, and the
app served by uvicorn on loopback in a thread. Playwright never downloads a browser here (no `playwright install`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.evaluation import free_port

__all__ = ["CHROMIUM", "CHROMIUM_FLAGS", "chromium", "serve"]

CHROMIUM = Path("/usr/bin/chromium")
# headless, nothing fetched from anywhere but the page's own origin (no updates, sync or field trials)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched chromium (Playwright's Browser); fails, saying how to install it, when it is missing."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} is missing: run scripts/browser.sh (Debian's chromium and chromium-driver)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def serve(app: Any, seconds: float = 60.0) -> Iterator[str]:
    """The app on a free loopback port (uvicorn in a thread, with the app's lifespan); yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="workbench-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + seconds
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the app did not start on loopback")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
