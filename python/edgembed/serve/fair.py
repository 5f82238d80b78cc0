"""Sharing the batcher: large requests in slices, admission by tokens, a fair share per key.

::

    request ─► token counts ─► one slice, interactive: straight to the batcher (admitted by
                               its latency plan)
            ─► otherwise: admission by tokens ─► per slice, when it is sent: its size from the
               cost model now ─► gate: the key's share ─► batcher, bulk lane
            ─► rows of every slice, in the request's order

The adaptive batcher never splits a request: one request of 2,048 long texts would hold the
engine for a minute and every other request would wait behind it (or be refused). Here a
request whose tokens exceed one slice is cut into slices of consecutive texts. A slice holds
what the batcher's cost model, *with its margin* (the p99 of its error), says one batch computes
in half the interactive latency target, at least one text and ``max_length`` tokens: a small
request that arrives as a slice starts waits at most half its target for it and keeps the other
half for its own batch. Each slice is sized when it is sent, from the cost model as it stands
then, so on a fresh server (whose model is still its prior) the first slices teach it the
machine's speed and the later ones follow.

A request of several slices cannot meet the interactive target anyway: its slices run in the
bulk lane, which the batcher serves after interactive requests, one slice per worker at a time
by default (the key's share): the next slice waits at the gate, not in the batcher, so a small
request that arrives meanwhile waits for the rest of the running slice and nothing else — a
queued slice would join its batch — and the batcher's admission plans exactly that wait. Each
text's vector is computed whole, in one batch, and the int8 model is batch-invariant: a sliced
request gets exactly the vectors it would get unsliced, in its order.

The gate keeps one key from taking the batcher for itself. A key may have tokens in the
batcher up to its share: ``capacity_tokens`` (default one slice per worker) divided among the
keys that have work there or waiting; more waits at the gate, and the keys that wait are served
in turn as tokens come back (within a key, its earlier requests first). A key with nothing in
the batcher always passes, so a light user never waits behind a heavy one, and a key with ten
large requests gets the share of a key with one. With API keys off every request shares one
key. A request that would wait is admitted by its tokens: refused at once (429) when the tokens
ahead of it would take longer than the bulk latency target to compute, or pass
``max_waiting_tokens``.

Everything here runs on the server's event loop (no locks).
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DeadlineExceeded, Overloaded

__all__ = ["DEPTH", "FairGate", "Slicer", "next_stop", "plan_slices"]

DEPTH = 1  # slices per worker in the batcher (default share): the one that runs
_RETRY_CAP_S = 1.0


def next_stop(counts: Sequence[int], start: int, budget: int) -> int:
    """End of the slice that begins at text ``start``: consecutive texts of at most ``budget``
    tokens in all (a text over the budget alone is a slice of its own)."""
    total = counts[start]
    stop = start + 1
    while stop < len(counts) and total + counts[stop] <= budget:
        total += counts[stop]
        stop += 1
    return stop


def plan_slices(counts: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges of consecutive texts, each at most ``budget`` tokens, as
    :func:`next_stop` cuts them one after another with the same budget."""
    slices: list[tuple[int, int]] = []
    start = 0
    while start < len(counts):
        stop = next_stop(counts, start, budget)
        slices.append((start, stop))
        start = stop
    return slices


@dataclass
class _Waiter:
    tokens: int
    future: asyncio.Future[None]
    order: int  # within a key, the lowest order goes first (a request's arrival number)


