"""The live adaptive batcher on threads and the real clock.

One scheduler thread runs :class:`~edgembed.batching.scheduler.Scheduler` against
``time.monotonic``; ``workers`` threads call the target. Callers get
:class:`concurrent.futures.Future` objects (``submit``) or await them (``embed``). All decisions
are the scheduler's, so they are the ones the simulator makes on the same events. Hosts that
cannot start threads (Pyodide) run the same core on an event loop: ``EventLoopBatcher``.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any

from .. import env
from ..errors import BatcherClosed, BatcherError
from .core import BatcherCore, Outcomes, Pending, deliver, estimate_tokens
from .cost_model import CostPrior
from .metrics import BatcherStats
from .policy import Lane, PolicyConfig
from .scheduler import Dispatch, Outcome

__all__ = ["AdaptiveBatcher", "estimate_tokens"]


class AdaptiveBatcher:
    """Groups concurrent embedding requests into batches that keep a latency target.

    ``target`` is an :class:`~edgembed.Embedder` (its ``embed`` is called) or any callable that
    takes a list of texts and returns one vector per text. Token counts come from
    ``target.count_tokens(texts)`` when the target has it, else from :func:`estimate_tokens`.

    The batcher starts its threads at once; close it (``close()``, ``with``, ``async with``) to
    stop them. ``close`` must not be called from inside the target.
    """

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
        if not env.HOST.threads:
            raise BatcherError(
                "this Python cannot start threads (Pyodide): use EventLoopBatcher "
                "(from edgembed.batching), the same batcher on the event loop")
        self._core = BatcherCore(target, latency_target_ms, percentile, max_batch_tokens,
                                 max_queue, workers, bulk_latency_target_ms, cost_prior, shed,
                                 clock)
        self._cond = threading.Condition()
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="edgembed-batch")
        self._thread = threading.Thread(target=self._loop, name="edgembed-batcher", daemon=True)
        self._thread.start()

    # -- public API ------------------------------------------------------------------------------

    def submit(
        self,
        texts: str | Sequence[str],
        *,
        priority: str | Lane = "interactive",
        deadline_ms: float | None = None,
        tokens: Sequence[int] | None = None,
    ) -> Future[Any]:
        """Queue a request; the future resolves to its vector (for a ``str``) or vectors.

        Raises at once :class:`Overloaded` (queue full or the latency target out of reach),
        :class:`DeadlineExceeded` (the deadline cannot be met even if computed now),
        :class:`BatcherClosed`, or :class:`InputError`. Cancelling the future withdraws the
        request if it has not started. ``deadline_ms`` is counted from now. ``tokens``: the
        texts' token counts when the caller has them (else the target counts them).
        """
        core = self._core
        single, items, lane = core.check_request(texts, priority, deadline_ms)
        fut: Future[Any] = Future()
        if not items:
            fut.set_result([])
            return fut
        counts = core.token_counts(items, tokens)
        with self._cond:
            rid, adm = core.admit(items, counts, lane, deadline_ms, single, fut)
            self._cond.notify_all()
        core.raise_refusal(adm, lane, deadline_ms)
        fut.add_done_callback(functools.partial(self._on_done, rid))
        return fut

    async def embed(
        self,
        texts: str | Sequence[str],
        *,
        priority: str | Lane = "interactive",
        deadline_ms: float | None = None,
    ) -> Any:
        """Awaitable :meth:`submit`; cancelling the awaiting task withdraws a waiting request."""
        fut = self.submit(texts, priority=priority, deadline_ms=deadline_ms)
        return await asyncio.wrap_future(fut)

    def close(self, drain: bool = True, timeout: float | None = None) -> None:
        """Stop taking requests; ``drain`` computes what is queued, else fails it with
        :class:`BatcherClosed`. Running batches always finish. Returns when all is resolved
        (or after ``timeout`` seconds). Calling it again only waits."""
        with self._cond:
            failed = self._core.close(drain)
            self._cond.notify_all()
        self._core.fail(failed, BatcherClosed("the batcher was closed without draining"))
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._executor.shutdown(wait=True)

    async def aclose(self, drain: bool = True) -> None:
        await asyncio.to_thread(self.close, drain)

    @property
    def closed(self) -> bool:
        return self._core.closed

    @property
    def config(self) -> PolicyConfig:
        return self._core.config

    def stats(self) -> BatcherStats:
        """Queue, batches, latency, SLO attainment, throughput and the cost model, now."""
        with self._cond:
            return self._core.stats()

    def cost_model(self) -> dict[str, float]:
        """The cost model's parameters now (``stats().cost_model``, without the rest)."""
        with self._cond:
            return self._core.scheduler.model.snapshot()

    def prometheus_text(self, prefix: str = "edgembed_batcher") -> str:
        """:meth:`stats` in the Prometheus text exposition format (serve it at ``/metrics``)."""
        with self._cond:
            return self._core.prometheus_text(prefix)

    def __enter__(self) -> AdaptiveBatcher:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(drain=True)

    async def __aenter__(self) -> AdaptiveBatcher:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose(drain=True)

    # -- machinery -------------------------------------------------------------------------------

    def _on_done(self, rid: int, fut: Future[Any]) -> None:
        if not fut.cancelled():
            return
        with self._cond:
            if self._core.withdraw(rid):
                self._cond.notify_all()

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # a bug here must not leave callers waiting forever
            with self._cond:
                stranded = self._core.strand()
            self._core.fail(stranded, BatcherError(f"the batcher stopped: {exc!r}"))
            raise

    def _serve(self) -> None:
        core = self._core
        while True:
            with self._cond:
                while True:
                    now = core.now()
                    step, expired, batches = core.step(now)
                    if expired or batches:
                        break
                    if core.closed and core.scheduler.idle:
                        return
                    timeout = None if step.wake_at is None else max(step.wake_at - now, 0.0) / 1e3
                    self._cond.wait(timeout)
            core.expire(expired)
            for d, members in batches:
                self._executor.submit(self._run, d, members)

    def _run(self, d: Dispatch, members: list[Pending]) -> None:
        not_served: dict[int, Outcome] = {}
        outcomes: Outcomes = []
        service_ms: float | None = None
        try:
            service_ms = self._core.run_batch(members, _claim, not_served, outcomes)
        finally:
            try:
                with self._cond:
                    self._core.complete(d, service_ms, not_served)
                    self._cond.notify_all()
            finally:
                deliver(outcomes)


def _claim(p: Pending) -> bool:
    """Mark a request running; False if its caller cancelled it first."""
    fut: Future[Any] = p.future  # type: ignore[assignment]
    return fut.set_running_or_notify_cancel()
