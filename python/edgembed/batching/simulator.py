"""Deterministic discrete-event simulation of the batcher on a virtual clock.

:func:`simulate` replays a :class:`~edgembed.batching.traces.Trace` through a scheduler — the
same :class:`~edgembed.batching.scheduler.Scheduler` the live batcher runs, or one of the
static policies in :mod:`edgembed.batching.baselines` — with batch service times drawn from a
:class:`ServiceModel`. Events at the same instant are handled in a fixed order (completions,
cancellations, arrivals, close, then the scheduler's own wake-up), and the scheduler is asked
to ``step`` after each one; docs/batching.md states these rules for the JavaScript port.

The "model" computes no vectors: the output for text ``i`` of request ``rid`` is the pair
``(rid, i)``, and results are cut back into requests by the same code as in the live batcher,
so a test can check that every request got exactly its own outputs.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .cost_model import CostModel, CostPrior
from .policy import Admission, AdmissionKind, Lane, PolicyConfig
from .scheduler import Outcome, Scheduler, Step, split_outputs
from .traces import Trace, TraceRequest

__all__ = [
    "LinearService",
    "SchedulerLike",
    "SimResult",
    "load_service_fixture",
    "replay_fixture",
    "simulate",
]

# Same-instant order of events; lower first.
RANK_COMPLETE, RANK_CANCEL, RANK_ARRIVAL, RANK_CLOSE, RANK_WAKE = range(5)


@dataclass(frozen=True)
class LinearService:
    """Service time of batch number ``k`` (0-based, in dispatch order)::

    (fixed_ms + ms_per_ktoken * (tokens / 1000) + ms_per_kpadding * (padding / 1000))
        * noise[k % len(noise)]
    """

    fixed_ms: float
    ms_per_ktoken: float
    ms_per_kpadding: float = 0.0
    noise: tuple[float, ...] = (1.0,)
    name: str = "linear"

    def service_ms(self, k: int, tokens: int, padding: int) -> float:
        base = (
            self.fixed_ms
            + self.ms_per_ktoken * (tokens / 1000.0)
            + self.ms_per_kpadding * (padding / 1000.0)
        )
        return base * self.noise[k % len(self.noise)]

    def mean_ms(self, tokens: int, padding: int = 0) -> float:
        mean_noise = 0.0
        for x in self.noise:
            mean_noise += x
        mean_noise /= len(self.noise)
        return (
            self.fixed_ms
            + self.ms_per_ktoken * (tokens / 1000.0)
            + self.ms_per_kpadding * (padding / 1000.0)
        ) * mean_noise

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "linear",
            "name": self.name,
            "fixed_ms": self.fixed_ms,
            "ms_per_ktoken": self.ms_per_ktoken,
            "ms_per_kpadding": self.ms_per_kpadding,
            "noise": list(self.noise),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LinearService:
        return cls(
            float(d["fixed_ms"]),
            float(d["ms_per_ktoken"]),
            float(d.get("ms_per_kpadding", 0.0)),
            tuple(float(x) for x in d.get("noise", [1.0])),
            str(d.get("name", "linear")),
        )


def load_service_fixture(path: str | Path) -> LinearService:
    """The service model measured from a real embedder (``benchmarks/measure_service_time.py``)."""
    data = json.loads(Path(path).read_text())
    fit = data["fit"]
    return LinearService(
        float(fit["fixed_ms"]),
        float(fit["ms_per_ktoken"]),
        float(fit["ms_per_kpadding"]),
        tuple(float(x) for x in data["noise"]),
        name=f"measured:{data.get('model', '?')}:{data.get('variant', '?')}",
    )


class SchedulerLike(Protocol):
    """What the simulator needs from a scheduler (ours or a static baseline)."""

    def admit(
        self,
        now: float,
        rid: int,
        tokens: Sequence[int],
        *,
        lane: Lane = ...,
        deadline_ms: float | None = ...,
    ) -> Admission: ...

    def cancel(self, now: float, rid: int) -> bool: ...

    def step(self, now: float) -> Step: ...

    def complete(
        self,
        now: float,
        batch_id: int,
        service_ms: float | None,
        not_served: Mapping[int, Outcome] | None = ...,
    ) -> None: ...

    def close(self, now: float, drain: bool) -> tuple[int, ...]: ...

    @property
    def idle(self) -> bool: ...


@dataclass
class BatchRecord:
    batch_id: int
    worker: int
    start_ms: float
    end_ms: float
    rids: tuple[int, ...]
    tokens: int
    padding: int
    predicted_ms: float
    service_ms: float
    queued_after: tuple[int, ...] = ()


@dataclass
class SimResult:
    """Per-request outcomes and times, every batch, and the scheduler's decision log."""

    trace: Trace
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    end_ms: dict[int, float] = field(default_factory=dict)  # when the outcome was known
    batch_of: dict[int, int] = field(default_factory=dict)
    results: dict[int, list[Any]] = field(default_factory=dict)
    retry_after_ms: dict[int, float] = field(default_factory=dict)
    batches: list[BatchRecord] = field(default_factory=list)
    duration_ms: float = 0.0

    def latency_ms(self, rid: int) -> float:
        return self.end_ms[rid] - self.trace.requests[rid].arrival_ms


