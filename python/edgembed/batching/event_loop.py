"""The adaptive batcher on an asyncio event loop, for hosts without threads (Pyodide).

Pyodide runs Python on the JavaScript engine's one thread: ``threading.Thread.start`` fails
there, so ``AdaptiveBatcher`` cannot start its scheduler thread and workers. This batcher runs
the same core (:mod:`~edgembed.batching.core`: the same scheduler, hence the same decisions as
the threaded batcher and the simulator) from one task on the running loop (Pyodide's WebLoop,
or any asyncio loop): requests queue while the loop serves other coroutines, and when the
policy dispatches a batch the target runs on the loop itself, one batch at a time (one
worker). The wasm engine is synchronous and single-threaded anyway.

::

    batcher = EventLoopBatcher(embedder, latency_target_ms=50)
    vectors = await asyncio.gather(*(batcher.embed(t) for t in texts))
    await batcher.aclose()

``submit`` returns an ``asyncio.Future`` and must be called with the loop available; ``close``
does not wait (it cannot block the loop it runs on): ``await aclose()``, or ``async with``,
waits for the queued work.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from ..errors import BatcherClosed, BatcherError
from .core import BatcherCore, Outcomes, Pending, deliver
from .cost_model import CostPrior
from .metrics import BatcherStats
from .policy import Lane, PolicyConfig
from .scheduler import Dispatch, Outcome

__all__ = ["EventLoopBatcher"]


def _loop() -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # Pyodide's WebLoop is the current loop even outside a coroutine
        return asyncio.get_event_loop()


class EventLoopBatcher:
    """The adaptive batcher driven by an event loop instead of threads (see the module
    docstring). The arguments are :class:`AdaptiveBatcher`'s but ``workers``: one batch runs
    at a time."""

    def __init__(
        self,
        target: Any,
        *,
        latency_target_ms: float = 50.0,
        percentile: float = 0.99,
        max_batch_tokens: int = 4096,
        max_queue: int = 1024,
        bulk_latency_target_ms: float | None = None,
        cost_prior: CostPrior | Mapping[str, Any] | None = None,
        shed: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = BatcherCore(target, latency_target_ms, percentile, max_batch_tokens,
                                 max_queue, 1, bulk_latency_target_ms, cost_prior, shed, clock)
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None

    # -- public API ------------------------------------------------------------------------------

    def submit(
        self,
        texts: str | Sequence[str],
        *,
        priority: str | Lane = "interactive",
        deadline_ms: float | None = None,
        tokens: Sequence[int] | None = None,
    ) -> asyncio.Future[Any]:
        """Queue a request; the future resolves to its vector (for a ``str``) or vectors.

        Raises at once what :meth:`AdaptiveBatcher.submit` raises. Cancelling the future
        withdraws the request if it has not started. ``tokens``: as for ``AdaptiveBatcher``.
        """
        core = self._core
        single, items, lane = core.check_request(texts, priority, deadline_ms)
        loop = _loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if not items:
            fut.set_result([])
            return fut
        counts = core.token_counts(items, tokens)
        rid, adm = core.admit(items, counts, lane, deadline_ms, single, fut)
        core.raise_refusal(adm, lane, deadline_ms)
        fut.add_done_callback(functools.partial(self._on_cancel, rid))
        if self._task is None:
            self._task = loop.create_task(self._serve())
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

    def close(self, drain: bool = True) -> None:
        """Stop taking requests; ``drain`` computes what is queued (on the loop, after this
        returns), else fails it with :class:`BatcherClosed`. Does not wait: see ``aclose``."""
        self._core.fail(self._core.close(drain),
                        BatcherClosed("the batcher was closed without draining"))
        self._notify()

    async def aclose(self, drain: bool = True) -> None:
        """``close``, then wait until every queued request is resolved."""
        self.close(drain)
        if self._task is not None:
            await self._task

    @property
    def closed(self) -> bool:
        return self._core.closed

    @property
    def config(self) -> PolicyConfig:
        return self._core.config

    def stats(self) -> BatcherStats:
        """Queue, batches, latency, SLO attainment, throughput and the cost model, now."""
        return self._core.stats()

    def cost_model(self) -> dict[str, float]:
        """The cost model's parameters now (``stats().cost_model``, without the rest)."""
        return self._core.scheduler.model.snapshot()

    def prometheus_text(self, prefix: str = "edgembed_batcher") -> str:
        """:meth:`stats` in the Prometheus text exposition format."""
        return self._core.prometheus_text(prefix)

    async def __aenter__(self) -> EventLoopBatcher:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose(drain=True)

    # -- machinery -------------------------------------------------------------------------------

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _on_cancel(self, rid: int, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() and self._core.withdraw(rid):
            self._notify()

    async def _serve(self) -> None:
        core, loop = self._core, _loop()
        try:
            while True:
                now = core.now()
                step, expired, batches = core.step(now)
                core.expire(expired)
                for d, members in batches:
                    self._run(d, members)
                if batches or expired:
                    await asyncio.sleep(0)  # let callers queue more between batches
                    continue
                if core.closed and core.scheduler.idle:
                    return
                timeout = None if step.wake_at is None else max(step.wake_at - now, 0.0) / 1e3
                self._wake = loop.create_future()
                await asyncio.wait({self._wake}, timeout=timeout)
        except BaseException as exc:  # a bug here must not leave callers waiting forever
            core.fail(core.strand(), BatcherError(f"the batcher stopped: {exc!r}"))
            raise

    def _run(self, d: Dispatch, members: list[Pending]) -> None:
        not_served: dict[int, Outcome] = {}
        outcomes: Outcomes = []
        service_ms: float | None = None
        try:
            service_ms = self._core.run_batch(members, lambda p: not p.future.cancelled(),
                                              not_served, outcomes)
        finally:
            try:
                self._core.complete(d, service_ms, not_served)
            finally:
                deliver(outcomes)
