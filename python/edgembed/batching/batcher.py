"""The live adaptive batcher: asyncio and threads on the real clock.

One scheduler thread runs :class:`~edgembed.batching.scheduler.Scheduler` against
``time.monotonic``; ``workers`` threads call the target. Callers get
:class:`concurrent.futures.Future` objects (``submit``) or await them (``embed``). All decisions
are the scheduler's, so they are the ones the simulator makes on the same events.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ..errors import BatcherClosed, BatcherError, DeadlineExceeded, InputError, Overloaded
from .cost_model import CostModel, CostPrior
from .metrics import BatcherStats, prometheus_text
from .policy import Admission, AdmissionKind, Lane, PolicyConfig
from .scheduler import Dispatch, Outcome, Scheduler, split_outputs

__all__ = ["AdaptiveBatcher", "estimate_tokens"]


def estimate_tokens(texts: Sequence[str]) -> list[int]:
    """Token count estimate used when the target has no ``count_tokens``.

    About four characters per WordPiece token for English, plus the two special tokens
    ([CLS], [SEP]). Only the cost model sees it, and it learns its coefficients against the same
    estimate, so a consistent bias costs little.
    """
    return [len(t) // 4 + 2 for t in texts]


@dataclass
class _Pending:
    rid: int
    texts: list[str]
    single: bool
    future: Future[Any]


def _settle(fut: Future[Any], *, result: Any = None, error: BaseException | None = None) -> None:
    """Resolve ``fut`` unless the caller already cancelled it."""
    if fut.done():
        return
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)
    except InvalidStateError:  # cancelled between the check and the set
        pass


def _own(part: Any) -> Any:
    """A copy of a slice, so a result does not keep the whole batch's array alive."""
    copy = getattr(part, "copy", None)
    return copy() if callable(copy) else part


