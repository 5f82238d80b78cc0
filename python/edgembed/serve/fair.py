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
key. A request that passes the gate is admitted by its tokens, all of them: it reserves its
whole token count at arrival and gives it back slice by slice as its slices are computed (the
rest at once when it fails, is cancelled or its client goes away). It is refused at once (429)
when the reservations with its own would pass ``max_waiting_tokens``, or when the tokens ahead
of it (its key's earlier requests, and the other keys' turns while it runs) would take longer
than the bulk latency target to compute; a request that alone is over ``max_waiting_tokens`` is
refused with 413, since waiting would not help.

Everything here runs on the server's event loop (no locks).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DeadlineExceeded, LimitExceeded, Overloaded

__all__ = ["DEPTH", "FairGate", "Reservation", "Slicer", "next_stop", "plan_slices"]

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


class Reservation:
    """One admitted request's tokens, counted against the gate's limits until they are given
    back: in parts with :meth:`release` (a slice computed), the rest with :meth:`close` or at
    the end of a ``with`` block. It never gives back more than it holds, so releasing twice,
    or after closing, changes nothing."""

    __slots__ = ("_gate", "held", "key")

    def __init__(self, gate: FairGate, key: str, tokens: int) -> None:
        self._gate = gate
        self.key = key
        self.held = int(tokens)

    def release(self, tokens: int) -> None:
        n = min(int(tokens), self.held)
        if n > 0:
            self.held -= n
            self._gate._unreserve(self.key, n)

    def close(self) -> None:
        self.release(self.held)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class FairGate:
    """Per-key shares of the tokens in the batcher (see the module docstring)."""

    def __init__(self, capacity_tokens: int, max_waiting_tokens: int) -> None:
        self.capacity = int(capacity_tokens)
        self.max_waiting = int(max_waiting_tokens)
        self.total = 0  # tokens passed and not yet released
        self.waiting_tokens = 0
        self.reserved = 0  # tokens of admitted requests not yet computed (Reservation)
        self._reserved: dict[str, int] = {}  # the same, per key
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

    def check_size(self, tokens: int) -> None:
        """Refuse with LimitExceeded (413) a request of more tokens than ``max_waiting_tokens``:
        no wait would let it in, so the message says how to split it."""
        if tokens > self.max_waiting:
            raise LimitExceeded(
                f"this request has {tokens:,} tokens, over the limit of {self.max_waiting:,} "
                "tokens the server admits at once (--max-queue-tokens); split it into "
                f"requests of at most {self.max_waiting:,} tokens")

    def admit(self, key: str, tokens: int, ms_per_token: float,
              max_wait_ms: float) -> Reservation:
        """Admit a request of ``tokens`` for ``key`` and reserve them, or refuse it at once.

        Refused with Overloaded (429): when the reservations of the requests admitted before it,
        with its own, would pass ``max_waiting_tokens``, or when the tokens ahead of it would
        take longer than ``max_wait_ms`` to compute at ``ms_per_token``. Ahead of it are its
        key's reservations (within a key, earlier requests first) and, of each other key's, as
        many as its own tokens (the keys are served in turn while it runs). Refused with
        LimitExceeded (413) when it alone is over ``max_waiting_tokens``. A request that fits
        is always admitted when nothing is reserved: under overload a request is answered at
        once, never by a wait.
        """
        self.check_size(tokens)
        if self.reserved:
            ahead = self._reserved.get(key, 0) + sum(
                min(n, tokens) for k, n in self._reserved.items() if k != key)
            wait_ms = ahead * ms_per_token
            over = self.reserved + tokens - self.max_waiting
            why = None
            if over > 0:
                why = (f"the server holds {self.reserved:,} tokens of admitted requests; with "
                       f"this request's {tokens:,} they would pass its limit of "
                       f"{self.max_waiting:,} (--max-queue-tokens)")
                retry = over * ms_per_token / 1000.0
            elif wait_ms > max_wait_ms:
                why = (f"the {ahead:,} tokens ahead of this request take about "
                       f"{wait_ms:,.0f} ms, over the bulk latency target of {max_wait_ms:g} ms")
                retry = (wait_ms - max_wait_ms) / 1000.0
            if why is not None:
                retry = min(max(1.0, retry), 60.0)
                raise Overloaded(f"{why}; retry after {retry:.1f} s", retry_after=retry)
        self.reserved += tokens
        self._reserved[key] = self._reserved.get(key, 0) + tokens
        return Reservation(self, key, tokens)

    def _unreserve(self, key: str, tokens: int) -> None:
        self.reserved -= tokens
        left = self._reserved.get(key, 0) - tokens
        if left > 0:
            self._reserved[key] = left
        else:
            self._reserved.pop(key, None)

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
        tokens = sum(counts)
        # Over the limit alone is 413 in either lane, the interactive one included: the
        # limit is the server's, whichever way a request reaches the batcher.
        self.gate.check_size(tokens)
        whole = next_stop(counts, 0, self.slice_tokens()) == len(texts)
        if whole and priority == "interactive":
            # What can meet the latency target goes straight to the batcher, whose admission
            # plans its latency from the tokens ahead of it; the gate holds the rest.
            return await self._send(None, texts, counts, priority, deadline_ms, started, True)
        # Reserved whole at arrival, so a sliced request's unsent slices count against the
        # limits too; given back as its slices end, and the rest when it ends, however.
        with self.gate.admit(key, tokens, self._ms_per_token, self.max_wait_ms) as reserved:
            order = next(self._arrivals)
            if whole:
                await self._turn(key, tokens, deadline_ms, started, order)
                return await self._send(key, texts, counts, priority, deadline_ms, started,
                                        True)
            return await self._sliced(key, texts, counts, deadline_ms, started, order,
                                      reserved)

    async def _sliced(
        self,
        key: str,
        texts: list[Any],
        counts: list[int],
        deadline_ms: float | None,
        started: float,
        order: int,
        reserved: Reservation,
    ) -> Any:
        """A request of several slices, in the bulk lane. Each slice is cut when it is its
        turn to be sent (sized from the cost model then); the slices sent are computed while
        the next one waits at the gate. The first slice that fails fails the request, and the
        others are withdrawn. Each slice's tokens go back to the gate, and out of
        ``reserved``, once, when it ends; those of a turn the gate gave but that was never
        sent, when the turn ends, whatever cancelled it and however often."""
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
        hold: _Hold | None = None
        try:
            start = 0
            while start < len(texts):
                stop = next_stop(counts, start, self.slice_tokens())
                hold = _Hold(self.gate, key, sum(counts[start:stop]), reserved)
                turn = asyncio.ensure_future(
                    self._turn(key, hold.tokens, deadline_ms, started, order))
                turn.add_done_callback(hold.turn_ended)
                while not turn.done():  # its turn, unless a slice sent before it fails
                    await asyncio.wait([turn, *(t for t in sent if not t.done())],
                                       return_when=asyncio.FIRST_COMPLETED)
                    _raise_first_failure(sent)
                turn.result()
                # Its turn came: the cost model may have learned meanwhile (the slices before
                # it were computed). A slice never grows past what the gate let through.
                now_stop = next_stop(counts, start, self.slice_tokens())
                if now_stop < stop:
                    hold.shrink(sum(counts[now_stop:stop]))
                    stop = now_stop
                task = asyncio.ensure_future(run(start, stop))
                hold.hand_over(task)  # its tokens go back when it ends, even withdrawn unstarted
                sent.append(task)
                turn = hold = None
                start = stop
            await asyncio.gather(*sent)
        except BaseException:
            # No await before every token has an owner that gives it back: a cancellation
            # that arrives while this cleans up (a client gone, then the server shutting down)
            # cannot skip it.
            if turn is not None and hold is not None:
                turn.cancel()  # a turn that ends as taken anyway gives its tokens back
                hold.abandon(turn)
            for t in sent:
                t.cancel()
            await asyncio.gather(*sent, *(t for t in (turn,) if t is not None),
                                 return_exceptions=True)
            raise
        return out

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