@dataclass
class _Key:
    outstanding: int = 0
    waiting: list[_Waiter] = field(default_factory=list)  # by order, then first come


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

    async def acquire(self, key: str, tokens: int, timeout_s: float | None = None,
                      order: int = 0) -> None:
        """Wait for ``key``'s turn to put ``tokens`` into the batcher; among the key's
        waiters, the lowest ``order`` goes first (then first come)."""
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _Key()
        if not k.waiting and self._may_pass(k, tokens):
            self._take(k, tokens)
            return
        waiter = _Waiter(tokens, asyncio.get_running_loop().create_future(), order)
        bisect.insort_right(k.waiting, waiter, key=lambda w: w.order)
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
                k.waiting.pop(0)
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
        self._ms_per_token = 0.1
        self.max_wait_ms = float(max_wait_ms)
        self._arrivals = itertools.count()

    def slice_tokens(self) -> int:
        """Tokens per slice, from the batcher's cost model now: what one batch computes, by the
        margined prediction (the model's p99), in half the interactive latency target, within
        [max_length, max_batch_tokens] — or ``slice_tokens`` when it was given."""
        cost = self._batcher().cost_model()
        per_token = max(float(cost.get("ms_per_ktoken", 100.0)), 1e-6) / 1000.0
        self._ms_per_token = per_token / self.workers
        if self.fixed_slice:
            self._slice = self.fixed_slice
        else:
            margin = max(float(cost.get("margin", 1.0)), 1.0)
            room = self.latency_target_ms / 2.0 / margin - float(cost.get("fixed_ms", 0.0))
            fits = int(room / per_token) if room > 0 else 0
            self._slice = min(max(fits, self.max_length), self.max_batch_tokens)
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
        if not texts:
            return await self._send(None, texts, counts, priority, deadline_ms, started, True)
        whole = next_stop(counts, 0, self.slice_tokens()) == len(texts)
        if whole and priority == "interactive":
            # What can meet the latency target goes straight to the batcher, whose admission
            # plans its latency from the tokens ahead of it; the gate holds the rest.
            return await self._send(None, texts, counts, priority, deadline_ms, started, True)
        tokens = sum(counts)
        self.gate.admit(tokens, self._ms_per_token, self.max_wait_ms)
        order = next(self._arrivals)
        if whole:
            await self._turn(key, tokens, deadline_ms, started, order)
            return await self._send(key, texts, counts, priority, deadline_ms, started, True)
        return await self._sliced(key, texts, counts, deadline_ms, started, order)

    async def _sliced(
        self,
        key: str,
        texts: list[Any],
        counts: list[int],
        deadline_ms: float | None,
        started: float,
        order: int,
    ) -> Any:
        """A request of several slices, in the bulk lane. Each slice is cut when it is its
        turn to be sent (sized from the cost model then); the slices sent are computed while
        the next one waits at the gate. The first slice that fails fails the request, and the
        others are withdrawn."""
        out: Any = None

        async def run(a: int, b: int) -> None:
            nonlocal out
            got = await self._send(None, texts[a:b], counts[a:b], "bulk", deadline_ms,
                                   started, a == 0)
            if isinstance(got, list):  # one object per text (sparse vectors), not rows
                if out is None:
                    out = [None] * len(texts)
                out[a:b] = got
                return
            part = np.asarray(got, dtype=np.float32)
            if out is None:
                out = np.empty((len(texts), part.shape[1]), dtype=np.float32)
            out[a:b] = part

        sent: list[asyncio.Future[None]] = []
        turn: asyncio.Future[None] | None = None
        taken = 0
        try:
            start = 0
            while start < len(texts):
                stop = next_stop(counts, start, self.slice_tokens())
                taken = sum(counts[start:stop])
                turn = asyncio.ensure_future(
                    self._turn(key, taken, deadline_ms, started, order))
                while not turn.done():  # its turn, unless a slice sent before it fails
                    await asyncio.wait([turn, *(t for t in sent if not t.done())],
                                       return_when=asyncio.FIRST_COMPLETED)
                    _raise_first_failure(sent)
                turn.result()
                # Its turn came: the cost model may have learned meanwhile (the slices before
                # it were computed). A slice never grows past what the gate let through.
                now_stop = next_stop(counts, start, self.slice_tokens())
                if now_stop < stop:
                    freed = sum(counts[now_stop:stop])
                    self.gate.release(key, freed)
                    taken -= freed
                    stop = now_stop
                task = asyncio.ensure_future(run(start, stop))
                # The tokens go back when the slice ends, even if it is withdrawn unstarted.
                task.add_done_callback(functools.partial(self._give_back, key, taken))
                sent.append(task)
                turn = None
                start = stop
            await asyncio.gather(*sent)
        except BaseException:
            if turn is not None:
                if not turn.done():
                    # Cancelled just after the gate let it through, asyncio.wait_for (3.11)
                    # returns instead of raising: the turn then ends as taken, not cancelled.
                    turn.cancel()
                    await asyncio.gather(turn, return_exceptions=True)
                if not turn.cancelled() and turn.exception() is None:
                    self.gate.release(key, taken)  # let through, never sent
            for t in sent:
                t.cancel()
            await asyncio.gather(*sent, return_exceptions=True)
            raise
        return out

    def _give_back(self, key: str, tokens: int, _: object) -> None:
        self.gate.release(key, tokens)

    async def _turn(self, key: str, tokens: int, deadline_ms: float | None, started: float,
                    order: int) -> None:
        """Wait at the gate for ``key``'s turn to send ``tokens``, until the deadline."""
        try:
            await self.gate.acquire(key, tokens, _remaining_s(deadline_ms, started), order)
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"the deadline of {deadline_ms:g} ms passed while the "
                                   "request waited for its turn") from None

    async def _send(
        self,
        key: str | None,
        texts: list[Any],
        counts: list[int],
        priority: str,
        deadline_ms: float | None,
        started: float,
        first: bool,
    ) -> Any:
        """One submission to the batcher; with ``key``, its tokens were taken at the gate and
        are given back when it ends. A later slice of an admitted request that the batcher
        refuses (Overloaded) waits and tries again, until its deadline."""
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
                self.gate.release(key, sum(counts))


def _raise_first_failure(sent: Sequence[asyncio.Future[None]]) -> None:
    for t in sent:
        if t.done() and not t.cancelled():
            exc = t.exception()
            if exc is not None:
                raise exc


def _remaining_s(deadline_ms: float | None, started: float) -> float | None:
    if deadline_ms is None:
        return None
    return max(0.0, deadline_ms / 1000.0 - (time.perf_counter() - started))
