"""The workbench's static files and their Subresource Integrity hashes (the page names each file with its hash, so
a browser runs only these bytes). htmx is vendored from npm (htmx.org 2.0.11, BSD0) and pinned here: replacing the
file without its hash fails a test."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

__all__ = ["ASSETS", "PINNED", "STATIC_DIR", "integrity"]

STATIC_DIR = Path(__file__).parent / "static"
# the published file's hash (npm pack htmx.org@2.0.11: package/dist/htmx.min.js)
PINNED = {"htmx.min.js": "sha384-2OatzQy1H+Zd/IIrjr1TcuDGqLXeHhbooAyJY1KdQMKnr4LZ22k31GBLdYKHmVjg"}


def integrity(path: Path) -> str:
    return "sha384-" + base64.b64encode(hashlib.sha384(path.read_bytes()).digest()).decode()


# name -> the integrity attribute the pages give it: the pinned hash for vendored files, ours computed at start
ASSETS: dict[str, str] = {
    p.name: PINNED.get(p.name, integrity(p)) for p in sorted(STATIC_DIR.glob("*")) if p.suffix in (".js", ".css")
}
