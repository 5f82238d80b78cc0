"""Attack 7: one big request must not starve everyone.

A real server (uvicorn, the int8 model) with two API keys. The assertions are about order,
outcomes and the batches the server forms, never about wall-clock times: of small requests sent
one after another while a bulk request of long texts is being computed, the first and at least
half of them are answered before it finishes (unsliced, none would be: each would wait for all
of it); a key with several bulk requests does not finish its one-request neighbour last; one
slice at a time is in the batcher (a queued slice would join a small request's batch); slices
are sized when they are sent, so a server whose cost model starts out far too optimistic cuts
its first slice big and the later ones by what it learned; a request whose deadline passes
mid-way gives back every token it held at the gate; and every sliced request gets exactly its
own vectors, as ``Embedder.embed`` computes them alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

httpx = pytest.importorskip("httpx2")

from edgembed.batching.cost_model import CostPrior  # noqa: E402
from edgembed.embedder import Embedder  # noqa: E402
from edgembed.serve.app import create_app  # noqa: E402
from edgembed.serve.fair import next_stop, plan_slices  # noqa: E402
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
    assert plan_slices([], 300) == []
    assert next_stop([100] * 10, 3, 250) == 5
    assert next_stop([100, 400, 10], 1, 250) == 2  # a text over the budget alone


def bulk_in_background(url: str, key: str, texts: list[str],
                       headers: dict[str, str] | None = None) -> tuple[threading.Thread,
                                                                      dict[str, Any]]:
    result: dict[str, Any] = {}

    def run() -> None:
        with httpx.Client(base_url=url, timeout=300,
                          headers={"Authorization": f"Bearer {key}", **(headers or {})}) as c:
            r = c.post("/embed", json={"inputs": texts})
        result["status"] = r.status_code
        result["body"] = r.json()

    t = threading.Thread(target=run)
    t.start()
    return t, result


def test_one_slice_at_a_time_in_the_batcher(server: BackgroundServer,
                                            embedder: Embedder) -> None:
    # The next slice waits at the gate, not in the batcher: were it queued there, a small
    # request arriving mid-slice would be batched with it and wait for two slices.
    big = long_texts("one-at-a-time", 32)
    batcher = server.app.state.edgembed.batcher
    before = batcher.stats().batches
    t, result = bulk_in_background(server.url, KEY_BULK, big)
    most = polls = 0
    while t.is_alive():
        st = batcher.stats()
        most = max(most, st.queue_depth + st.in_flight_batches)
        polls += 1
        time.sleep(0.002)
    t.join()
    assert result["status"] == 200, result["body"]
    assert batcher.stats().batches - before >= 8  # sliced: dozens of slices, all seen above
    assert polls > 8 and most == 1, f"{most} requests were in the batcher at once"
    np.testing.assert_allclose(np.array(result["body"], dtype=np.float32), embedder.embed(big),
                               atol=1e-6)


@pytest.fixture(scope="module")
def optimistic_server(embedder: Embedder) -> Iterator[BackgroundServer]:
    # A cost model that starts out believing the engine computes 100,000 tokens/s, 20-50x what
    # a small CPU does: a slice sized from it holds about nine of the long texts, where the
    # speed learned holds one. The target is low (shedding off) so that even a fast CPU's
    # slices end up smaller than the prior's. The model clips each observation to a band
    # around its prediction, so it learns such an error over a few batches, not at once.
    settings = ServeSettings(api_keys=(KEY_BULK,), latency_target_ms=50, shed=False,
                             cost_prior=CostPrior(fixed_ms=0.5, ms_per_ktoken=10.0,
                                                  ms_per_kpadding=10.0))
    with BackgroundServer(create_app(ServedModel.from_embedder(embedder), settings),
                          settings) as s:
        yield s


def test_slices_are_sized_when_sent(optimistic_server: BackgroundServer,
                                    embedder: Embedder) -> None:
    big = long_texts("learn", 96)  # ~170 tokens each
    batcher = optimistic_server.app.state.edgembed.batcher
    before = batcher.stats().batch_tokens_histogram
    vectors = post(optimistic_server.url, KEY_BULK, big)
    hist = batcher.stats().batch_tokens_histogram
    counts = [b - a for a, b in zip(before["counts"], hist["counts"], strict=True)]
    bounds = [*hist["bounds"], float("inf")]
    large = sum(c for c, le in zip(counts, bounds, strict=True) if le > 512)  # 3+ texts
    single = sum(c for c, le in zip(counts, bounds, strict=True) if le <= 256)  # one text
    # The first slices are cut from the prior; once the model has learned the machine's
    # speed, every slice is cut from it: one text. Sized all at arrival, every slice would
    # hold the prior's nine texts.
    assert large >= 1 and single >= 10, counts
    np.testing.assert_allclose(vectors, embedder.embed(big), atol=1e-6)


def test_a_deadline_mid_request_gives_every_token_back(server: BackgroundServer) -> None:
    state = server.app.state.edgembed
    t, result = bulk_in_background(server.url, KEY_BULK, long_texts("late", 64),
                                   headers={"X-Edgembed-Deadline-Ms": "300"})
    t.join(300)
    assert result["status"] == 504, result["body"]
    for _ in range(1000):  # the withdrawn slices' callbacks run on the server's loop
        if state.slicer.gate.total == 0 and state.batcher.stats().in_flight_batches == 0:
            break
        time.sleep(0.01)
    assert state.slicer.gate.total == 0 and state.slicer.gate.active_keys() == 0
    assert state.slicer.gate.waiting_tokens == 0
    after = post(server.url, KEY_BULK, long_texts("after", 4))  # the key is not stuck
    assert after.shape[0] == 4


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
    # Each small request waits for at most the slice being computed, so on a machine of
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


@pytest.fixture(scope="module")
def queue_limited(embedder: Embedder) -> Iterator[tuple[BackgroundServer, list[str], list[str],
                                                         int]]:
    # The queue holds NEXT and half of RUNNING: while RUNNING has more than half its tokens
    # reserved (not computed), NEXT does not fit beside it, although it fits beside the
    # slices of RUNNING that are in the batcher or wait at the gate.
    model = ServedModel.from_embedder(embedder)
    running, nxt = long_texts("running", 48), long_texts("next", 24)
    limit = (sum(model.tokens(nxt, truncate=True))
             + sum(model.tokens(running, truncate=True)) // 2)
    settings = ServeSettings(api_keys=(KEY_BULK, KEY_OTHER), latency_target_ms=200,
                             shed=False, max_queue_tokens=limit)
    with BackgroundServer(create_app(model, settings), settings) as s:
        yield s, running, nxt, limit


def test_a_request_counts_its_unsent_slices_against_the_queue(
        queue_limited: tuple[BackgroundServer, list[str], list[str], int]) -> None:
    server, running, nxt, limit = queue_limited
    state = server.app.state.edgembed
    before = state.batcher.stats().batches
    t, result = bulk_in_background(server.url, KEY_BULK, running)
    while state.batcher.stats().batches == before:  # its first slice is being computed
        time.sleep(0.002)
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Authorization": f"Bearer {KEY_OTHER}"}) as c:
        r = c.post("/v1/embeddings", json={"input": nxt})
        # Its slices not yet sent are reserved: counting only the slice in the batcher and
        # the one at the gate, the server would have queued both requests whole.
        assert r.status_code == 429, r.text[:300]
        assert "--max-queue-tokens" in r.json()["error"]["message"]
        assert int(r.headers["Retry-After"]) >= 1
        t.join(300)
        assert result["status"] == 200, result["body"]
        for _ in range(1000):  # the last slice's tokens go back on the server's loop
            if state.slicer.gate.reserved == 0:
                break
            time.sleep(0.01)
        assert state.slicer.gate.reserved == 0 and state.slicer.gate.total == 0
        r = c.post("/v1/embeddings", json={"input": nxt})  # the queue is free again
        assert r.status_code == 200, r.text
        # One over the limit by itself cannot wait its way in: 413, saying what to do.
        r = c.post("/embed", json={"inputs": nxt * 3}, headers={"X-Edgembed-Priority": "bulk"})
        assert r.status_code == 413, r.text
        assert (f"limit of {limit:,} tokens" in r.json()["error"]
                and "split it into requests" in r.json()["error"])
    assert state.slicer.gate.reserved == 0
