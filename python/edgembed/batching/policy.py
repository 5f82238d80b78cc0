"""The batcher's decisions, as pure functions of the clock and the queue.

Nothing here reads a clock, sleeps or keeps state: each function takes ``now`` (milliseconds on
whatever clock the caller runs — the simulator's virtual one or ``time.monotonic``) and returns a
decision. The same functions therefore run in the simulator and in the live batcher, and a trace
replayed through them gives the same decisions in Python and in the JavaScript port. Arithmetic
is plain double precision in a fixed order; docs/batching.md states the algorithm step by step.

Vocabulary: a *request* is one call of ``embed``/``submit`` (one or more texts, never split); its
*due* time is ``min(arrival + lane target, deadline)``; it is *urgent* when it is interactive or
its due time is within one interactive latency target (this is how bulk work ages); the queue is
served in ``order_key`` order: urgent first, then earliest due, then first come.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from .cost_model import CostModel

__all__ = [
    "Admission",
    "AdmissionKind",
    "ArrivalStats",
    "Batch",
    "Decision",
    "DispatchStats",
    "Lane",
    "PolicyConfig",
    "Request",
    "admit",
    "calibrate",
    "decide",
    "expired",
    "form_batch",
    "length_bucket",
    "order_key",
    "plan_latency",
    "settle_miss_budget",
    "update_arrivals",
    "update_dispatches",
    "urgent",
]

ARRIVAL_RATE = 0.125  # EWMA rate of the inter-arrival gap and of the request size
DISPATCH_RATE = 0.125  # EWMA rate of the padding per token of dispatched batches
MAX_PLAN_BATCHES = 32  # admission plans at most this many batches ahead
RETRY_CAP_MS = 60_000.0  # longest retry-after hint
MISS_BUDGET_CAP = 2.0  # bound of the miss budget, in requests
CALIBRATION_RATE = 0.05  # relative step of the admission calibration per served request
CALIBRATION_MIN = 0.85  # the calibration stays within [CALIBRATION_MIN, CALIBRATION_MAX]
CALIBRATION_MAX = 4.0
URGENT_HORIZON_BATCHES = 2.0  # a request due within this many full batches is served first


class Lane(str, Enum):
    """Priority lane of a request."""

    INTERACTIVE = "interactive"
    BULK = "bulk"


@dataclass(frozen=True)
class PolicyConfig:
    """Everything the decisions depend on besides the queue, the clock and the cost model."""

    latency_target_ms: float = 50.0
    bulk_latency_target_ms: float = 500.0
    max_batch_tokens: int = 4096
    max_queue: int = 1024
    workers: int = 1
    shed: bool = True

    def __post_init__(self) -> None:
        if self.latency_target_ms <= 0:
            raise ValueError("latency_target_ms must be positive")
        if self.bulk_latency_target_ms < self.latency_target_ms:
            raise ValueError("bulk_latency_target_ms must be at least latency_target_ms")
        if self.max_batch_tokens < 1 or self.max_queue < 1 or self.workers < 1:
            raise ValueError("max_batch_tokens, max_queue and workers must be at least 1")

    def lane_target_ms(self, lane: Lane) -> float:
        return self.latency_target_ms if lane is Lane.INTERACTIVE else self.bulk_latency_target_ms


@dataclass(frozen=True)
class Request:
    """What the policy knows of a queued request. Times are absolute ms on the caller's clock."""

    rid: int
    arrival_ms: float
    lane: Lane
    due_ms: float
    deadline_ms: float | None  # absolute; None when the caller gave none
    tokens: int  # sum over the request's texts
    n_texts: int
    max_len: int  # tokens of its longest text


@dataclass(frozen=True)
class DispatchStats:
    """Running view of the batches started, updated on each dispatch."""

    pad_ratio: float = 0.0  # EWMA of padding / tokens of a batch


def update_dispatches(stats: DispatchStats, tokens: int, padding: int) -> DispatchStats:
    """Fold one dispatched batch into the dispatch statistics."""
    if tokens <= 0:
        return stats
    return DispatchStats(stats.pad_ratio + DISPATCH_RATE * (padding / tokens - stats.pad_ratio))


