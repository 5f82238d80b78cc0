"""Sharing the batcher: large requests in slices, admission by tokens, a fair share per key.

::

    request ─► token counts ─► slices: consecutive texts, at most ``slice_tokens`` each
            ─► one slice, interactive: straight to the batcher (admitted by its latency plan)
            ─► otherwise: admission by tokens ─► gate: the key's share ─► batcher, bulk lane
            ─► rows of every slice, in the request's order

The adaptive batcher never splits a request: one request of 2,048 long texts would hold the
engine for a minute and every other request would wait behind it (or be refused). Here a
request whose tokens exceed one slice — what the batcher's cost model says one batch computes
in half the latency target — is cut into slices of consecutive texts. A request of several
slices cannot meet the interactive target anyway: its slices run in the bulk lane, which the
batcher serves after interactive requests, and only a few are in the batcher at a time (the
key's share), so a small request that arrives meanwhile waits for the slice being computed,
not for the whole request. Each text's vector is computed whole, in one batch, and the int8
model is batch-invariant: a sliced request gets exactly the vectors it would get unsliced, in
its order.

The gate keeps one key from taking the batcher for itself. A key may have tokens in the
batcher up to its share: ``capacity_tokens`` (default two slices per worker, one computed and
one queued) divided among the keys that have work there or waiting; more waits at the gate,
and the keys that wait are served in turn as tokens come back. A key with nothing in the
batcher always passes, so a light user never waits behind a heavy one, and a key with ten
large requests gets the share of a key with one. With API keys off every request shares one
key. A request that would wait is admitted by its tokens: refused at once (429) when the
tokens ahead of it would take longer than the bulk latency target to compute, or pass
``max_waiting_tokens``.

Everything here runs on the server's event loop (no locks).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DeadlineExceeded, Overloaded

__all__ = ["DEPTH", "FairGate", "Slicer", "plan_slices"]

DEPTH = 2  # slices per worker in the batcher (default share): one runs, the next is queued
_SLICE_REFRESH_S = 1.0
_RETRY_CAP_S = 1.0


def plan_slices(counts: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges of consecutive texts, each at most ``budget`` tokens (a text
    over the budget alone is a slice of its own)."""
    slices: list[tuple[int, int]] = []
    start = total = 0
    for i, n in enumerate(counts):
        if i > start and total + n > budget:
            slices.append((start, i))
            start, total = i, 0
        total += n
    if start < len(counts):
        slices.append((start, len(counts)))
    return slices


@dataclass
class _Waiter:
    tokens: int
    future: asyncio.Future[None]


@dataclass
class _Key:
    outstanding: int = 0
    waiting: deque[_Waiter] = field(default_factory=deque)


