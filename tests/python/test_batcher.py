"""The live batcher on the real clock, with a synthetic target: threads, asyncio, cancellation,
shutdown, overload and deadlines. Events synchronize; nothing here asserts wall-clock speed."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

from edgembed.batching import AdaptiveBatcher, CostPrior
from edgembed.batching.batcher import estimate_tokens
from edgembed.errors import (
    BatcherClosed,
    BatcherError,
    DeadlineExceeded,
    InputError,
    Overloaded,
)

WAIT = 10.0  # seconds; only a bound for a broken test, never reached when things work


def vec(text: str) -> list[float]:
    return [float(len(text)), float(sum(map(ord, text)) % 9973)]


class Target:
    """Returns vectors that identify their text; a call containing "HOLD" blocks until released."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.holding = threading.Event()
        self.release = threading.Event()
        self.fail_on: str | None = None

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if "HOLD" in texts:
            self.holding.set()
            assert self.release.wait(WAIT)
        if self.fail_on is not None and self.fail_on in texts:
            raise ValueError(f"cannot embed {self.fail_on!r}")
        return [vec(t) for t in texts]

    def seen(self, text: str) -> bool:
        return any(text in c for c in self.calls)


def hold(b: AdaptiveBatcher, t: Target) -> Future[object]:
    """Occupy the only worker until ``t.release`` is set."""
    fut = b.submit("HOLD")
    assert t.holding.wait(WAIT)
    return fut


def test_results_match_inputs_from_many_threads() -> None:
    t = Target()
    with AdaptiveBatcher(t, latency_target_ms=5000) as b:
        results: dict[int, tuple[list[str], Any, str, Any]] = {}

        def client(k: int) -> None:
            for i in range(40):
                texts = [f"client {k} text {i} part {j} " * (1 + (i + j) % 4) for j in range(i % 3)]
                single = f"client {k} single {i}"
                f_many = b.submit(texts)
                f_one = b.submit(single)
                results[k * 1000 + i] = (texts, f_many.result(WAIT), single, f_one.result(WAIT))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(WAIT)
    assert len(results) == 160
    for texts, many, single, one in results.values():
        assert many == [vec(x) for x in texts]
        assert one == vec(single)
    assert sum(len(c) for c in t.calls) == 160 + sum(i % 3 for i in range(40)) * 4


def test_asyncio_results_match_inputs() -> None:
    t = Target()

    async def main() -> None:
        async with AdaptiveBatcher(t, latency_target_ms=5000) as b:
            texts = [f"text {i} " * (1 + i % 5) for i in range(120)]
            out = await asyncio.gather(*(b.embed(x) for x in texts))
            assert out == [vec(x) for x in texts]
            assert await b.embed(["a", "bb"]) == [vec("a"), vec("bb")]
            assert await b.embed([]) == []
            assert b.stats().completed == 121

    asyncio.run(main())
    assert max(len(c) for c in t.calls) > 1  # concurrent requests were batched


def test_an_embedder_is_called_through_embed_and_count_tokens() -> None:
    class FakeEmbedder:
        def __init__(self) -> None:
            self.counted: list[list[str]] = []

        def count_tokens(self, texts: Sequence[str]) -> list[int]:
            self.counted.append(list(texts))
            return [7 for _ in texts]

        def embed(self, texts: list[str]) -> np.ndarray:
            return np.array([vec(x) for x in texts], dtype=np.float32)

    e = FakeEmbedder()
    with AdaptiveBatcher(e) as b:
        one = b.submit("hello").result(WAIT)
        two = b.submit(["a", "bc"]).result(WAIT)
        assert b.stats().queue_tokens == 0
    assert isinstance(one, np.ndarray) and one.tolist() == vec("hello")
    assert isinstance(two, np.ndarray) and two.shape == (2, 2)
    assert two.tolist() == [vec("a"), vec("bc")]
    assert one.base is None  # a copy: the batch's array is not kept alive
    assert e.counted == [["hello"], ["a", "bc"]]


def test_token_estimate_without_count_tokens() -> None:
    assert estimate_tokens(["", "abcd" * 10]) == [2, 12]