@dataclass(frozen=True)
class ArrivalStats:
    """Running view of the arrival process, updated on each admitted interactive request."""

    last_ms: float | None = None
    gap_ms: float | None = None  # EWMA of the time between admitted requests
    tokens: float | None = None  # EWMA of the tokens of a request


def update_arrivals(stats: ArrivalStats, now: float, tokens: int) -> ArrivalStats:
    """Fold one admitted request arriving at ``now`` into the arrival statistics."""
    size = (
        float(tokens)
        if stats.tokens is None
        else stats.tokens + ARRIVAL_RATE * (tokens - stats.tokens)
    )
    if stats.last_ms is None:
        return ArrivalStats(last_ms=now, gap_ms=None, tokens=size)
    gap = now - stats.last_ms
    if gap < 0.0:
        gap = 0.0
    mean_gap = gap if stats.gap_ms is None else stats.gap_ms + ARRIVAL_RATE * (gap - stats.gap_ms)
    return ArrivalStats(last_ms=now, gap_ms=mean_gap, tokens=size)


def urgent(req: Request, now: float, cfg: PolicyConfig) -> bool:
    """Interactive, or (bulk) due within one interactive latency target: bulk work ages."""
    return req.lane is Lane.INTERACTIVE or now >= req.due_ms - cfg.latency_target_ms


def order_key(req: Request, now: float, cfg: PolicyConfig) -> tuple[int, float, int]:
    return (0 if urgent(req, now, cfg) else 1, req.due_ms, req.rid)


def length_bucket(max_len: int) -> int:
    """Power-of-two length class: the number of bits of ``max_len`` (0 for 0)."""
    return max_len.bit_length()


def padding_of(n_texts: int, max_len: int, tokens: int) -> int:
    """Padding tokens if every text of a batch were padded to its longest text."""
    return n_texts * max_len - tokens


@dataclass(frozen=True)
class Batch:
    requests: tuple[Request, ...]
    tokens: int
    padding: int
    full: bool  # a queued request was left out for token budget or time

    @property
    def rids(self) -> tuple[int, ...]:
        return tuple(r.rid for r in self.requests)


def _batch_padding(reqs: list[Request], tokens: int) -> int:
    n = 0
    longest = 0
    for r in reqs:
        n += r.n_texts
        longest = max(longest, r.max_len)
    return padding_of(n, longest, tokens)


def form_batch(
    now: float, queue: list[Request], model: CostModel, cfg: PolicyConfig
) -> Batch | None:
    """The batch to run next, chosen from ``queue`` (any order); None if the queue is empty.

    The first request in ``order_key`` order (the seed) always goes in, even alone over the token
    budget. Then the urgent class, then the others, offer their requests: in key order when the
    whole class fits the remaining budget; otherwise requests due before two full batches could
    finish come first (key order), then the rest by closeness of length class to the seed (then
    key order), which groups similar lengths and limits padding.

    A candidate joins if the batch with it still fits the token budget, is still predicted (with
    the margin) to take no longer than the tightest lane target among its members — a batch
    that takes longer than the target makes every member miss it — and still finishes (mean
    prediction) by every member's deadline. A candidate left out for budget or time marks the
    batch ``full`` (waiting cannot grow it); then no non-urgent request joins.
    """
    if not queue:
        return None
    order = sorted(queue, key=lambda r: order_key(r, now, cfg))
    seed = order[0]
    chosen = [seed]
    tokens = seed.tokens
    budget = cfg.max_batch_tokens
    if tokens >= budget:
        return Batch((seed,), tokens, _batch_padding(chosen, tokens), full=len(order) > 1)

    classes: tuple[list[Request], list[Request]] = ([], [])
    for r in order[1:]:
        classes[0 if urgent(r, now, cfg) else 1].append(r)

    horizon = now + URGENT_HORIZON_BATCHES * model.predict_margin(float(budget))
    seed_bucket = length_bucket(seed.max_len)
    n_texts = seed.n_texts
    longest = seed.max_len
    min_deadline = seed.deadline_ms
    cap = cfg.lane_target_ms(seed.lane)
    full = False
    for cls, members in enumerate(classes):
        if cls == 1 and full:
            break
        total = 0
        for r in members:
            total += r.tokens
        if tokens + total <= budget:
            candidates = members
        else:
            soon = [r for r in members if r.due_ms <= horizon]
            later = [r for r in members if r.due_ms > horizon]
            later.sort(
                key=lambda r: (abs(length_bucket(r.max_len) - seed_bucket), *order_key(r, now, cfg))
            )
            candidates = soon + later
        for r in candidates:
            if tokens + r.tokens > budget:
                full = True
                continue
            new_n = n_texts + r.n_texts
            new_longest = max(longest, r.max_len)
            new_tokens = tokens + r.tokens
            predicted = model.predict(
                float(new_tokens), float(padding_of(new_n, new_longest, new_tokens))
            )
            new_cap = min(cap, cfg.lane_target_ms(r.lane))
            if model.margin * predicted > new_cap:
                full = True
                continue
            deadline = min_deadline
            if r.deadline_ms is not None and (deadline is None or r.deadline_ms < deadline):
                deadline = r.deadline_ms
            if deadline is not None and now + predicted > deadline:
                continue
            chosen.append(r)
            tokens = new_tokens
            n_texts = new_n
            longest = new_longest
            min_deadline = deadline
            cap = new_cap
    return Batch(tuple(chosen), tokens, padding_of(n_texts, longest, tokens), full)