def simulate(
    trace: Trace,
    scheduler: SchedulerLike,
    service: LinearService,
    *,
    record_queue: bool = False,
    max_events: int = 10_000_000,
) -> SimResult:
    """Run ``trace`` to the end; every request gets exactly one outcome."""
    res = SimResult(trace)
    by_rid: dict[int, TraceRequest] = {r.rid: r for r in trace.requests}
    heap: list[tuple[float, int, int, str, Any]] = []
    seq = 0

    def push(t: float, rank: int, kind: str, data: Any) -> None:
        nonlocal seq
        heapq.heappush(heap, (t, rank, seq, kind, data))
        seq += 1

    for r in trace.requests:
        push(r.arrival_ms, RANK_ARRIVAL, "arrival", r.rid)
    if trace.close_at_ms is not None:
        push(trace.close_at_ms, RANK_CLOSE, "close", trace.drain)

    queued: set[int] = set()
    wake_gen = 0
    pending_wake: float | None = None
    dispatched = 0
    now = 0.0
    events = 0

    def resolve(rid: int, outcome: Outcome, t: float) -> None:
        if rid in res.outcomes:
            raise AssertionError(f"request {rid} resolved twice")
        res.outcomes[rid] = outcome
        res.end_ms[rid] = t
        queued.discard(rid)

    while heap:
        events += 1
        if events > max_events:
            raise RuntimeError("simulation did not finish (a scheduler that never dispatches?)")
        now, _, _, kind, data = heapq.heappop(heap)
        if kind == "wake":
            if data != wake_gen or pending_wake is None:
                continue
            pending_wake = None
        elif kind == "arrival":
            req = by_rid[data]
            adm = scheduler.admit(
                now, req.rid, req.tokens, lane=req.lane, deadline_ms=req.deadline_ms
            )
            if adm.kind is AdmissionKind.ACCEPT:
                queued.add(req.rid)
                if req.cancel_after_ms is not None:
                    push(now + req.cancel_after_ms, RANK_CANCEL, "cancel", req.rid)
            else:
                resolve(req.rid, _ADMISSION_OUTCOME[adm.kind], now)
                if adm.kind is AdmissionKind.OVERLOADED:
                    res.retry_after_ms[req.rid] = adm.retry_after_ms
        elif kind == "cancel":
            if scheduler.cancel(now, data):
                resolve(data, Outcome.CANCELLED, now)
        elif kind == "close":
            for rid in scheduler.close(now, data):
                resolve(rid, Outcome.CLOSED, now)
        elif kind == "complete":
            rec: BatchRecord = data
            scheduler.complete(now, rec.batch_id, rec.service_ms)
            outputs = [(rid, i) for rid in rec.rids for i in range(len(by_rid[rid].tokens))]
            counts = [len(by_rid[rid].tokens) for rid in rec.rids]
            for rid, out in zip(rec.rids, split_outputs(counts, outputs), strict=True):
                res.results[rid] = list(out)
                resolve(rid, Outcome.OK, now)

        step = scheduler.step(now)
        for rid in step.expired:
            resolve(rid, Outcome.DEADLINE, now)
        for d in step.dispatches:
            for rid in d.rids:
                if rid not in queued:
                    raise AssertionError(f"request {rid} dispatched but not queued")
                queued.discard(rid)
                res.batch_of[rid] = d.batch_id
            s = service.service_ms(dispatched, d.tokens, d.padding)
            dispatched += 1
            rec = BatchRecord(
                d.batch_id, d.worker, now, now + s, d.rids, d.tokens, d.padding, d.predicted_ms, s
            )
            if record_queue:
                rec.queued_after = tuple(sorted(queued))
            res.batches.append(rec)
            push(now + s, RANK_COMPLETE, "complete", rec)
        if step.wake_at is None:
            pending_wake = None
        elif step.wake_at != pending_wake:
            wake_gen += 1
            pending_wake = step.wake_at
            push(step.wake_at, RANK_WAKE, "wake", wake_gen)

    if not scheduler.idle or queued:
        raise AssertionError(f"simulation ended with requests still queued: {sorted(queued)}")
    res.duration_ms = now
    return res


