"""What both live batchers share: the target, the scheduler, the requests, and computing a batch.

::

    AdaptiveBatcher (batcher.py)      threads: a scheduler thread, worker threads,
        │                              concurrent.futures.Future per request
    EventLoopBatcher (event_loop.py)  one task on an asyncio loop, asyncio.Future per request
        └─► BatcherCore: request checks ─► Scheduler.admit / refusal errors ─► Scheduler.step
                         ─► run_batch (the target on the texts, results cut per request)

A driver owns its clockwork and its futures, and calls the core under its own lock (the
threaded one) or on its loop (the event-loop one). The core never waits and never starts
anything, so the decisions are the scheduler's in both, and the simulator's on the same events.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import InvalidStateError
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import BatcherClosed, BatcherError, DeadlineExceeded, InputError, Overloaded
from .cost_model import CostModel, CostPrior
from .metrics import BatcherStats, prometheus_text
from .policy import Admission, AdmissionKind, Lane, PolicyConfig
from .scheduler import Dispatch, Outcome, Scheduler, Step, split_outputs

__all__ = ["BatcherCore", "Outcomes", "Pending", "deliver", "estimate_tokens", "settle"]


def estimate_tokens(texts: Sequence[str]) -> list[int]:
    """Token count estimate used when the target has no ``count_tokens``.

    About four characters per WordPiece token for English, plus the two special tokens
    ([CLS], [SEP]). Only the cost model sees it, and it learns its coefficients against the same
    estimate, so a consistent bias costs little.
    """
    return [len(t) // 4 + 2 for t in texts]


class AnyFuture(Protocol):
    """What the core needs of a request's future (``concurrent.futures`` or ``asyncio``)."""

    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def set_result(self, result: Any, /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...


@dataclass
class Pending:
    """One accepted request waiting for (or in) its batch."""

    rid: int
    texts: list[str]
    single: bool
    future: AnyFuture


def settle(fut: AnyFuture, *, result: Any = None, error: BaseException | None = None) -> None:
    """Resolve ``fut`` unless the caller already cancelled it."""
    if fut.done():
        return
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)
    except (InvalidStateError, asyncio.InvalidStateError):  # cancelled meanwhile (threads)
        pass


# A batch's outcomes, one per computed request: (future, result, error). run_batch collects them
# and the driver settles them (``deliver``) only after ``complete``, so that a caller who sees its
# result also sees its batch no longer in flight (a sliced request's next slice, sent the moment
# the previous one is answered, never finds the previous batch still counted).
Outcomes = list[tuple[AnyFuture, Any, BaseException | None]]


def deliver(outcomes: Outcomes) -> None:
    """Settle every future of a computed batch (``Outcomes``)."""
    for fut, result, error in outcomes:
        settle(fut, result=result, error=error)


def _own(part: Any) -> Any:
    """A copy of a slice, so a result does not keep the whole batch's array alive."""
    copy = getattr(part, "copy", None)
    return copy() if callable(copy) else part