def test_cancelling_a_waiting_request_withdraws_it() -> None:
    t = Target()
    with AdaptiveBatcher(t) as b:
        first = hold(b, t)
        waiting = b.submit("withdrawn")
        assert waiting.cancel()
        t.release.set()
        assert first.result(WAIT) == vec("HOLD")
        assert b.submit("after").result(WAIT) == vec("after")
        stats = b.stats()
    assert not t.seen("withdrawn")
    assert stats.cancelled == 1 and stats.completed == 2


def test_cancelling_an_awaiting_task_withdraws_the_request() -> None:
    t = Target()

    async def main() -> None:
        async with AdaptiveBatcher(t) as b:
            first = asyncio.ensure_future(b.embed("HOLD"))
            await asyncio.to_thread(t.holding.wait, WAIT)
            task = asyncio.ensure_future(b.embed("abandoned"))
            await asyncio.sleep(0)  # one loop turn: the task runs up to awaiting its future
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            t.release.set()
            assert await first == vec("HOLD")

    asyncio.run(main())
    assert not t.seen("abandoned")


def test_close_with_drain_computes_everything_queued() -> None:
    t = Target()
    b = AdaptiveBatcher(t)
    first = hold(b, t)
    queued = [b.submit(f"queued {i}") for i in range(5)]
    closer = threading.Thread(target=b.close, kwargs={"drain": True})
    closer.start()
    with pytest.raises(BatcherClosed):
        b.submit("too late")
    t.release.set()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert first.result(0) == vec("HOLD")
    assert [f.result(0) for f in queued] == [vec(f"queued {i}") for i in range(5)]


def test_close_without_drain_fails_the_queue_and_finishes_the_running_batch() -> None:
    t = Target()
    b = AdaptiveBatcher(t)
    first = hold(b, t)
    queued = [b.submit(f"queued {i}") for i in range(3)]
    closer = threading.Thread(target=b.close, kwargs={"drain": False})
    closer.start()
    for f in queued:  # failed while the running batch still holds the worker
        assert isinstance(f.exception(WAIT), BatcherClosed)
    assert not t.release.is_set()
    t.release.set()
    closer.join(WAIT)
    assert first.result(0) == vec("HOLD")
    assert not any(t.seen(f"queued {i}") for i in range(3))
    assert b.stats().closed == 3


def test_overloaded_is_raised_at_once_when_the_queue_is_full() -> None:
    t = Target()
    with AdaptiveBatcher(t, max_queue=2) as b:
        first = hold(b, t)
        a, c = b.submit("one"), b.submit("two")
        with pytest.raises(Overloaded) as info:
            b.submit("three")
        assert info.value.retry_after > 0
        t.release.set()
        assert [first.result(WAIT), a.result(WAIT), c.result(WAIT)] == [
            vec("HOLD"),
            vec("one"),
            vec("two"),
        ]
        assert b.stats().overloaded == 1
    assert not t.seen("three")


def test_a_deadline_that_cannot_be_met_fails_before_compute() -> None:
    t = Target()
    with AdaptiveBatcher(t) as b:
        first = hold(b, t)
        doomed = b.submit("doomed", deadline_ms=30)
        assert isinstance(doomed.exception(WAIT), DeadlineExceeded)
        assert not t.release.is_set()  # it failed while the worker was still busy
        t.release.set()
        first.result(WAIT)
        assert b.stats().deadline_exceeded == 1
    assert not t.seen("doomed")


def test_an_impossible_deadline_is_refused_at_submit() -> None:
    slow = CostPrior(fixed_ms=100.0, ms_per_ktoken=0.0, ms_per_kpadding=0.0)
    with AdaptiveBatcher(Target(), cost_prior=slow) as b:
        with pytest.raises(DeadlineExceeded):
            b.submit("x", deadline_ms=1)
        assert b.submit("x", deadline_ms=10_000).result(WAIT) == vec("x")