_ADMISSION_OUTCOME = {
    AdmissionKind.OVERLOADED: Outcome.OVERLOADED,
    AdmissionKind.DEADLINE: Outcome.DEADLINE,
    AdmissionKind.CLOSED: Outcome.CLOSED,
}


FIXTURE_FORMAT = "edgembed-batching-trace"
FIXTURE_VERSION = 1


def replay_fixture(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Replay a trace fixture (docs/batching.md, "Trace fixtures") and return its ``expected``.

    The document gives the policy ``config``, the ``cost_prior`` (warm start), the ``service``
    model and the ``trace``; the result holds the scheduler's decision ``log``, each request's
    ``outcomes`` and the ``final`` state of the learned quantities.
    """
    if doc.get("format") != FIXTURE_FORMAT or doc.get("version") != FIXTURE_VERSION:
        raise ValueError(
            f"not a {FIXTURE_FORMAT} version {FIXTURE_VERSION} document; regenerate it with "
            "python tests/fixtures/batching/make_traces.py"
        )
    c = doc["config"]
    cfg = PolicyConfig(
        latency_target_ms=float(c["latency_target_ms"]),
        bulk_latency_target_ms=float(c["bulk_latency_target_ms"]),
        max_batch_tokens=int(c["max_batch_tokens"]),
        max_queue=int(c["max_queue"]),
        workers=int(c["workers"]),
        shed=bool(c["shed"]),
    )
    model = CostModel(CostPrior.from_dict(dict(doc["cost_prior"])), float(c["percentile"]))
    sched = Scheduler(cfg, model, record=True)
    trace = Trace.from_json(doc["trace"])
    res = simulate(trace, sched, LinearService.from_json(doc["service"]))
    outcomes = [
        {
            "rid": r.rid,
            "outcome": res.outcomes[r.rid].value,
            "end_ms": res.end_ms[r.rid],
            "batch": res.batch_of.get(r.rid),
        }
        for r in trace.requests
    ]
    return {
        "log": sched.log,
        "outcomes": outcomes,
        "final": {
            "cost_model": model.snapshot(),
            "miss_budget": sched.miss_budget,
            "calibration": sched.calibration,
            "pad_ratio": sched.dispatches.pad_ratio,
            "arrival_gap_ms": sched.arrivals.gap_ms,
            "arrival_tokens": sched.arrivals.tokens,
        },
    }
