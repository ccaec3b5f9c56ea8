"""trisk: reference-free risk triage for machine translations of classical texts."""

from __future__ import annotations

__version__ = "0.1.0"
