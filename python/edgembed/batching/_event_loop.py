"""The adaptive batcher on an asyncio event loop, for hosts without threads (Pyodide).

Pyodide runs Python on the JavaScript engine's one thread: ``threading.Thread.start`` fails
there, so ``AdaptiveBatcher`` cannot start its scheduler thread and workers. This variant runs
the same :class:`~edgembed.batching.scheduler.Scheduler` — hence the same decisions as the
threaded batcher and the simulator — from one task on the running loop (Pyodide's WebLoop, or
any asyncio loop): requests queue while the loop serves other coroutines, and when the policy
dispatches a batch the target runs on the loop itself, one batch at a time (one worker). The
wasm engine is synchronous and single-threaded anyway.

::

    batcher = AdaptiveBatcher(embedder, latency_target_ms=50)   # this class, in Pyodide
    vectors = await asyncio.gather(*(batcher.embed(t) for t in texts))
    await batcher.aclose()

``submit`` returns an ``asyncio.Future`` (not a ``concurrent.futures.Future``) and must be
called with the loop available; ``close`` does not wait (it cannot block the loop it runs on):
``await aclose()``, or ``async with``, waits for the queued work.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import BatcherClosed, BatcherError, DeadlineExceeded
from .batcher import AdaptiveBatcher, _Pending, _settle
from .cost_model import CostPrior
from .policy import Lane
from .scheduler import Dispatch, Outcome

__all__ = ["EventLoopBatcher"]


def _loop() -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # Pyodide's WebLoop is the current loop even outside a coroutine
        return asyncio.get_event_loop()


class EventLoopBatcher(AdaptiveBatcher):
    """:class:`AdaptiveBatcher` driven by the event loop instead of threads (see the module
    docstring). Same arguments; ``workers`` is always 1."""

    def __init__(
        self,
        target: Any,
        *,
        latency_target_ms: float = 50.0,
        percentile: float = 0.99,
        max_batch_tokens: int = 4096,
        max_queue: int = 1024,
        workers: int = 1,
        bulk_latency_target_ms: float | None = None,
        cost_prior: CostPrior | Mapping[str, Any] | None = None,
        shed: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        del workers  # one batch at a time: the loop has one thread
        self._setup(target, latency_target_ms, percentile, max_batch_tokens, max_queue, 1,
                    bulk_latency_target_ms, cost_prior, shed, clock)
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None

    # -- public API ----------------------------------------------------------------------------

    def submit(  # type: ignore[override]
        self,
        texts: str | Sequence[str],
        *,
        priority: str | Lane = "interactive",
        deadline_ms: float | None = None,
    ) -> asyncio.Future[Any]:
        """Queue a request; the future resolves to its vector (for a ``str``) or vectors.

        Raises at once what :meth:`AdaptiveBatcher.submit` raises. Cancelling the future
        withdraws the request if it has not started.
        """
        single, items, lane = self._check_request(texts, priority, deadline_ms)
        loop = _loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if not items:
            fut.set_result([])
            return fut
        tokens = self._token_counts(items)
        if self._closed:
            raise BatcherClosed("the batcher is closed; create a new AdaptiveBatcher")
        rid = next(self._ids)
        adm = self._sched.admit(self._now(), rid, tokens, lane=lane, deadline_ms=deadline_ms)
        self._raise_refusal(adm, lane, deadline_ms)
        self._pending[rid] = _Pending(rid, items, single, fut)  # type: ignore[arg-type]
        fut.add_done_callback(functools.partial(self._on_cancel, rid))
        if self._task is None:
            self._task = loop.create_task(self._serve_loop())
        self._notify()
        return fut

    async def embed(
        self,
        texts: str | Sequence[str],
        *,
        priority: str | Lane = "interactive",
        deadline_ms: float | None = None,
    ) -> Any:
        """Awaitable :meth:`submit`; cancelling the awaiting task withdraws a waiting request."""
        return await self.submit(texts, priority=priority, deadline_ms=deadline_ms)

    def close(self, drain: bool = True, timeout: float | None = None) -> None:
        """Stop taking requests; ``drain`` computes what is queued (on the loop, after this
        returns), else fails it with :class:`BatcherClosed`. Does not wait: see ``aclose``."""
        del timeout
        if self._closed:
            return
        self._closed = True
        for rid in self._sched.close(self._now(), drain):
            p = self._pending.pop(rid)
            _settle(p.future, error=BatcherClosed("the batcher was closed without draining"))
        self._notify()

    async def aclose(self, drain: bool = True) -> None:
        """``close``, then wait until every queued request is resolved."""
        self.close(drain)
        if self._task is not None:
            await self._task

    # -- machinery -----------------------------------------------------------------------------

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _on_cancel(self, rid: int, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() and self._sched.cancel(self._now(), rid):
            self._pending.pop(rid, None)
            self._notify()

    async def _serve_loop(self) -> None:
        loop = _loop()
        try:
            while True:
                now = self._now()
                step = self._sched.step(now)
                for rid in step.expired:
                    _settle(
                        self._pending.pop(rid).future,
                        error=DeadlineExceeded(
                            "the request could no longer meet its deadline and was not computed"
                        ),
                    )
                for d in step.dispatches:
                    self._run_batch(d, [self._pending.pop(rid) for rid in d.rids])
                if step.dispatches or step.expired:
                    await asyncio.sleep(0)  # let callers queue more between batches
                    continue
                if self._closed and self._sched.idle:
                    return
                timeout = None if step.wake_at is None else max(step.wake_at - now, 0.0) / 1e3
                self._wake = loop.create_future()
                await asyncio.wait({self._wake}, timeout=timeout)
        except BaseException as exc:  # a bug here must not leave callers waiting forever
            self._closed = True
            stranded = list(self._pending.values())
            self._pending.clear()
            for p in stranded:
                _settle(p.future, error=BatcherError(f"the batcher stopped: {exc!r}"))
            raise

    def _run_batch(self, d: Dispatch, members: list[_Pending]) -> None:
        not_served: dict[int, Outcome] = {}
        service_ms: float | None = None
        try:
            live = []
            for p in members:
                if p.future.cancelled():
                    not_served[p.rid] = Outcome.CANCELLED
                else:
                    live.append(p)
            if live:
                service_ms = self._compute(live, not_served)
        except BaseException as exc:
            for p in members:
                if not p.future.done():
                    not_served[p.rid] = Outcome.FAILED
                    _settle(p.future, error=BatcherError(f"the batch failed: {exc!r}"))
            raise
        finally:
            self._sched.complete(self._now(), d.batch_id, service_ms, not_served)