@dataclass(frozen=True)
class Decision:
    """``batch`` to dispatch now, or (``batch`` None) wait until ``wait_until`` at the latest."""

    batch: Batch | None
    wait_until: float | None = None
    reason: str = ""


def decide(
    now: float,
    queue: list[Request],
    model: CostModel,
    arrivals: ArrivalStats,
    cfg: PolicyConfig,
    closing: bool = False,
) -> Decision:
    """With a worker free: dispatch a batch now, or wait for more requests, and until when.

    Waiting for the next request pays when the fixed cost it saves (it would otherwise queue
    behind this batch and then run in a batch of its own) exceeds the delay it adds to every
    request already in the batch; with expected gap ``g`` it pays while ``g < g*`` where::

        g* = (P(B) + P(x) - P(B+x) - n * (P(B+x) - P(B))) / (n + 1),  capped at P(B)

    (``P`` the mean prediction, ``n`` the requests in ``B``, ``x`` a typical request). The gap
    is never taken as shorter than the silence since the last arrival, so waiting ends by itself
    ``g*`` after the last arrival. It also ends when one more expected gap would make the batch's
    most urgent request miss its due time under the margined prediction.
    """
    batch = form_batch(now, queue, model, cfg)
    if batch is None:
        return Decision(None, None, "empty")
    if closing:
        return Decision(batch, None, "closing")
    if batch.full:
        return Decision(batch, None, "full")
    gap = arrivals.gap_ms
    last = arrivals.last_ms
    typical = arrivals.tokens
    if gap is None or last is None or typical is None:
        return Decision(batch, None, "no-rate")
    if batch.tokens + typical > cfg.max_batch_tokens:
        return Decision(batch, None, "full")

    n = float(len(batch.requests))
    p_b = model.predict(float(batch.tokens), float(batch.padding))
    p_bx = model.predict(float(batch.tokens) + typical, float(batch.padding))
    p_x = model.predict(typical, 0.0)
    g_star = (p_b + p_x - p_bx - n * (p_bx - p_b)) / (n + 1.0)
    if g_star > p_b:
        g_star = p_b
    if not gap < g_star:
        return Decision(batch, None, "waiting-cannot-pay")

    due = batch.requests[0].due_ms
    for r in batch.requests:
        if r.due_ms < due:
            due = r.due_ms
    slack_end = due - model.margin * p_bx
    # Latest t with t + max(gap, t - last) <= slack_end: the silence counts as the gap.
    t_slack = slack_end - gap if slack_end - gap <= last + gap else (slack_end + last) / 2.0
    t_pay = last + g_star
    latest = min(t_pay, t_slack)
    if now < latest:
        return Decision(None, latest, "wait")
    return Decision(batch, None, "slack" if t_slack <= t_pay else "silence")


