"""The workbench's static files: each served under a name carrying its content's hash (``workbench.3f2a1b9c04.css``),
so a browser may keep it for a year (``immutable``) and a new release's file is a new URL; gzipped once at start and
sent compressed to browsers that take it; named in the pages with its Subresource Integrity hash (a browser runs only
these bytes). htmx is vendored from npm (htmx.org 2.0.11, BSD0) and pinned here: replacing the file without its hash
fails a test."""

from __future__ import annotations

import base64
import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ASSETS", "FILES", "IMMUTABLE", "PINNED", "STATIC_DIR", "URLS", "Asset", "integrity"]

STATIC_DIR = Path(__file__).parent / "static"
# the published file's hash (npm pack htmx.org@2.0.11: package/dist/htmx.min.js)
PINNED = {"htmx.min.js": "sha384-2OatzQy1H+Zd/IIrjr1TcuDGqLXeHhbooAyJY1KdQMKnr4LZ22k31GBLdYKHmVjg"}
IMMUTABLE = "public, max-age=31536000, immutable"
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def integrity(path: Path) -> str:
    return "sha384-" + base64.b64encode(hashlib.sha384(path.read_bytes()).digest()).decode()


@dataclass(frozen=True)
class Asset:
    name: str  # as in the folder: workbench.css
    url: str  # as the pages name it: /ui/static/workbench.<hash>.css
    integrity: str
    media_type: str
    body: bytes
    gzipped: bytes


def _asset(p: Path) -> Asset:
    body = p.read_bytes()
    digest = hashlib.sha256(body).hexdigest()[:10]
    # mtime 0: the same bytes every start, so every replica sends the same compressed file
    return Asset(
        p.name,
        f"/ui/static/{p.stem}.{digest}{p.suffix}",
        PINNED.get(p.name, integrity(p)),
        _TYPES[p.suffix],
        body,
        gzip.compress(body, 9, mtime=0),
    )


_ALL = [_asset(p) for p in sorted(STATIC_DIR.glob("*")) if p.suffix in _TYPES]
# name -> the integrity attribute the pages give it: the pinned hash for vendored files, ours computed at start
ASSETS: dict[str, str] = {a.name: a.integrity for a in _ALL}
URLS: dict[str, str] = {a.name: a.url for a in _ALL}
FILES: dict[str, Asset] = {a.url.rsplit("/", 1)[1]: a for a in _ALL}  # by the hashed file name the URL ends in
