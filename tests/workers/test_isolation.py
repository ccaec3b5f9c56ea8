"""What one tenant can learn from the caches the workers share: nothing. Two tenants sending the same texts each
pay for their own vectors (and LLM answers: tests/llm/test_bounds.py), so neither can tell the other sent them."""

from __future__ import annotations

import uuid
from typing import Any

from service.platform.settings import Settings
from tests.conftest import TEST_TENANT, issue_test_key
from tests.worker_support import run_worker_burst
from workers.lifecycle import Embedders


def test_two_tenants_sending_the_same_texts_do_not_share_vectors(client: Any, settings: Settings) -> None:
    """The finding: the embedding cache was shared, so B's assessment of A's exact texts came back from the cache (at
    once, without a model call). Now each tenant's vectors are its own."""
    marker = uuid.uuid4().hex  # texts nobody cached before (the test Redis outlives runs)
    body = {
        "source": {"text": "Evaṃ me sutaṃ.", "lang": "pli"},
        "candidates": [
            {"id": "a", "text": f"Thus have I heard {marker}."},
            {"id": "b", "text": f"So I heard {marker}."},
            {"id": "c", "text": f"This is what I heard {marker}."},
        ],
        "checks": ["peer_distance"],
    }
    as_b = {"Authorization": f"Bearer {issue_test_key(settings, tenant=f'{TEST_TENANT}-b')}"}
    embedders = Embedders(settings)  # one worker's encoders and cache, across both runs
    first = client.post("/v1/assessments", json=body).json()["id"]
    run_worker_burst(settings, ctx={"embedders": embedders})  # A's vectors are in the cache now
    second = client.post("/v1/assessments", json=body, headers=as_b).json()["id"]
    run_worker_burst(settings, ctx={"embedders": embedders})
    assert client.get(f"/v1/assessments/{first}").json()["status"] == "done"
    assert client.get(f"/v1/assessments/{second}", headers=as_b).json()["status"] == "done"
    stats = embedders.peer.stats
    assert stats.misses == 6 and stats.hits_memory == 0 and stats.hits_redis == 0  # three texts, twice