class _Hold:
    """The tokens one slice takes at the gate, given back exactly once: by the slice's task
    when it ends, or, when its turn is abandoned before the slice is sent, by the turn when it
    ends taken (asyncio.wait_for of Python 3.11 may return when cancelled just as the gate let
    it through) or at once when it had already been taken."""

    __slots__ = ("_abandoned", "_gate", "_key", "_released", "_reserved", "_taken", "tokens")

    def __init__(self, gate: FairGate, key: str, tokens: int, reserved: Reservation) -> None:
        self._gate = gate
        self._key = key
        self.tokens = tokens
        self._reserved = reserved
        self._taken = self._abandoned = self._released = False

    def turn_ended(self, turn: asyncio.Future[None]) -> None:
        if not turn.cancelled() and turn.exception() is None:
            self._taken = True  # a turn that failed or was cancelled gave back what it took
        if self._abandoned:
            self._release()

    def shrink(self, tokens: int) -> None:
        """The slice is cut shorter than its turn: ``tokens`` go back to the gate now (they
        stay reserved: a later slice sends them)."""
        self._gate.release(self._key, tokens)
        self.tokens -= tokens

    def hand_over(self, task: asyncio.Future[None]) -> None:
        self._taken = True
        task.add_done_callback(lambda _: self._release())

    def abandon(self, turn: asyncio.Future[None]) -> None:
        self._abandoned = True
        if turn.done():
            self.turn_ended(turn)  # or later, by its callback; it gives back once either way

    def _release(self) -> None:
        if self._taken and not self._released:
            self._released = True
            self._gate.release(self._key, self.tokens)
            self._reserved.release(self.tokens)


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