def expired(
    now: float,
    queue: list[Request],
    model: CostModel,
    earliest_start: float,
    busy: bool = False,
) -> tuple[list[Request], float | None]:
    """Requests that can no longer meet their deadline, and when the next one would expire.

    A request expires when, started alone at ``earliest_start`` (now if a worker is free, else
    the earliest predicted end of a running batch), its mean predicted service time would end
    after its deadline. When every worker is ``busy``, the request cannot start before some
    later instant, so it also expires once ``now + alone`` reaches its deadline (running
    batches may overrun their prediction; the request still fails by its deadline, not after).
    The second value is the earliest future time at which a remaining request would expire if
    nothing else happened.
    """
    gone: list[Request] = []
    next_at: float | None = None
    for r in queue:
        if r.deadline_ms is None:
            continue
        alone = model.predict(float(r.tokens), float(padding_of(r.n_texts, r.max_len, r.tokens)))
        if earliest_start + alone > r.deadline_ms or (busy and now + alone >= r.deadline_ms):
            gone.append(r)
            continue
        t = r.deadline_ms - alone
        if t > now and (next_at is None or t < next_at):
            next_at = t
    return gone, next_at


class AdmissionKind(str, Enum):
    ACCEPT = "accept"
    OVERLOADED = "overloaded"
    DEADLINE = "deadline"
    CLOSED = "closed"


@dataclass(frozen=True)
class Admission:
    """Accept, or refuse with a reason (``queue``, ``slo``, ``deadline``, ``closed``).

    An acceptance with reason ``miss-budget`` is predicted to miss its target and was paid for
    from the miss budget. ``predicted_latency_ms`` is the calibrated plan, 0 when no plan was
    needed (the request starts at once, or shedding is off, or the queue is full).
    """

    kind: AdmissionKind
    retry_after_ms: float = 0.0
    predicted_latency_ms: float = 0.0
    reason: str = ""


def settle_miss_budget(budget: float, missed: bool, reserved: bool, percentile: float) -> float:
    """Update the miss budget after a request is served.

    Every served request adds ``1 - percentile`` (the share of misses the percentile allows);
    a miss costs 1. A request admitted although predicted to miss (``reserved``) paid 1 up
    front: it is refunded if it met its target after all. The budget stays within
    ``±MISS_BUDGET_CAP``, so a quiet period cannot bank a long burst of misses.
    """
    budget = budget + (1.0 - percentile)
    if reserved and not missed:
        budget = budget + 1.0
    elif missed and not reserved:
        budget = budget - 1.0
    return min(max(budget, -MISS_BUDGET_CAP), MISS_BUDGET_CAP)


def calibrate(factor: float, missed: bool, percentile: float) -> float:
    """Update the admission calibration, the factor on planned latencies, after a request.

    It rises by ``CALIBRATION_RATE * percentile`` (relative) on a miss and falls by
    ``CALIBRATION_RATE * (1 - percentile)`` on a hit, so it settles where a share
    ``1 - percentile`` of served requests miss — correcting a plan that is too optimistic under
    overload. It may also fall a little below 1 (to ``CALIBRATION_MIN``): the plan margins the
    request's own batch by a high quantile of the cost model's error, so at steady high load it
    over-predicts, and trusting it in full would shed requests that would have kept the target.
    """
    if missed:
        factor = factor * (1.0 + CALIBRATION_RATE * percentile)
    else:
        factor = factor * (1.0 - CALIBRATION_RATE * (1.0 - percentile))
    return min(max(factor, CALIBRATION_MIN), CALIBRATION_MAX)