class AdaptiveBatcher:
    """Groups concurrent embedding requests into batches that keep a latency target.

    ``target`` is an :class:`~edgembed.Embedder` (its ``embed`` is called) or any callable that
    takes a list of texts and returns one vector per text. Token counts come from
    ``target.count_tokens(texts)`` when the target has it, else from :func:`estimate_tokens`.

    The batcher starts its threads at once; close it (``close()``, ``with``, ``async with``) to
    stop them. ``close`` must not be called from inside the target.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> AdaptiveBatcher:
        if cls is AdaptiveBatcher and sys.platform == "emscripten":
            # Pyodide cannot start threads: the same scheduler runs on the event loop there
            from ._event_loop import EventLoopBatcher

            cls = EventLoopBatcher
        return super().__new__(cls)

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
        self._setup(target, latency_target_ms, percentile, max_batch_tokens, max_queue, workers,
                    bulk_latency_target_ms, cost_prior, shed, clock)
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="edgembed-batch")
        self._thread = threading.Thread(target=self._loop, name="edgembed-batcher", daemon=True)
        self._thread.start()

    def _setup(
        self,
        target: Any,
        latency_target_ms: float,
        percentile: float,
        max_batch_tokens: int,
        max_queue: int,
        workers: int,
        bulk_latency_target_ms: float | None,
        cost_prior: CostPrior | Mapping[str, Any] | None,
        shed: bool,
        clock: Callable[[], float],
    ) -> None:
        """State shared by every driver: the target, the policy, the scheduler, the requests."""
        embed = getattr(target, "embed", None)
        if callable(embed):
            self._embed: Callable[[list[str]], Any] = embed
        elif callable(target):
            self._embed = target
        else:
            raise TypeError("target must be an Embedder or a callable taking a list of texts")
        count = getattr(target, "count_tokens", None)
        self._count: Callable[[Sequence[str]], Sequence[int]] = (
            count if callable(count) else estimate_tokens
        )
        if isinstance(cost_prior, Mapping):
            cost_prior = CostPrior.from_dict(dict(cost_prior))
        self.config = PolicyConfig(
            latency_target_ms=float(latency_target_ms),
            bulk_latency_target_ms=float(
                bulk_latency_target_ms
                if bulk_latency_target_ms is not None
                else 10.0 * latency_target_ms
            ),
            max_batch_tokens=int(max_batch_tokens),
            max_queue=int(max_queue),
            workers=int(workers),
            shed=shed,
        )
        self._clock = clock
        self._sched = Scheduler(self.config, CostModel(cost_prior, percentile))
        self._cond = threading.Condition()
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count()
        self._closed = False

    # -- shared by the threaded and the event-loop submit ---------------------------------------

    @staticmethod
    def _check_request(
        texts: str | Sequence[str], priority: str | Lane, deadline_ms: float | None
    ) -> tuple[bool, list[str], Lane]:
        """Validate a request's arguments: (single text?, the texts, the lane)."""
        single = isinstance(texts, str)
        items: list[str] = [texts] if isinstance(texts, str) else list(texts)
        for t in items:
            if not isinstance(t, str):
                raise InputError(f"texts must be str, got {type(t).__name__}")
        try:
            lane = Lane(priority)
        except ValueError:
            raise InputError(
                f"priority must be 'interactive' or 'bulk', got {priority!r}"
            ) from None
        if deadline_ms is not None and not (deadline_ms > 0 and math.isfinite(deadline_ms)):
            raise InputError(f"deadline_ms must be a positive number, got {deadline_ms!r}")
        return single, items, lane

    def _token_counts(self, items: list[str]) -> list[int]:
        tokens = [int(n) for n in self._count(items)]
        if len(tokens) != len(items):
            raise BatcherError("count_tokens returned a count per text of another length")
        return tokens

    def _raise_refusal(self, adm: Admission, lane: Lane, deadline_ms: float | None) -> None:
        """Raise what a refused admission means for the caller; return when it was accepted."""
        if adm.kind is AdmissionKind.OVERLOADED:
            raise Overloaded(
                f"the batcher is overloaded ({adm.reason}: predicted latency "
                f"{adm.predicted_latency_ms:.1f} ms, target {self.config.lane_target_ms(lane):g}"
                f" ms); retry after {adm.retry_after_ms / 1000.0:.3f} s or add capacity",
                retry_after=adm.retry_after_ms / 1000.0,
            )
        if adm.kind is AdmissionKind.DEADLINE:
            raise DeadlineExceeded(
                f"a deadline of {deadline_ms} ms cannot be met: computing this request alone "
                f"is predicted to take longer"
            )
        if adm.kind is AdmissionKind.CLOSED:
            raise BatcherClosed("the batcher is closing; create a new AdaptiveBatcher")

    # -- public API ----------------------------------------------------------------------------

    def submit(
        self,
        texts: str | Sequence[str],
        *,
        priority: str | Lane = "interactive",
        deadline_ms: float | None = None,
    ) -> Future[Any]:
        """Queue a request; the future resolves to its vector (for a ``str``) or vectors.

        Raises at once :class:`Overloaded` (queue full or the latency target out of reach),
        :class:`DeadlineExceeded` (the deadline cannot be met even if computed now),
        :class:`BatcherClosed`, or :class:`InputError`. Cancelling the future withdraws the
        request if it has not started. ``deadline_ms`` is counted from now.
        """
        single, items, lane = self._check_request(texts, priority, deadline_ms)
        fut: Future[Any] = Future()
        if not items:
            fut.set_result([])
            return fut
        tokens = self._token_counts(items)
        with self._cond:
            if self._closed:
                raise BatcherClosed("the batcher is closed; create a new AdaptiveBatcher")
            rid = next(self._ids)
            adm = self._sched.admit(self._now(), rid, tokens, lane=lane, deadline_ms=deadline_ms)
            if adm.kind is AdmissionKind.ACCEPT:
                self._pending[rid] = _Pending(rid, items, single, fut)
                self._cond.notify_all()
        self._raise_refusal(adm, lane, deadline_ms)
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
        failed: list[_Pending] = []
        with self._cond:
            if not self._closed:
                self._closed = True
                for rid in self._sched.close(self._now(), drain):
                    failed.append(self._pending.pop(rid))
                self._cond.notify_all()
        for p in failed:
            _settle(p.future, error=BatcherClosed("the batcher was closed without draining"))
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._executor.shutdown(wait=True)

    async def aclose(self, drain: bool = True) -> None:
        await asyncio.to_thread(self.close, drain)

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> BatcherStats:
        """Queue, batches, latency, SLO attainment, throughput and the cost model, now."""
        with self._cond:
            return self._sched.stats()

    def prometheus_text(self, prefix: str = "edgembed_batcher") -> str:
        """:meth:`stats` in the Prometheus text exposition format (serve it at ``/metrics``)."""
        return prometheus_text(self.stats(), prefix)

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

    # -- machinery -----------------------------------------------------------------------------

    def _now(self) -> float:
        return self._clock() * 1000.0

    def _on_done(self, rid: int, fut: Future[Any]) -> None:
        if not fut.cancelled():
            return
        with self._cond:
            if self._sched.cancel(self._now(), rid):
                self._pending.pop(rid, None)
                self._cond.notify_all()

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # a bug here must not leave callers waiting forever
            with self._cond:
                self._closed = True
                stranded = list(self._pending.values())
                self._pending.clear()
            for p in stranded:
                _settle(p.future, error=BatcherError(f"the batcher stopped: {exc!r}"))
            raise

    def _serve(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = self._now()
                    step = self._sched.step(now)
                    if step.expired or step.dispatches:
                        break
                    if self._closed and self._sched.idle:
                        return
                    timeout = None if step.wake_at is None else max(step.wake_at - now, 0.0) / 1e3
                    self._cond.wait(timeout)
                expired = [self._pending.pop(rid) for rid in step.expired]
                batches = [(d, [self._pending.pop(rid) for rid in d.rids]) for d in step.dispatches]
            for p in expired:
                _settle(
                    p.future,
                    error=DeadlineExceeded(
                        "the request could no longer meet its deadline and was not computed"
                    ),
                )
            for d, members in batches:
                self._executor.submit(self._run, d, members)

    def _run(self, d: Dispatch, members: list[_Pending]) -> None:
        not_served: dict[int, Outcome] = {}
        service_ms: float | None = None
        try:
            live: list[_Pending] = []
            for p in members:
                if p.future.set_running_or_notify_cancel():
                    live.append(p)
                else:
                    not_served[p.rid] = Outcome.CANCELLED
            if live:
                service_ms = self._compute(live, not_served)
        except BaseException as exc:  # never leave a future unresolved or a worker marked busy
            for p in members:
                if not p.future.done():
                    not_served[p.rid] = Outcome.FAILED
                    _settle(p.future, error=BatcherError(f"the batch failed: {exc!r}"))
            raise
        finally:
            with self._cond:
                self._sched.complete(self._now(), d.batch_id, service_ms, not_served)
                self._cond.notify_all()

    def _compute(self, live: list[_Pending], not_served: dict[int, Outcome]) -> float | None:
        """Run one batch; returns its service time (ms) if it is a clean observation."""
        texts = [t for p in live for t in p.texts]
        start = time.perf_counter()
        try:
            vectors = self._embed(texts)
            parts = split_outputs([len(p.texts) for p in live], vectors)
        except Exception as exc:
            if len(live) == 1:
                not_served[live[0].rid] = Outcome.FAILED
                _settle(live[0].future, error=exc)
            else:
                self._run_alone(live, not_served)
            return None
        service_ms = (time.perf_counter() - start) * 1000.0
        for p, part in zip(live, parts, strict=True):
            _settle(p.future, result=_own(part[0] if p.single else part))
        return None if not_served else service_ms

    def _run_alone(self, live: list[_Pending], not_served: dict[int, Outcome]) -> None:
        """A batch failed: compute each request on its own, so one bad request fails alone."""
        for p in live:
            try:
                vectors = self._embed(p.texts)
                (part,) = split_outputs([len(p.texts)], vectors)
            except Exception as exc:
                not_served[p.rid] = Outcome.FAILED
                _settle(p.future, error=exc)
            else:
                _settle(p.future, result=_own(part[0] if p.single else part))
