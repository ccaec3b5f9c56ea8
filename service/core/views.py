"""How an assessment reads from outside: the one rendering used by the API, batch downloads and callbacks."""

from __future__ import annotations

from typing import Any

import msgspec

from service.core.store import AssessmentState

__all__ = ["render_assessment"]


def _plain(obj: Any) -> Any:
    return msgspec.to_builtins(obj)


def render_assessment(state: AssessmentState) -> dict[str, Any]:
    meta = state.meta
    req = meta.request
    cheap = state.cheap.candidates if state.cheap else {}
    llm = state.llm.candidates if state.llm else {}
    final = state.final.candidates if state.final else {}
    candidates = []
    for c in req.candidates:
        signals: dict[str, Any] = {}
        flags: list[Any] = []
        for part in (cheap.get(c.id), llm.get(c.id)):
            if part is not None:
                signals.update(_plain(part.signals))
                flags.extend(_plain(part.flags))
        fin = final.get(c.id, {})
        candidates.append(
            {
                "id": c.id,
                "model": c.model,
                "signals": signals,
                "flags": fin.get("flags", flags),
                "risk": fin.get("risk"),
                "routing": fin.get("routing"),
                "budget": fin.get("budget"),
            }
        )
    signature: dict[str, Any] = {"index": meta.index_signature}
    if state.cheap:
        signature.update(state.cheap.signature)
    if state.llm:
        signature["llm"] = state.llm.signature
    if state.final:
        signature.update(state.final.signature)
    out: dict[str, Any] = {
        "id": meta.id,
        "status": state.status,
        "created_at": meta.created_at,
        "source": {"text": req.source.text, "lang": req.source.lang, "ref": req.source.ref, "novelty": meta.novelty},
        "checks": meta.checks,
        "candidates": candidates,
        "signature": signature,
    }
    if state.llm:
        out["llm"] = {"plan": state.llm.plan, "cost": state.llm.cost}
    if state.failed:
        out["error"] = state.failed
    if state.callback:
        out["callback"] = _plain(state.callback)
    if meta.batch_id:
        out["batch_id"] = meta.batch_id
    return out