class FairGate:
    """Per-key shares of the tokens in the batcher (see the module docstring)."""

    def __init__(self, capacity_tokens: int, max_waiting_tokens: int) -> None:
        self.capacity = int(capacity_tokens)
        self.max_waiting = int(max_waiting_tokens)
        self.total = 0  # tokens passed and not yet released
        self.waiting_tokens = 0
        self._keys: OrderedDict[str, _Key] = OrderedDict()  # order: whose turn comes next

    def active_keys(self) -> int:
        return len(self._keys)

    def _share(self) -> float:
        return self.capacity / max(1, len(self._keys))

    def _may_pass(self, k: _Key, tokens: int) -> bool:
        if k.outstanding == 0:
            return True
        return (k.outstanding + tokens <= self._share()
                and self.total + tokens <= self.capacity)

    def admit(self, tokens: int, ms_per_token: float, max_wait_ms: float) -> None:
        """Admit a request by tokens, or refuse it at once (Overloaded).

        Refused: when the tokens waiting at the gate would pass ``max_waiting_tokens``, or
        when the tokens ahead of it (waiting, and in the batcher) would take longer than
        ``max_wait_ms`` to compute at ``ms_per_token``. A request is always admitted when
        nothing waits: under overload a request is answered 429 at once, never by a wait.
        """
        if not self.waiting_tokens:
            return
        wait_ms = (self.waiting_tokens + self.total) * ms_per_token
        if self.waiting_tokens + tokens > self.max_waiting:
            why = (f"the server has {self.waiting_tokens:,} tokens waiting, over its limit "
                   f"of {self.max_waiting:,} (--max-queue-tokens)")
        elif wait_ms > max_wait_ms:
            why = (f"the {self.waiting_tokens + self.total:,} tokens ahead of this request "
                   f"take about {wait_ms:,.0f} ms, over the bulk latency target of "
                   f"{max_wait_ms:g} ms")
        else:
            return
        retry = min(max(1.0, (wait_ms - max_wait_ms) / 1000.0), 60.0)
        raise Overloaded(f"{why}; retry after {retry:.1f} s", retry_after=retry)

    async def acquire(self, key: str, tokens: int, timeout_s: float | None = None) -> None:
        """Wait for ``key``'s turn to put ``tokens`` into the batcher."""
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _Key()
        if not k.waiting and self._may_pass(k, tokens):
            self._take(k, tokens)
            return
        waiter = _Waiter(tokens, asyncio.get_running_loop().create_future())
        k.waiting.append(waiter)
        self.waiting_tokens += tokens
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout_s)
        except BaseException:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(key, tokens)  # it was let through just as we gave up
            else:
                waiter.future.cancel()
                k.waiting.remove(waiter)
                self.waiting_tokens -= tokens
                self._forget(key, k)
                self._wake()
            raise

    def release(self, key: str, tokens: int) -> None:
        """``tokens`` of ``key`` left the batcher (computed, failed or withdrawn)."""
        k = self._keys.get(key)
        if k is None:
            return
        k.outstanding -= tokens
        self.total -= tokens
        self._forget(key, k)
        self._wake()

    def _take(self, k: _Key, tokens: int) -> None:
        k.outstanding += tokens
        self.total += tokens

    def _forget(self, key: str, k: _Key) -> None:
        if k.outstanding <= 0 and not k.waiting:
            self._keys.pop(key, None)

    def _wake(self) -> None:
        """Let waiters through, one per key in turn, while they fit."""
        progress = True
        while progress:
            progress = False
            for key in list(self._keys):
                k = self._keys.get(key)
                if k is None or not k.waiting:
                    continue
                head = k.waiting[0]
                if head.future.cancelled() or not self._may_pass(k, head.tokens):
                    continue
                k.waiting.popleft()
                self.waiting_tokens -= head.tokens
                self._take(k, head.tokens)
                head.future.set_result(None)
                self._keys.move_to_end(key)  # its turn is over
                progress = True


