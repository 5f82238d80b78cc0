"""The fair gate's admission by tokens and the slicer's giving back, with the real gate, the
real slicer and a real adaptive batcher (its target a function that waits to be let go, so
that the tests decide when each slice ends): a request reserves all its tokens at arrival,
its unsent slices included, and gives them back slice by slice; a request alone over the
limit is refused with 413, one that does not fit beside the others with 429; and every way a
request can end (computed, a slice failed, its deadline passed, cancelled, cancelled again
while it cleans up) gives every token back exactly once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from edgembed.batching import AdaptiveBatcher
from edgembed.errors import DeadlineExceeded, LimitExceeded, Overloaded
from edgembed.serve.fair import FairGate, Slicer

SLICE = 100  # tokens per slice, and the gate's capacity: one slice in the batcher at a time


class Held:
    """A batcher target that computes nothing until the test lets a batch go."""

    def __init__(self) -> None:
        self.go = threading.Semaphore(0)
        self.started = threading.Semaphore(0)
        self.batches = 0
        self.fail_on: str | None = None  # a text that makes its batch fail

    def __call__(self, texts: list[str]) -> Any:
        self.batches += 1
        self.started.release()
        if not self.go.acquire(timeout=30):
            raise RuntimeError("the test never let the batch go")
        if self.fail_on in texts:
            raise RuntimeError(f"the engine failed on {self.fail_on!r}")
        return np.ones((len(texts), 4), dtype=np.float32)


@pytest.fixture
def held() -> Iterator[tuple[Held, AdaptiveBatcher]]:
    target = Held()
    batcher = AdaptiveBatcher(target, latency_target_ms=1000.0, max_batch_tokens=4 * SLICE,
                              shed=False)
    yield target, batcher
    for _ in range(64):
        target.go.release()
    batcher.close(drain=False)


def slicer_for(batcher: AdaptiveBatcher, max_queue_tokens: int,
               max_wait_ms: float = float("inf")) -> Slicer:
    return Slicer(lambda: batcher, max_length=SLICE, max_batch_tokens=4 * SLICE,
                  latency_target_ms=1000.0, max_wait_ms=max_wait_ms,
                  max_waiting_tokens=max_queue_tokens, capacity_tokens=SLICE,
                  slice_tokens=SLICE)


def texts(tag: str, n: int) -> tuple[list[str], list[int]]:
    return [f"{tag} {i}" for i in range(n)], [SLICE] * n


def embed(slicer: Slicer, key: str, items: tuple[list[str], list[int]],
          priority: str = "bulk") -> asyncio.Task[Any]:
    return asyncio.ensure_future(slicer.embed(key, items[0], items[1], priority=priority,
                                              deadline_ms=None, started=0.0))


async def started(target: Held) -> None:
    """Until a batch has reached the target (it runs in the batcher's worker thread)."""
    assert await asyncio.to_thread(target.started.acquire, True, 30)


async def settle(gate: FairGate) -> None:
    """Until the callbacks of what just ended have run, then: the gate holds nothing."""
    for _ in range(500):
        if gate.total == gate.waiting_tokens == gate.reserved == 0:
            break
        await asyncio.sleep(0.01)
    assert (gate.total, gate.waiting_tokens, gate.active_keys()) == (0, 0, 0)
    assert gate.reserved == 0 and not gate._reserved


# ------------------------------------------------ the gate alone ------------------------------


def test_a_request_reserves_all_its_tokens_and_gives_them_back_once() -> None:
    gate = FairGate(capacity_tokens=SLICE, max_waiting_tokens=1000)
    a = gate.admit("a", 800, 0.0, float("inf"))
    assert gate.reserved == 800
    with pytest.raises(Overloaded, match=r"800 tokens of admitted.*--max-queue-tokens.*retry"):
        gate.admit("b", 300, 0.0, float("inf"))
    b = gate.admit("b", 200, 0.0, float("inf"))  # fits exactly
    a.release(SLICE)
    a.release(SLICE)
    assert gate.reserved == 800
    a.close()
    a.close()  # a second close, and a release after it, give nothing back
    a.release(SLICE)
    assert gate.reserved == 200
    with b:
        b.release(50)
    assert gate.reserved == 0 and not gate._reserved


def test_a_request_alone_over_the_limit_is_refused_with_what_to_do() -> None:
    gate = FairGate(capacity_tokens=SLICE, max_waiting_tokens=1000)
    with pytest.raises(LimitExceeded, match=r"1,001 tokens.*--max-queue-tokens.*split it into "
                                            r"requests of at most 1,000 tokens"):
        gate.admit("a", 1001, 0.0, float("inf"))  # even on an idle gate: waiting cannot help
    assert gate.reserved == 0


def test_a_one_slice_interactive_request_over_the_limit_is_refused_too(
        held: tuple[Held, AdaptiveBatcher]) -> None:
    # An interactive request of one slice goes straight to the batcher, past the gate's
    # reservations, but the limit on a request's tokens is the server's: 413 in either lane.
    target, batcher = held

    async def main() -> None:
        slicer = slicer_for(batcher, max_queue_tokens=SLICE // 2)
        over = ["one long text"], [SLICE // 2 + 1]  # one slice, over the limit
        for priority in ("interactive", "bulk"):
            with pytest.raises(LimitExceeded, match=r"51 tokens.*--max-queue-tokens.*split it "
                                                    r"into requests of at most 50 tokens"):
                await embed(slicer, "a", over, priority)
        assert target.batches == 0 and slicer.gate.reserved == 0
        fits = embed(slicer, "a", (["a short text"], [SLICE // 2]), "interactive")
        await started(target)
        target.go.release()
        assert (await fits).shape == (1, 4)
        await settle(slicer.gate)

    asyncio.run(main())


def test_the_bulk_target_counts_unsent_tokens_by_the_fair_shares() -> None:
    # 0.1 ms a token, a 500 ms target: 5,000 tokens ahead at most.
    gate = FairGate(capacity_tokens=SLICE, max_waiting_tokens=10**9)
    heavy = gate.admit("heavy", 20_000, 0.1, 500.0)  # nothing ahead of it: admitted
    # The heavy key's next request waits for all of its first one, sent or not.
    with pytest.raises(Overloaded, match=r"20,000 tokens ahead.*bulk latency target"):
        gate.admit("heavy", 100, 0.1, 500.0)
    # Another key is served in turn with it: ahead of its 1,000 tokens, 1,000 of the heavy's.
    light = gate.admit("light", 1000, 0.1, 500.0)
    with pytest.raises(Overloaded, match=r"6,000 tokens ahead"):
        gate.admit("third", 5000, 0.1, 500.0)  # 5,000 of the heavy's and the light's 1,000
    heavy.release(16_000)
    gate.admit("heavy", 100, 0.1, 500.0).close()  # 4,000 left ahead of it
    heavy.close()
    light.close()
    assert gate.reserved == 0


# ------------------------------------------- the slicer and the batcher ----------------------


def test_unsent_slices_count_against_the_queue_limit(
        held: tuple[Held, AdaptiveBatcher]) -> None:
    target, batcher = held

    async def main() -> None:
        slicer = slicer_for(batcher, max_queue_tokens=1500)
        gate = slicer.gate
        first = embed(slicer, "a", texts("first", 10))  # ten slices, 1,000 tokens
        await started(target)
        # One slice is in the batcher and the next waits at the gate: only the reservation
        # shows the eight slices not yet cut.
        assert (gate.total, gate.waiting_tokens, gate.reserved) == (SLICE, SLICE, 1000)
        refused = embed(slicer, "b", texts("second", 6))  # 1,000 + 600: over the limit
        await asyncio.sleep(0.05)
        assert refused.done(), "admitted: the slices not yet sent were not counted"
        with pytest.raises(Overloaded, match="--max-queue-tokens"):
            refused.result()
        # Given back slice by slice as each is computed.
        for done in range(1, 6):
            target.go.release()
            await started(target)
            for _ in range(500):
                if gate.reserved == 1000 - done * SLICE:
                    break
                await asyncio.sleep(0.01)
            assert gate.reserved == 1000 - done * SLICE
        second = embed(slicer, "b", texts("second", 6))  # 500 + 600 fit now
        await asyncio.sleep(0.05)
        assert gate.reserved == 1100
        for _ in range(11):
            target.go.release()
        assert (await first).shape == (10, 4) and (await second).shape == (6, 4)
        await settle(gate)

    asyncio.run(main())


def test_a_failed_or_cancelled_request_gives_back_the_rest(
        held: tuple[Held, AdaptiveBatcher]) -> None:
    target, batcher = held

    async def main() -> None:
        slicer = slicer_for(batcher, max_queue_tokens=10_000)
        gate = slicer.gate
        # Cancelled (its client went away) with a slice in the batcher and nine unsent.
        task = embed(slicer, "a", texts("gone", 10))
        await started(target)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        target.go.release()
        await settle(gate)
        # A deadline that passes while a later slice waits for its turn, behind another
        # request of the same key that holds the gate.
        blocker = embed(slicer, "a", texts("blocker", 1))
        await started(target)
        late = asyncio.ensure_future(slicer.embed("a", *texts("late", 5), priority="bulk",
                                                  deadline_ms=100.0,
                                                  started=time.perf_counter()))
        with pytest.raises(DeadlineExceeded):
            await late
        target.go.release()
        await blocker
        await settle(gate)
        # A slice that fails (the engine raised) fails the request; the slices after it are
        # never sent, and the next request waits behind nothing.
        target.fail_on = "broken 2"
        broken = embed(slicer, "a", texts("broken", 6))
        for _ in range(3):
            target.go.release()
        with pytest.raises(Exception, match="failed on 'broken 2'"):
            await broken
        await settle(gate)
        assert target.batches == 1 + 1 + 3  # gone, blocker, broken 0..2

    asyncio.run(main())


@pytest.mark.parametrize("steps", range(8))
def test_a_second_cancellation_while_cleaning_up_leaks_nothing(
        held: tuple[Held, AdaptiveBatcher], steps: int) -> None:
    # The request's first slice waits at the gate behind tokens of its key. In one step the
    # gate lets the slice through and the request is cancelled (its client went away); the
    # request is cancelled again ``steps`` loop iterations later (the server shutting down),
    # while it cleans up. Some interleaving ends its turn as taken after the first
    # cancellation: those tokens must still come back, once.
    _, batcher = held

    async def main() -> None:
        slicer = slicer_for(batcher, max_queue_tokens=10_000)
        gate = slicer.gate
        await gate.acquire("a", SLICE)  # another request of the key, in the batcher
        # With a deadline, the turn's wait ends by asyncio.wait_for, which on Python 3.11
        # returns, not raises, when cancelled just as the gate let it through.
        task = asyncio.ensure_future(slicer.embed("a", *texts("twice", 5), priority="bulk",
                                                  deadline_ms=60_000.0,
                                                  started=time.perf_counter()))
        for _ in range(20):
            await asyncio.sleep(0)
        assert gate.waiting_tokens == SLICE  # its first slice waits for its turn
        gate.release("a", SLICE)  # the other request ends: the slice's turn comes...
        task.cancel()  # ...just as its client goes away
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await settle(gate)

    asyncio.run(main())
