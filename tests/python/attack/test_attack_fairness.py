"""Attack 7: one big request must not starve everyone.

A real server (uvicorn, the int8 model) with two API keys. The assertions are about order and
outcomes, never about wall-clock times: of small requests sent one after another while a bulk
request of long texts is being computed, the first and at least half of them are answered before
it finishes (unsliced, none would be: each would wait for all of it); a key with several bulk
requests does not finish its one-request neighbour last; and every sliced request gets
exactly its own vectors, as ``Embedder.embed`` computes them alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

httpx = pytest.importorskip("httpx2")

from edgembed.embedder import Embedder  # noqa: E402
from edgembed.serve.app import create_app  # noqa: E402
from edgembed.serve.fair import plan_slices  # noqa: E402
from edgembed.serve.model import ServedModel  # noqa: E402
from edgembed.serve.server import BackgroundServer  # noqa: E402
from edgembed.serve.settings import ServeSettings  # noqa: E402

KEY_BULK, KEY_OTHER, KEY_SMALL = "bulk-key-0001", "other-key-0002", "small-key-0003"
LONG = "a long document about batching, fairness and latency targets on small machines " * 12


def long_texts(tag: str, n: int) -> list[str]:
    return [f"{tag} {i}: {LONG}" for i in range(n)]


@pytest.fixture(scope="module")
def server(embedder: Embedder) -> Iterator[BackgroundServer]:
    # Slices as the server sizes them: what a batch computes in half the latency target.
    # Shedding is off so that the outcome does not depend on how busy the machine is: every
    # request is queued, and only the order in which they finish is asserted.
    settings = ServeSettings(api_keys=(KEY_BULK, KEY_OTHER, KEY_SMALL), latency_target_ms=200,
                             shed=False)
    with BackgroundServer(create_app(ServedModel.from_embedder(embedder), settings),
                          settings) as s:
        yield s


def post(url: str, key: str, texts: list[str], timeout: float = 300) -> Any:
    with httpx.Client(base_url=url, timeout=timeout,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        r = c.post("/embed", json={"inputs": texts})
    assert r.status_code == 200, r.text
    return np.array(r.json(), dtype=np.float32)


def test_plan_slices() -> None:
    assert plan_slices([100] * 10, 300) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert plan_slices([500, 10, 10], 300) == [(0, 1), (1, 3)]
    assert plan_slices([5], 1) == [(0, 1)]


def test_small_requests_are_served_between_slices(server: BackgroundServer,
                                                  embedder: Embedder) -> None:
    big = long_texts("bulk", 64)  # 64 texts of 256 tokens: dozens of slices
    result: dict[str, Any] = {}

    def bulk() -> None:
        result["vectors"] = post(server.url, KEY_BULK, big)
        result["done_at"] = time.monotonic()

    state = server.app.state.edgembed
    before = state.batcher.stats().batches
    t = threading.Thread(target=bulk)
    t.start()
    while state.batcher.stats().batches == before:  # the bulk request is being computed
        time.sleep(0.005)
    smalls: list[float] = []
    answers: list[Any] = []
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Authorization": f"Bearer {KEY_SMALL}"}) as c:
        for i in range(8):
            r = c.post("/embed", json={"inputs": [f"a short query {i}"]})
            smalls.append(time.monotonic())
            assert r.status_code == 200, r.text
            answers.append(r.json()[0])
    t.join(300)
    # Each small request waits for at most the slices already queued (two), so on a machine of
    # any load most of the eight are answered while the bulk request (18 slices on 2 cores) runs;
    # only the last few can race its last slices. Unsliced, the first would wait for all of it.
    before_bulk = sum(at < result["done_at"] for at in smalls)
    assert smalls[0] < result["done_at"] and before_bulk >= 4, (
        f"{8 - before_bulk} of 8 small requests waited for the bulk one")
    for i, got in enumerate(answers):  # references after the race, not inside it
        np.testing.assert_allclose(got, embedder.embed(f"a short query {i}")[0], atol=1e-6)
    np.testing.assert_allclose(result["vectors"], embedder.embed(big), atol=1e-6)


def test_each_key_gets_a_fair_share(server: BackgroundServer, embedder: Embedder) -> None:
    heavy = [long_texts(f"heavy{j}", 8) for j in range(4)]
    light = long_texts("light", 8)
    done: dict[str, float] = {}
    vectors: dict[str, Any] = {}

    def send(name: str, key: str, texts: list[str]) -> None:
        vectors[name] = post(server.url, key, texts)
        done[name] = time.monotonic()

    threads = [threading.Thread(target=send, args=(f"heavy{j}", KEY_BULK, heavy[j]))
               for j in range(4)]
    for th in threads:
        th.start()
    time.sleep(0.05)  # the heavy key's requests are all in before the light key's one
    light_t = threading.Thread(target=send, args=("light", KEY_OTHER, light))
    light_t.start()
    for th in [*threads, light_t]:
        th.join(300)
    # Served in turn with the heavy key, the light key's request (a fifth of the work) is
    # done well before the heavy key's last one; arrival order would have put it last.
    assert done["light"] < max(done[f"heavy{j}"] for j in range(4))
    finished_before = sum(done[f"heavy{j}"] < done["light"] for j in range(4))
    assert finished_before <= 1
    np.testing.assert_allclose(vectors["light"], embedder.embed(light), atol=1e-6)
    for j in range(4):
        np.testing.assert_allclose(vectors[f"heavy{j}"], embedder.embed(heavy[j]), atol=1e-6)