class Slicer:
    """Runs one request's texts through the gate and the batcher, in slices when large."""

    def __init__(
        self,
        batcher: Callable[[], Any],
        *,
        max_length: int,
        max_batch_tokens: int,
        latency_target_ms: float,
        max_wait_ms: float,
        max_waiting_tokens: int,
        capacity_tokens: int | None = None,
        slice_tokens: int | None = None,
        workers: int = 1,
    ) -> None:
        self._batcher = batcher
        self.max_length = int(max_length)
        self.max_batch_tokens = int(max_batch_tokens)
        self.latency_target_ms = float(latency_target_ms)
        self.fixed_slice = slice_tokens
        self.fixed_capacity = capacity_tokens
        self.workers = int(workers)
        self.gate = FairGate(capacity_tokens or DEPTH * self.max_length * self.workers,
                             max_waiting_tokens)
        self._slice = slice_tokens or self.max_length
        self._slice_at = -math.inf
        self._ms_per_token = 0.1
        self.max_wait_ms = float(max_wait_ms)

    def slice_tokens(self) -> int:
        """Tokens per slice: what the batcher's cost model says one batch computes in half
        the interactive latency target, within [max_length, max_batch_tokens]."""
        now = time.monotonic()
        if now - self._slice_at > _SLICE_REFRESH_S:
            self._slice_at = now
            cost = self._batcher().stats().cost_model
            per_token = max(float(cost.get("ms_per_ktoken", 100.0)), 1e-6) / 1000.0
            self._ms_per_token = per_token / self.workers
            room = self.latency_target_ms / 2.0 - float(cost.get("fixed_ms", 0.0))
            fits = int(room / per_token) if room > 0 else 0
            self._slice = self.fixed_slice or min(max(fits, self.max_length),
                                                  self.max_batch_tokens)
            if not self.fixed_capacity:
                self.gate.capacity = DEPTH * self._slice * self.workers
        return self._slice

    async def embed(
        self,
        key: str,
        texts: list[Any],
        counts: list[int],
        *,
        priority: str,
        deadline_ms: float | None,
        started: float,
    ) -> Any:
        """The raw vectors of ``texts`` (one row each, in order; a target that returns one
        object per text, such as sparse vectors, gives a list). ``texts`` may be
        (query, document) pairs for a cross-encoder. ``deadline_ms`` counts from ``started``
        (``time.perf_counter``)."""
        slices = plan_slices(counts, self.slice_tokens())
        if len(slices) == 1 and priority == "interactive":
            # What can meet the latency target goes straight to the batcher, whose admission
            # plans its latency from the tokens ahead of it; the gate holds the rest.
            return await self._one(None, texts, counts, priority, deadline_ms, started, True)
        self.gate.admit(sum(counts), self._ms_per_token, self.max_wait_ms)
        lane = "bulk" if len(slices) > 1 else priority
        if len(slices) == 1:
            return await self._one(key, texts, counts, lane, deadline_ms, started, True)
        out: Any = None

        async def run(index: int, a: int, b: int) -> None:
            nonlocal out
            got = await self._one(key, texts[a:b], counts[a:b], lane, deadline_ms, started,
                                  index == 0)
            if isinstance(got, list):  # one object per text (sparse vectors), not rows
                if out is None:
                    out = [None] * len(texts)
                out[a:b] = got
                return
            part = np.asarray(got, dtype=np.float32)
            if out is None:
                out = np.empty((len(texts), part.shape[1]), dtype=np.float32)
            out[a:b] = part

        # Every slice waits at the gate in order; the key's share decides how many are in the
        # batcher at once.
        tasks = [asyncio.ensure_future(run(i, a, b)) for i, (a, b) in enumerate(slices)]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return out

    async def _one(
        self,
        key: str | None,
        texts: list[Any],
        counts: list[int],
        priority: str,
        deadline_ms: float | None,
        started: float,
        first: bool,
    ) -> Any:
        """One submission, through the gate unless ``key`` is None. A later slice of an
        admitted request that the batcher refuses (Overloaded) waits and tries again, until
        its deadline."""
        tokens = sum(counts)
        if key is not None:
            try:
                await self.gate.acquire(key, tokens, _remaining_s(deadline_ms, started))
            except asyncio.TimeoutError:
                raise DeadlineExceeded(f"the deadline of {deadline_ms:g} ms passed while the "
                                       "request waited for its turn") from None
        try:
            delay = 0.05
            while True:
                remaining = None
                if deadline_ms is not None:
                    remaining = deadline_ms - (time.perf_counter() - started) * 1000.0
                    if remaining <= 0:
                        raise DeadlineExceeded(f"the deadline of {deadline_ms:g} ms passed "
                                               "before the request was computed")
                try:
                    fut = self._batcher().submit(texts, priority=priority,
                                                 deadline_ms=remaining, tokens=counts)
                    break
                except Overloaded as exc:
                    if first:
                        raise
                    await asyncio.sleep(min(max(exc.retry_after, delay), _RETRY_CAP_S))
                    delay = min(delay * 2.0, _RETRY_CAP_S)
            try:
                return await asyncio.wrap_future(fut)
            except asyncio.CancelledError:
                fut.cancel()
                raise
        finally:
            if key is not None:
                self.gate.release(key, tokens)


def _remaining_s(deadline_ms: float | None, started: float) -> float | None:
    if deadline_ms is None:
        return None
    return max(0.0, deadline_ms / 1000.0 - (time.perf_counter() - started))
