"""The batcher's state machine: queue, workers, cost model and counters, on any clock.

:class:`Scheduler` owns no thread and reads no clock. Its caller tells it what happened and when
(``admit``, ``cancel``, ``complete``, ``close``) and asks it what to do now (``step``): which
requests to fail because their deadline is out of reach, which batches to start on which worker,
and when to ask again if nothing else happens. The simulator drives it from a virtual clock, the
:class:`~edgembed.batching.batcher.AdaptiveBatcher` from ``time.monotonic``; both therefore make
the same decisions. With ``record=True`` every decision is appended to ``log`` as a JSON-ready
dict (the format of ``tests/fixtures/batching/*.json``, described in docs/batching.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..errors import BatcherError
from .cost_model import CostModel
from .metrics import BatcherStats, Recorder
from .policy import (
    MISS_BUDGET_CAP,
    Admission,
    AdmissionKind,
    ArrivalStats,
    DispatchStats,
    Lane,
    PolicyConfig,
    Request,
    admit,
    calibrate,
    decide,
    expired,
    settle_miss_budget,
    update_arrivals,
    update_dispatches,
)

__all__ = ["Dispatch", "Outcome", "Scheduler", "Step", "split_outputs"]


class Outcome(str, Enum):
    """How a request ended."""

    OK = "ok"
    OVERLOADED = "overloaded"
    DEADLINE = "deadline"
    CANCELLED = "cancelled"
    CLOSED = "closed"
    FAILED = "failed"


@dataclass(frozen=True)
class Dispatch:
    """Start ``rids`` (in this order) as batch ``batch_id`` on ``worker``."""

    batch_id: int
    worker: int
    rids: tuple[int, ...]
    tokens: int
    padding: int
    predicted_ms: float  # mean prediction, before the margin
    reason: str


@dataclass(frozen=True)
class Step:
    """What to do now: fail ``expired``, start ``dispatches``; ask again at ``wake_at``."""

    expired: tuple[int, ...]
    dispatches: tuple[Dispatch, ...]
    wake_at: float | None


@dataclass
class _InFlight:
    worker: int
    requests: tuple[Request, ...]
    tokens: int
    padding: int
    started_ms: float
    predicted_end_ms: float


class Scheduler:
    """Deterministic core of the adaptive batcher (see the module docstring)."""

    def __init__(
        self,
        config: PolicyConfig,
        model: CostModel | None = None,
        *,
        record: bool = False,
    ) -> None:
        self.config = config
        self.model = model if model is not None else CostModel()
        self.arrivals = ArrivalStats()
        self.queue: dict[int, Request] = {}
        self.workers: list[int | None] = [None] * config.workers  # batch id per worker
        self.in_flight: dict[int, _InFlight] = {}
        self.closing = False
        self.record = record
        self.log: list[dict[str, Any]] = []
        self.recorder = Recorder()
        self._next_batch = 0
        self._last_wake: float | None = None
        self._queue_tokens = 0
        self.miss_budget = MISS_BUDGET_CAP
        self.dispatches = DispatchStats()
        self.calibration = 1.0
        self._reserved: set[int] = set()

    # -- events --------------------------------------------------------------------------------

    def admit(
        self,
        now: float,
        rid: int,
        tokens: Sequence[int],
        *,
        lane: Lane = Lane.INTERACTIVE,
        deadline_ms: float | None = None,
    ) -> Admission:
        """A request of texts with ``tokens`` arrives; queue it or refuse it at once.

        ``deadline_ms`` is relative to ``now``. ``rid`` must be new.
        """
        if rid in self.queue:
            raise ValueError(f"request id {rid} is already queued")
        self.recorder.submitted += 1
        total = 0
        longest = 0
        for t in tokens:
            total += t
            longest = max(longest, t)
        deadline = None if deadline_ms is None else now + deadline_ms
        due = now + self.config.lane_target_ms(lane)
        if deadline is not None and deadline < due:
            due = deadline
        req = Request(rid, now, lane, due, deadline, total, len(tokens), longest)
        if self.closing:
            result = Admission(AdmissionKind.CLOSED, 0.0, 0.0, "closed")
        else:
            result = admit(
                now,
                req,
                list(self.queue.values()),
                self.model,
                self.config,
                self._worker_free(now),
                self.arrivals,
                self.dispatches,
                self.miss_budget,
                self.calibration,
            )
        if result.kind is AdmissionKind.ACCEPT:
            if result.reason == "miss-budget":
                self.miss_budget -= 1.0
                self._reserved.add(rid)
            self.queue[rid] = req
            self._queue_tokens += req.tokens
            if lane is Lane.INTERACTIVE:  # bulk work is paced by its submitter: no arrivals
                self.arrivals = update_arrivals(self.arrivals, now, total)
        else:
            self.recorder.outcome(_REFUSAL[result.kind].value)
        if self.record:
            planned = result.predicted_latency_ms
            entry: dict[str, Any] = {
                "t": now,
                "event": "admit",
                "rid": rid,
                "result": result.kind.value,
                "reason": result.reason,
                "planned_ms": planned if math.isfinite(planned) else None,
            }
            if result.kind is AdmissionKind.OVERLOADED:
                entry["retry_after_ms"] = result.retry_after_ms
            self.log.append(entry)
        return result

    def cancel(self, now: float, rid: int) -> bool:
        """Withdraw a queued request; False if it is not queued (running, done or unknown)."""
        req = self.queue.pop(rid, None)
        if req is not None:
            self._queue_tokens -= req.tokens
            self.recorder.outcome(Outcome.CANCELLED.value)
            self._release(rid)
        if self.record:
            self.log.append({"t": now, "event": "cancel", "rid": rid, "removed": req is not None})
        return req is not None

    def complete(
        self,
        now: float,
        batch_id: int,
        service_ms: float | None,
        not_served: Mapping[int, Outcome] | None = None,
    ) -> None:
        """Batch ``batch_id`` ended after ``service_ms`` of compute (None: do not learn from it).

        ``not_served`` names the requests of the batch that did not get a vector (cancelled
        just before the batch started, or failed) and how they ended; the others are served.
        """
        fl = self.in_flight.pop(batch_id)
        self.workers[fl.worker] = None
        missing = not_served or {}
        if service_ms is not None:
            self.model.observe(float(fl.tokens), float(fl.padding), service_ms)
        for r in fl.requests:
            if r.rid in missing:
                self.recorder.outcome(missing[r.rid].value)
                self._release(r.rid)
            else:
                target = self.config.lane_target_ms(r.lane)
                latency = now - r.arrival_ms
                self.recorder.served(now, latency, r.tokens, target)
                reserved = r.rid in self._reserved
                self._reserved.discard(r.rid)
                self.miss_budget = settle_miss_budget(
                    self.miss_budget, latency > target, reserved, self.model.percentile
                )
                self.calibration = calibrate(
                    self.calibration, latency > target, self.model.percentile
                )
        if self.record:
            self.log.append(
                {"t": now, "event": "complete", "batch": batch_id, "service_ms": service_ms}
            )

    def close(self, now: float, drain: bool) -> tuple[int, ...]:
        """Stop admitting. With ``drain`` queued work still runs (without waiting for more);
        without it every queued request is returned, to be failed with ``BatcherClosed``."""
        self.closing = True
        failed: tuple[int, ...] = ()
        if not drain:
            failed = tuple(self.queue)
            self.queue.clear()
            self._queue_tokens = 0
            self.recorder.outcome(Outcome.CLOSED.value, len(failed))
            for rid in failed:
                self._release(rid)
        if self.record:
            self.log.append({"t": now, "event": "close", "drain": drain, "failed": list(failed)})
        return failed

    # -- decisions -----------------------------------------------------------------------------

    def step(self, now: float) -> Step:
        """Expire what cannot make its deadline, start every batch that should start now."""
        gone: list[int] = []
        dispatches: list[Dispatch] = []
        wake: float | None = None
        while True:
            free = [i for i, b in enumerate(self.workers) if b is None]
            start = now if free else self._earliest_free(now)
            dead, next_expiry = expired(now, list(self.queue.values()), self.model, start,
                                       busy=not free)
            for r in dead:
                del self.queue[r.rid]
                self._queue_tokens -= r.tokens
                self.recorder.outcome(Outcome.DEADLINE.value)
                self._release(r.rid)
                gone.append(r.rid)
                if self.record:
                    self.log.append({"t": now, "event": "expire", "rid": r.rid})
            if not free or not self.queue:
                wake = next_expiry
                break
            decision = decide(
                now,
                list(self.queue.values()),
                self.model,
                self.arrivals,
                self.config,
                self.closing,
            )
            if decision.batch is None:
                wake = decision.wait_until
                if next_expiry is not None and (wake is None or next_expiry < wake):
                    wake = next_expiry
                break
            batch = decision.batch
            worker = free[0]
            batch_id = self._next_batch
            self._next_batch += 1
            predicted = self.model.predict(float(batch.tokens), float(batch.padding))
            for r in batch.requests:
                del self.queue[r.rid]
                self._queue_tokens -= r.tokens
            self.workers[worker] = batch_id
            self.in_flight[batch_id] = _InFlight(
                worker, batch.requests, batch.tokens, batch.padding, now, now + predicted
            )
            self.recorder.dispatched(len(batch.requests), batch.tokens)
            self.dispatches = update_dispatches(self.dispatches, batch.tokens, batch.padding)
            d = Dispatch(
                batch_id,
                worker,
                batch.rids,
                batch.tokens,
                batch.padding,
                predicted,
                decision.reason,
            )
            dispatches.append(d)
            if self.record:
                self.log.append(
                    {
                        "t": now,
                        "event": "dispatch",
                        "batch": batch_id,
                        "worker": worker,
                        "rids": list(batch.rids),
                        "tokens": batch.tokens,
                        "padding": batch.padding,
                        "predicted_ms": predicted,
                        "reason": decision.reason,
                    }
                )
        if self.record and wake is not None and wake != self._last_wake:
            self.log.append({"t": now, "event": "wake", "at": wake})
        if wake is not None:
            self._last_wake = wake
        return Step(tuple(gone), tuple(dispatches), wake)

    # -- views ---------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing running."""
        return not self.queue and not self.in_flight

    def request_of(self, batch_id: int) -> tuple[Request, ...]:
        return self.in_flight[batch_id].requests

    def _release(self, rid: int) -> None:
        """Refund the miss budget paid for a request that ends without being served."""
        if rid in self._reserved:
            self._reserved.discard(rid)
            self.miss_budget = min(self.miss_budget + 1.0, MISS_BUDGET_CAP)

    def _worker_free(self, now: float) -> list[float]:
        """When each worker frees: ``now`` if idle, else its batch's predicted end."""
        out = []
        for b in self.workers:
            end = now if b is None else self.in_flight[b].predicted_end_ms
            out.append(end if end > now else now)
        return out

    def _earliest_free(self, now: float) -> float:
        if None in self.workers or not self.in_flight:
            return now
        end = min(fl.predicted_end_ms for fl in self.in_flight.values())
        return end if end > now else now

    def stats(self) -> BatcherStats:
        rec = self.recorder
        o = rec.outcomes
        rps, tps = rec.throughput()
        bs = rec.batch_size
        bt = rec.batch_tokens
        return BatcherStats(
            queue_depth=len(self.queue),
            queue_tokens=self._queue_tokens,
            in_flight_batches=len(self.in_flight),
            workers=self.config.workers,
            submitted=rec.submitted,
            completed=o.get("ok", 0),
            overloaded=o.get("overloaded", 0),
            deadline_exceeded=o.get("deadline", 0),
            cancelled=o.get("cancelled", 0),
            closed=o.get("closed", 0),
            failed=o.get("failed", 0),
            batches=rec.batches,
            batch_size_histogram=bs.as_dict(),
            batch_tokens_histogram=bt.as_dict(),
            latency_histogram_ms=rec.latency.as_dict(),
            mean_batch_size=bs.total / bs.n if bs.n else 0.0,
            mean_batch_tokens=bt.total / bt.n if bt.n else 0.0,
            latency_ms=rec.latency_summary(),
            latency_target_ms=self.config.latency_target_ms,
            percentile=self.model.percentile,
            slo_attainment=rec.within_target / rec.judged if rec.judged else 1.0,
            recent_slo_attainment=rec.recent_attainment(),
            throughput_rps=rps,
            throughput_tokens_per_s=tps,
            arrival_gap_ms=self.arrivals.gap_ms,
            cost_model=self.model.snapshot(),
        )


def split_outputs(counts: Sequence[int], outputs: Any) -> list[Any]:
    """Cut a batch's outputs (one per text, requests in batch order) back into requests.

    ``outputs`` is any sliceable sequence (a list, a 2-D numpy array); each request gets the
    slice of its own texts, so no request can receive another's vectors.
    """
    total = 0
    for c in counts:
        total += c
    if len(outputs) != total:
        raise BatcherError(
            f"the target returned {len(outputs)} vectors for {total} texts; it must return "
            "one vector per text, in order"
        )
    out = []
    start = 0
    for c in counts:
        out.append(outputs[start : start + c])
        start += c
    return out


_REFUSAL = {
    AdmissionKind.OVERLOADED: Outcome.OVERLOADED,
    AdmissionKind.DEADLINE: Outcome.DEADLINE,
    AdmissionKind.CLOSED: Outcome.CLOSED,
}