def test_a_failing_request_fails_alone() -> None:
    t = Target()
    t.fail_on = "bad"
    with AdaptiveBatcher(t) as b:
        first = hold(b, t)
        good1, bad, good2 = b.submit("good 1"), b.submit(["x", "bad"]), b.submit("good 2")
        t.release.set()
        first.result(WAIT)
        assert good1.result(WAIT) == vec("good 1")
        assert good2.result(WAIT) == vec("good 2")
        with pytest.raises(ValueError, match="bad"):
            bad.result(WAIT)
        assert b.stats().failed == 1
    assert ["good 1", "x", "bad", "good 2"] in t.calls  # they were batched together first


def test_a_result_is_delivered_after_its_batch_leaves_the_batcher() -> None:
    # A caller that sends more work the moment it has a result (a sliced request's next slice)
    # must not find its finished batch still counted in flight: the scheduler is told first.
    t = Target()
    seen: list[tuple[int, int]] = []
    with AdaptiveBatcher(t, latency_target_ms=5000) as b:
        for i in range(20):
            fut = b.submit(f"text {i}")
            fut.add_done_callback(
                lambda f: seen.append((b.stats().in_flight_batches, b.stats().queue_depth)))
            assert fut.result(WAIT) == vec(f"text {i}")
        t.fail_on = "bad"
        bad = b.submit(["x", "bad"])
        bad.add_done_callback(lambda f: seen.append((b.stats().in_flight_batches, -1)))
        with pytest.raises(ValueError, match="bad"):
            bad.result(WAIT)
    assert seen == [(0, 0)] * 20 + [(0, -1)]

    # The event-loop batcher settles on its own loop, so a waiting caller runs only after the
    # batch is complete; checked so that it stays so.
    async def main() -> list[int]:
        from edgembed.batching import EventLoopBatcher

        flights: list[int] = []
        async with EventLoopBatcher(Target(), latency_target_ms=5000) as eb:
            for i in range(20):
                task = asyncio.ensure_future(eb.embed(f"text {i}"))
                assert await task == vec(f"text {i}")
                flights.append(eb.stats().in_flight_batches)
        return flights

    assert asyncio.run(main()) == [0] * 20


def test_a_target_returning_the_wrong_number_of_vectors_is_an_error() -> None:
    with (
        AdaptiveBatcher(lambda texts: [[0.0]]) as b,
        pytest.raises(BatcherError, match="one vector per text"),
    ):
        b.submit(["a", "b"]).result(WAIT)


def test_bad_calls_are_input_errors() -> None:
    with AdaptiveBatcher(Target()) as b:
        with pytest.raises(InputError, match="priority"):
            b.submit("x", priority="urgent")
        with pytest.raises(InputError, match="deadline_ms"):
            b.submit("x", deadline_ms=-1)
        with pytest.raises(InputError, match="str"):
            b.submit([b"bytes"])  # type: ignore[list-item]
        assert b.submit("x", priority="bulk").result(WAIT) == vec("x")
    with pytest.raises(TypeError):
        AdaptiveBatcher(object())


def test_stats_and_prometheus() -> None:
    with AdaptiveBatcher(Target(), latency_target_ms=5000) as b:
        for f in [b.submit(f"t{i}") for i in range(20)]:
            f.result(WAIT)
        s = b.stats()
        text = b.prometheus_text()
    assert s.submitted == 20 and s.completed == 20 and s.queue_depth == 0
    assert s.batches == sum(s.batch_size_histogram["counts"])
    assert s.latency_ms["p99"] >= s.latency_ms["p50"] > 0.0
    assert s.slo_attainment == 1.0
    assert s.cost_model["observations"] == float(s.batches)
    assert 'edgembed_batcher_requests_total{outcome="ok"} 20.0' in text
    assert 'edgembed_batcher_latency_seconds_bucket{le="+Inf"} 20' in text
    assert s.as_dict()["completed"] == 20


def test_a_closed_batcher_says_so() -> None:
    b = AdaptiveBatcher(Target())
    b.close()
    b.close()  # idempotent
    assert b.closed
    with pytest.raises(BatcherClosed):
        b.submit("x")


def test_without_threads_the_threaded_batcher_names_the_event_loop_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from edgembed import env

    monkeypatch.setattr(env, "HOST", dataclasses.replace(env.HOST, threads=False))
    with pytest.raises(BatcherError, match=r"cannot start threads.*use EventLoopBatcher"):
        AdaptiveBatcher(Target())
