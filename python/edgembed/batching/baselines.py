"""Static batching policies of other servers, for the simulator and the benchmark.

Each class reimplements the *decision rule* of a well-known server, as documented, in the
interface :func:`edgembed.batching.simulator.simulate` drives; none is a faithful copy of that
server. All serve first come, first served, and know nothing of lanes or deadlines.

- :class:`TritonLike` — preferred batch sizes and ``max_queue_delay`` (Triton's dynamic batcher).
- :class:`RayLike` — ``max_batch_size`` and ``batch_wait_timeout_s`` (Ray Serve ``@serve.batch``;
  defaults 10 and 10 ms).
- :class:`TeiLike` — a token budget and no timer: whatever is queued when a worker frees, up to
  ``max_batch_tokens``; 429 above ``max_concurrent_requests`` (text-embeddings-inference).
- :class:`CorkLike` — BentoML's cork dispatcher, simplified: fits ``time = a·n + b`` over recent
  batches, waits while the average wait allows, drops (503) requests that would miss
  ``max_latency``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .policy import Admission, AdmissionKind, Lane
from .scheduler import Dispatch, Outcome, Step

__all__ = ["CorkLike", "RayLike", "StaticScheduler", "TeiLike", "TritonLike"]


@dataclass
class _Item:
    rid: int
    arrival_ms: float
    tokens: int
    n_texts: int
    max_len: int


class StaticScheduler:
    """FIFO queue and workers; subclasses say when and what to dispatch in :meth:`choose`."""

    name = "static"

    def __init__(self, workers: int = 1, max_in_system: int | None = None) -> None:
        self.queue: dict[int, _Item] = {}
        self.workers: list[int | None] = [None] * workers
        self.free_since: list[float] = [0.0] * workers
        self.in_flight: dict[int, tuple[int, list[_Item], float]] = {}
        self.max_in_system = max_in_system
        self.closing = False
        self._next_batch = 0
        self._in_flight_requests = 0

    def admit(
        self,
        now: float,
        rid: int,
        tokens: Sequence[int],
        *,
        lane: Lane = Lane.INTERACTIVE,
        deadline_ms: float | None = None,
    ) -> Admission:
        if self.closing:
            return Admission(AdmissionKind.CLOSED, reason="closed")
        if (
            self.max_in_system is not None
            and len(self.queue) + self._in_flight_requests >= self.max_in_system
        ):
            return Admission(AdmissionKind.OVERLOADED, 1000.0, reason="queue")
        total = 0
        for t in tokens:
            total += t
        self.queue[rid] = _Item(rid, now, total, len(tokens), max(tokens, default=0))
        return Admission(AdmissionKind.ACCEPT)

    def cancel(self, now: float, rid: int) -> bool:
        return self.queue.pop(rid, None) is not None

    def complete(
        self,
        now: float,
        batch_id: int,
        service_ms: float | None,
        not_served: Mapping[int, Outcome] | None = None,
    ) -> None:
        worker, items, started = self.in_flight.pop(batch_id)
        self.workers[worker] = None
        self.free_since[worker] = now
        self._in_flight_requests -= len(items)
        if service_ms is not None:
            self.observe(items, started, service_ms)

    def close(self, now: float, drain: bool) -> tuple[int, ...]:
        self.closing = True
        if drain:
            return ()
        failed = tuple(self.queue)
        self.queue.clear()
        return failed

    @property
    def idle(self) -> bool:
        return not self.queue and not self.in_flight

    def observe(self, items: list[_Item], started_ms: float, service_ms: float) -> None:
        """Hook for policies that learn from completed batches."""

    def choose(self, now: float, worker: int) -> list[_Item] | float | None:
        """Items to dispatch on ``worker`` now, or a time to look again, or None (wait)."""
        raise NotImplementedError

    def shed(self, now: float) -> list[int]:
        """Requests to drop before choosing (reported as expired)."""
        return []

    def step(self, now: float) -> Step:
        dropped = self.shed(now)
        for rid in dropped:
            del self.queue[rid]
        dispatches: list[Dispatch] = []
        wake: float | None = None
        while self.queue:
            free = [i for i, b in enumerate(self.workers) if b is None]
            if not free:
                break
            worker = free[0]
            choice = self.choose(now, worker) if not self.closing else self._all_fifo()
            if choice is None or isinstance(choice, float):
                wake = choice
                break
            batch_id = self._next_batch
            self._next_batch += 1
            tokens = 0
            longest = 0
            n_texts = 0
            for it in choice:
                del self.queue[it.rid]
                tokens += it.tokens
                longest = max(longest, it.max_len)
                n_texts += it.n_texts
            self.workers[worker] = batch_id
            self.in_flight[batch_id] = (worker, choice, now)
            self._in_flight_requests += len(choice)
            dispatches.append(
                Dispatch(
                    batch_id,
                    worker,
                    tuple(it.rid for it in choice),
                    tokens,
                    n_texts * longest - tokens,
                    0.0,
                    self.name,
                )
            )
        return Step(tuple(dropped), tuple(dispatches), wake)

    def _all_fifo(self) -> list[_Item]:
        return list(self.queue.values())[: self.max_batch()]

    def max_batch(self) -> int:
        return len(self.queue)


class TritonLike(StaticScheduler):
    """Preferred batch sizes; waits up to ``max_queue_delay_ms`` for the largest one."""

    def __init__(self, preferred: Sequence[int], max_queue_delay_ms: float, workers: int = 1):
        super().__init__(workers)
        self.preferred = sorted(preferred)
        self.delay = max_queue_delay_ms
        self.name = f"triton{tuple(self.preferred)}@{max_queue_delay_ms:g}ms"

    def max_batch(self) -> int:
        return self.preferred[-1]

    def choose(self, now: float, worker: int) -> list[_Item] | float | None:
        items = list(self.queue.values())
        n = len(items)
        if n >= self.preferred[-1]:
            return items[: self.preferred[-1]]
        oldest = items[0].arrival_ms
        if now < oldest + self.delay:
            return oldest + self.delay
        fits = [p for p in self.preferred if p <= n]
        return items[: fits[-1]] if fits else items


class RayLike(StaticScheduler):
    """Up to ``max_batch_size``; waits ``timeout_ms`` from when gathering started."""

    def __init__(self, max_batch_size: int = 10, timeout_ms: float = 10.0, workers: int = 1):
        super().__init__(workers)
        self.size = max_batch_size
        self.timeout = timeout_ms
        self.name = f"ray(max_batch_size={max_batch_size}, {timeout_ms:g}ms)"

    def max_batch(self) -> int:
        return self.size

    def choose(self, now: float, worker: int) -> list[_Item] | float | None:
        items = list(self.queue.values())
        if len(items) >= self.size:
            return items[: self.size]
        start = max(self.free_since[worker], items[0].arrival_ms)
        if now < start + self.timeout:
            return start + self.timeout
        return items


class TeiLike(StaticScheduler):
    """No timer: what is queued when a worker frees, up to ``max_batch_tokens`` (FIFO)."""

    def __init__(self, max_batch_tokens: int, max_concurrent_requests: int = 512, workers: int = 1):
        super().__init__(workers, max_in_system=max_concurrent_requests)
        self.budget = max_batch_tokens
        self.name = f"tei(max_batch_tokens={max_batch_tokens})"

    def choose(self, now: float, worker: int) -> list[_Item] | float | None:
        out: list[_Item] = []
        tokens = 0
        for it in self.queue.values():
            if out and tokens + it.tokens > self.budget:
                break
            out.append(it)
            tokens += it.tokens
        return out

    def _all_fifo(self) -> list[_Item]:
        out = self.choose(0.0, 0)
        assert isinstance(out, list)
        return out


class CorkLike(StaticScheduler):
    """BentoML-like cork: ``time = a·n + b`` fitted on recent batches, 1 ms ticks."""

    TICK_MS = 1.0
    DECAY = 0.95
    KEPT = 50

    def __init__(self, max_latency_ms: float, max_batch_size: int = 100, workers: int = 1):
        super().__init__(workers)
        self.max_latency = max_latency_ms
        self.size = max_batch_size
        self.a = min(2.0, max_latency_ms * 2.0 / 30.0)
        self.b = min(1.0, max_latency_ms / 30.0)
        self.wait = 10.0
        self.samples: list[tuple[int, float, float]] = []
        self.name = f"cork(max_latency={max_latency_ms:g}ms)"

    def max_batch(self) -> int:
        return self.size

    def observe(self, items: list[_Item], started_ms: float, service_ms: float) -> None:
        self.samples.append((len(items), service_ms, started_ms - items[0].arrival_ms))
        del self.samples[: -self.KEPT]
        self._refit()

    def _refit(self) -> None:
        m = len(self.samples)
        if m < 3:
            return
        sx = sy = sxx = sxy = sw = 0.0
        for n, t, w in self.samples:
            sx += n
            sy += t
            sxx += n * n
            sxy += n * t
            sw += w
        det = m * sxx - sx * sx
        if det > 0:
            a = (m * sxy - sx * sy) / det
            b = (sy - a * sx) / m
            self.a, self.b = max(1e-6, a), max(0.0, b)
        self.wait = sw / m

    def shed(self, now: float) -> list[int]:
        dropped: list[int] = []
        items = list(self.queue.values())
        busy = None not in self.workers
        while items:
            n = len(items)
            w0 = now - items[0].arrival_ms
            if n > 1 and w0 + self.a * n + self.b >= self.max_latency:
                dropped.append(items.pop(0).rid)
                continue
            if busy and n == 1 and w0 >= self.max_latency:
                dropped.append(items.pop(0).rid)
                continue
            break
        return dropped

    def choose(self, now: float, worker: int) -> list[_Item] | float | None:
        items = list(self.queue.values())
        n = len(items)
        wn = now - items[-1].arrival_ms
        if n < self.size and n * (wn + self.TICK_MS + self.a) <= self.wait * self.DECAY:
            return now + self.TICK_MS
        return items[: self.size]
