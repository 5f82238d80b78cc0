"""Backpressure: a full queue answers 429 with Retry-After at once, never a hang.

A slow synthetic model (each call sleeps) and a queue of two make the batcher full on purpose.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx2")

from edgembed.serve.app import DEADLINE_HEADER, create_app  # noqa: E402
from edgembed.serve.model import ServedModel  # noqa: E402
from edgembed.serve.server import BackgroundServer  # noqa: E402
from edgembed.serve.settings import ServeSettings  # noqa: E402

CALL_S = 0.8
MAX_QUEUE = 2


def slow_model(texts: list[str]) -> Any:
    time.sleep(CALL_S)
    return np.array([[len(t), 1.0, 0.0, 0.0] for t in texts], dtype=np.float32)


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    settings = ServeSettings(max_queue=MAX_QUEUE, workers=1, shed=False, latency_target_ms=50)
    app = create_app(ServedModel.from_callable(slow_model, dim=4, name="slow"), settings)
    with BackgroundServer(app, settings) as s:
        yield s


def burst(url: str, path: str, body: dict[str, Any], n: int) -> list[tuple[Any, float]]:
    """``n`` requests at once; (response, seconds) for each."""
    results: list[tuple[Any, float]] = []
    lock = threading.Lock()
    start = threading.Barrier(n)

    def one() -> None:
        with httpx.Client(base_url=url, timeout=10) as c:
            start.wait(5)
            t0 = time.perf_counter()
            r = c.post(path, json=body)
            with lock:
                results.append((r, time.perf_counter() - t0))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(results) == n
    return results


def test_full_queue_answers_429_with_retry_after(server: BackgroundServer) -> None:
    results = burst(server.url, "/v1/embeddings", {"input": "hello"}, 10)
    refused = [(r, s) for r, s in results if r.status_code == 429]
    served = [(r, s) for r, s in results if r.status_code == 200]
    assert len(refused) + len(served) == len(results)
    # One request computing, MAX_QUEUE waiting; anything beyond is refused.
    assert 1 <= len(served) <= 1 + MAX_QUEUE + 1
    assert len(refused) >= len(results) - (MAX_QUEUE + 2)
    for r, seconds in refused:
        assert seconds < CALL_S  # refused at once, not after waiting
        assert int(r.headers["retry-after"]) >= 1
        err = r.json()["error"]
        assert err["type"] == "rate_limit_error" and err["code"] == "overloaded"
        assert "retry after" in err["message"]
    want = np.array([5.0, 1.0, 0.0, 0.0]) / np.sqrt(26.0)  # len("hello") = 5, normalized
    for r, _ in served:
        assert np.allclose(r.json()["data"][0]["embedding"], want, atol=1e-6)


def test_tei_route_429_shape(server: BackgroundServer) -> None:
    results = burst(server.url, "/embed", {"inputs": ["a", "b"]}, 8)
    refused = [r for r, _ in results if r.status_code == 429]
    assert refused
    assert refused[0].json()["error_type"] == "overloaded"
    assert refused[0].headers["retry-after"].isdigit()


def occupy(server: BackgroundServer, n: int) -> list[threading.Thread]:
    """One request computing, then ``n - 1`` waiting: each started once the previous is in."""
    batcher = server.app.state.edgembed.batcher
    threads = []
    for i in range(n):
        t = threading.Thread(target=burst, args=(server.url, "/embed", {"inputs": "x"}, 1))
        t.start()
        threads.append(t)
        end = time.monotonic() + 5
        while time.monotonic() < end:
            stats = batcher.stats()
            if stats.in_flight_batches == 1 and stats.queue_depth == i:
                break
            time.sleep(0.005)
    return threads


def test_openai_client_sees_rate_limit(server: BackgroundServer) -> None:
    holders = occupy(server, 1 + MAX_QUEUE)
    try:
        with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0,
                           timeout=10) as client, pytest.raises(openai.RateLimitError) as info:
            client.embeddings.create(model="slow", input="y", encoding_format="float")
        assert int(info.value.response.headers["retry-after"]) >= 1
        assert info.value.body["code"] == "overloaded"
    finally:
        for t in holders:
            t.join(20)


def test_deadline_expiring_in_the_queue_is_504(server: BackgroundServer) -> None:
    holders = occupy(server, 1)  # the model is busy for CALL_S
    try:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            t0 = time.perf_counter()
            r = c.post("/embed", json={"inputs": "late"}, headers={DEADLINE_HEADER: "150"})
            elapsed = time.perf_counter() - t0
        assert r.status_code == 504
        assert r.json()["error_type"] == "backend"
        assert elapsed < CALL_S  # answered when the deadline passed, not computed
    finally:
        for t in holders:
            t.join(20)


def test_rejections_are_counted(server: BackgroundServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as c:
        text = c.get("/metrics").text
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert float(samples['edgembed_batcher_requests_total{outcome="overloaded"}']) >= 1
    assert float(samples['edgembed_http_rejections_total{reason="overloaded"}']) >= 1
    assert float(samples["edgembed_batcher_queue_depth"]) <= MAX_QUEUE