class BatcherCore:
    """Set-up, request checks, admission and refusals, and running one batch (see the module
    docstring). The arguments are the batchers' own (``AdaptiveBatcher``)."""

    def __init__(
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
        self.scheduler = Scheduler(self.config, CostModel(cost_prior, percentile))
        self.pending: dict[int, Pending] = {}
        self._ids = itertools.count()
        self.closed = False

    def now(self) -> float:
        """The scheduler's clock: milliseconds."""
        return self._clock() * 1000.0

    # -- requests --------------------------------------------------------------------------------

    @staticmethod
    def check_request(
        texts: str | Sequence[str], priority: str | Lane, deadline_ms: float | None
    ) -> tuple[bool, list[str], Lane]:
        """Validate a request's arguments: (single text?, the texts, the lane)."""
        single = isinstance(texts, str)
        items: list[str] = [texts] if isinstance(texts, str) else list(texts)
        for t in items:
            # a text, or a (query, document) pair for a cross-encoder target
            if not isinstance(t, str) and not (
                    isinstance(t, tuple) and len(t) == 2 and all(isinstance(x, str) for x in t)):
                raise InputError(f"texts must be str (or (query, document) pairs of str), got "
                                 f"{type(t).__name__}")
        try:
            lane = Lane(priority)
        except ValueError:
            raise InputError(
                f"priority must be 'interactive' or 'bulk', got {priority!r}"
            ) from None
        if deadline_ms is not None and not (deadline_ms > 0 and math.isfinite(deadline_ms)):
            raise InputError(f"deadline_ms must be a positive number, got {deadline_ms!r}")
        return single, items, lane

    def token_counts(self, items: list[str], given: Sequence[int] | None = None) -> list[int]:
        """The texts' token counts: ``given`` by the caller, else the target's count."""
        tokens = [int(n) for n in (self._count(items) if given is None else given)]
        if len(tokens) != len(items):
            raise BatcherError("count_tokens returned a count per text of another length")
        return tokens

    def admit(
        self,
        items: list[str],
        tokens: list[int],
        lane: Lane,
        deadline_ms: float | None,
        single: bool,
        future: AnyFuture,
    ) -> tuple[int, Admission]:
        """Ask the scheduler; an accepted request is pending from now on. Raises
        BatcherClosed once closed; other refusals are for ``raise_refusal``."""
        if self.closed:
            raise BatcherClosed("the batcher is closed; create a new one")
        rid = next(self._ids)
        adm = self.scheduler.admit(self.now(), rid, tokens, lane=lane, deadline_ms=deadline_ms)
        if adm.kind is AdmissionKind.ACCEPT:
            self.pending[rid] = Pending(rid, items, single, future)
        return rid, adm

    def raise_refusal(self, adm: Admission, lane: Lane, deadline_ms: float | None) -> None:
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
            raise BatcherClosed("the batcher is closing; create a new one")

    def withdraw(self, rid: int) -> bool:
        """A caller cancelled request ``rid``: drop it if it has not started."""
        if self.scheduler.cancel(self.now(), rid):
            self.pending.pop(rid, None)
            return True
        return False

    # -- the schedule ----------------------------------------------------------------------------

    def step(self, now: float) -> tuple[Step, list[Pending], list[tuple[Dispatch, list[Pending]]]]:
        """The scheduler's step at ``now``, with the requests it expires and the batches it
        starts taken out of ``pending``."""
        step = self.scheduler.step(now)
        expired = [self.pending.pop(rid) for rid in step.expired]
        batches = [(d, [self.pending.pop(rid) for rid in d.rids]) for d in step.dispatches]
        return step, expired, batches

    def close(self, drain: bool) -> list[Pending]:
        """Stop taking requests; returns those that will not be computed (``drain`` off)."""
        if self.closed:
            return []
        self.closed = True
        return [self.pending.pop(rid) for rid in self.scheduler.close(self.now(), drain)]

    def strand(self) -> list[Pending]:
        """The driver stopped on a bug: closed, and every pending request handed back."""
        self.closed = True
        stranded = list(self.pending.values())
        self.pending.clear()
        return stranded

    @staticmethod
    def expire(expired: list[Pending]) -> None:
        for p in expired:
            settle(p.future, error=DeadlineExceeded(
                "the request could no longer meet its deadline and was not computed"))

    @staticmethod
    def fail(requests: list[Pending], error: BaseException) -> None:
        for p in requests:
            settle(p.future, error=error)

    def complete(self, d: Dispatch, service_ms: float | None,
                 not_served: dict[int, Outcome]) -> None:
        self.scheduler.complete(self.now(), d.batch_id, service_ms, not_served)

    # -- one batch -------------------------------------------------------------------------------

    def run_batch(
        self,
        members: list[Pending],
        claim: Callable[[Pending], bool],
        not_served: dict[int, Outcome],
        outcomes: Outcomes,
    ) -> float | None:
        """Compute one dispatched batch; its service time (ms) if it is a clean observation.

        ``claim`` marks a request as started and says whether it still wants its result (False:
        cancelled). Requests not served are recorded in ``not_served``. Every computed request's
        result or error goes into ``outcomes``, which the driver delivers after ``complete``. A
        failing target fails only the requests it fails on; anything else (a bug) fails every
        member, then raises.
        """
        try:
            live: list[Pending] = []
            for p in members:
                if claim(p):
                    live.append(p)
                else:
                    not_served[p.rid] = Outcome.CANCELLED
            return self._compute(live, not_served, outcomes) if live else None
        except BaseException as exc:  # never leave a future unresolved or a worker marked busy
            given = {id(fut) for fut, _, _ in outcomes}
            for p in members:
                if not p.future.done() and id(p.future) not in given:
                    not_served[p.rid] = Outcome.FAILED
                    outcomes.append((p.future, None, BatcherError(f"the batch failed: {exc!r}")))
            raise

    def _compute(self, live: list[Pending], not_served: dict[int, Outcome],
                 outcomes: Outcomes) -> float | None:
        texts = [t for p in live for t in p.texts]
        start = time.perf_counter()
        try:
            vectors = self._embed(texts)
            parts = split_outputs([len(p.texts) for p in live], vectors)
        except Exception as exc:
            if len(live) == 1:
                not_served[live[0].rid] = Outcome.FAILED
                outcomes.append((live[0].future, None, exc))
            else:
                self._run_alone(live, not_served, outcomes)
            return None
        service_ms = (time.perf_counter() - start) * 1000.0
        for p, part in zip(live, parts, strict=True):
            outcomes.append((p.future, _own(part[0] if p.single else part), None))
        return None if not_served else service_ms

    def _run_alone(self, live: list[Pending], not_served: dict[int, Outcome],
                   outcomes: Outcomes) -> None:
        """A batch failed: compute each request on its own, so one bad request fails alone."""
        for p in live:
            try:
                vectors = self._embed(p.texts)
                (part,) = split_outputs([len(p.texts)], vectors)
            except Exception as exc:
                not_served[p.rid] = Outcome.FAILED
                outcomes.append((p.future, None, exc))
            else:
                outcomes.append((p.future, _own(part[0] if p.single else part), None))

    # -- observation -----------------------------------------------------------------------------

    def stats(self) -> BatcherStats:
        return self.scheduler.stats()

    def prometheus_text(self, prefix: str) -> str:
        return prometheus_text(self.stats(), prefix)