def plan_latency(
    now: float,
    req: Request,
    queue: list[Request],
    model: CostModel,
    cfg: PolicyConfig,
    worker_free_ms: list[float],
    arrivals: ArrivalStats,
    dispatches: DispatchStats,
) -> float:
    """Predicted latency of ``req`` if it joined ``queue`` now.

    Plans the batches :func:`form_batch` would form from the queue, each started on the worker
    that frees first (``worker_free_ms``: when each worker frees, by mean prediction), until
    ``req`` is in one. Earlier batches count at their mean prediction; ``req``'s own batch with
    the margin, grown by the tokens expected to arrive before it starts (arrival statistics,
    up to the token budget), with the recent padding per token of dispatched batches. Infinity
    if ``req`` is not placed within ``MAX_PLAN_BATCHES``.
    """
    free = sorted(t if t > now else now for t in worker_free_ms)
    pending = [*queue, req]
    for _ in range(MAX_PLAN_BATCHES):
        start = free[0]
        batch = form_batch(start, pending, model, cfg)
        if batch is None:
            break
        mean = model.predict(float(batch.tokens), float(batch.padding))
        if any(r.rid == req.rid for r in batch.requests):
            # Requests arriving until the batch starts join it (up to the budget) and delay it.
            extra = 0.0
            if arrivals.gap_ms is not None and arrivals.tokens is not None and start > now:
                if arrivals.gap_ms > 0.0:
                    extra = (start - now) / arrivals.gap_ms * arrivals.tokens
                else:
                    extra = float(cfg.max_batch_tokens)
                room = float(cfg.max_batch_tokens - batch.tokens)
                if extra > room:
                    extra = room if room > 0.0 else 0.0
            grown = model.predict(
                float(batch.tokens) + extra, float(batch.padding) + extra * dispatches.pad_ratio
            )
            return start + model.margin * grown - now
        free[0] = start + mean
        free.sort()
        taken = set(batch.rids)
        pending = [r for r in pending if r.rid not in taken]
    return math.inf


def admit(
    now: float,
    req: Request,
    queue: list[Request],
    model: CostModel,
    cfg: PolicyConfig,
    worker_free_ms: list[float],
    arrivals: ArrivalStats,
    dispatches: DispatchStats,
    miss_budget: float,
    calibration: float = 1.0,
) -> Admission:
    """Accept ``req`` or refuse it at once: queue full, predicted to miss its target, deadline.

    ``req`` is predicted to miss when :func:`plan_latency` exceeds its lane's target. It is
    then still accepted if the miss budget (see :func:`settle_miss_budget`) holds a whole
    request — the percentile allows some misses, and spending them on bursts keeps throughput
    where a static batcher would also have kept the target — with reason ``miss-budget``.
    Otherwise (with ``shed``) it is refused with
    ``Overloaded`` and a retry-after of the predicted excess (at least one full batch): under
    lasting overload a request that would miss only delays the ones behind it. A request that
    would start at once (a worker is free, nothing is queued before it) is never shed: refusing
    it would help neither it nor anyone.
    """
    full_batch_ms = model.predict(float(cfg.max_batch_tokens))
    if len(queue) >= cfg.max_queue:
        return Admission(AdmissionKind.OVERLOADED, full_batch_ms, 0.0, "queue")
    key = order_key(req, now, cfg)
    starts_now = False
    for t in worker_free_ms:
        if t <= now:
            starts_now = True
    for r in queue:
        if order_key(r, now, cfg) < key:
            starts_now = False
            break
    latency = 0.0
    reserved = False
    target = cfg.lane_target_ms(req.lane)
    if cfg.shed and not starts_now:
        plan = plan_latency(now, req, queue, model, cfg, worker_free_ms, arrivals, dispatches)
        latency = calibration * plan
        if latency > target:
            if miss_budget < 1.0:
                excess = latency - target
                retry = excess if excess < RETRY_CAP_MS else RETRY_CAP_MS
                return Admission(
                    AdmissionKind.OVERLOADED, max(retry, full_batch_ms), latency, "slo"
                )
            reserved = True
    if req.deadline_ms is not None:
        alone = model.predict(
            float(req.tokens), float(padding_of(req.n_texts, req.max_len, req.tokens))
        )
        if now + alone > req.deadline_ms:
            return Admission(AdmissionKind.DEADLINE, 0.0, latency, "deadline")
    return Admission(AdmissionKind.ACCEPT, 0.0, latency, "miss-budget" if reserved else "")
