"""The batcher's pure decisions, with a fixed cost model so every number can be checked."""

from __future__ import annotations

import math

import pytest

from edgembed.batching.cost_model import CostModel, CostPrior
from edgembed.batching.policy import (
    CALIBRATION_MAX,
    CALIBRATION_MIN,
    MISS_BUDGET_CAP,
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
    form_batch,
    order_key,
    plan_latency,
    settle_miss_budget,
    update_arrivals,
    urgent,
)


def fixed_model(
    fixed: float = 2.0, per_k: float = 10.0, per_kpad: float = 0.0, margin: float = 1.0
) -> CostModel:
    """A cost model that has observed nothing: it predicts exactly its prior."""
    return CostModel(CostPrior(fixed, per_k, per_kpad, margin=margin))


def make(
    rid: int,
    arrival: float,
    tokens: int | list[int],
    cfg: PolicyConfig,
    lane: Lane = Lane.INTERACTIVE,
    deadline: float | None = None,
) -> Request:
    toks = tokens if isinstance(tokens, list) else [tokens]
    due = arrival + cfg.lane_target_ms(lane)
    absolute = None if deadline is None else arrival + deadline
    if absolute is not None and absolute < due:
        due = absolute
    return Request(rid, arrival, lane, due, absolute, sum(toks), len(toks), max(toks))


CFG = PolicyConfig(latency_target_ms=50.0, bulk_latency_target_ms=500.0, max_batch_tokens=1000)


def test_fills_in_arrival_order_up_to_the_token_budget() -> None:
    q = [make(i, float(i), 300, CFG) for i in range(5)]
    b = form_batch(10.0, q, fixed_model(), CFG)
    assert b is not None
    assert b.rids == (0, 1, 2)
    assert b.tokens == 900
    assert b.full  # request 3 did not fit


def test_a_request_over_the_budget_runs_alone() -> None:
    q = [make(0, 0.0, 5000, CFG), make(1, 1.0, 10, CFG)]
    b = form_batch(2.0, q, fixed_model(), CFG)
    assert b is not None and b.rids == (0,) and b.full


def test_padding_is_counted_to_the_longest_text() -> None:
    q = [make(0, 0.0, [10, 40], CFG), make(1, 1.0, 25, CFG)]
    b = form_batch(2.0, q, fixed_model(), CFG)
    assert b is not None and b.tokens == 75 and b.padding == 3 * 40 - 75


def test_bulk_waits_while_an_interactive_request_is_left_out() -> None:
    q = [
        make(0, 0.0, 600, CFG),
        make(1, 1.0, 600, CFG),  # does not fit after 0
        make(2, 2.0, 100, CFG, Lane.BULK),  # would fit, but is not urgent
    ]
    b = form_batch(3.0, q, fixed_model(), CFG)
    assert b is not None and b.rids == (0,) and b.full
    q2 = [make(0, 0.0, 600, CFG), make(2, 2.0, 100, CFG, Lane.BULK)]
    b2 = form_batch(3.0, q2, fixed_model(), CFG)
    assert b2 is not None and b2.rids == (0, 2)


def test_bulk_ages_into_the_urgent_class() -> None:
    bulk = make(0, 0.0, 100, CFG, Lane.BULK)  # due at 500
    inter = make(1, 460.0, 100, CFG)  # due at 510
    assert not urgent(bulk, 449.0, CFG)
    assert urgent(bulk, 450.0, CFG)  # 500 - 50
    assert order_key(inter, 449.0, CFG) < order_key(bulk, 449.0, CFG)
    assert order_key(bulk, 460.0, CFG) < order_key(inter, 460.0, CFG)
    b = form_batch(460.0, [inter, bulk], fixed_model(), CFG)
    assert b is not None and b.rids == (0, 1)


def test_a_batch_never_takes_longer_than_the_target() -> None:
    cfg = PolicyConfig(latency_target_ms=50.0, max_batch_tokens=100_000)
    q = [make(i, 0.0, 1000, cfg) for i in range(10)]
    # 2 ms + 10 ms per 1k tokens: four requests take 42 ms, five 52 ms > 50 ms.
    b = form_batch(0.0, q, fixed_model(), cfg)
    assert b is not None and b.rids == (0, 1, 2, 3) and b.full
    # The margin counts: at 1.25 three requests (40 ms) are the most.
    b = form_batch(0.0, q, fixed_model(margin=1.25), cfg)
    assert b is not None and b.rids == (0, 1, 2)


def test_no_request_joins_a_batch_it_would_make_miss_a_deadline() -> None:
    cfg = PolicyConfig(max_batch_tokens=100_000)
    q = [make(0, 0.0, 1000, cfg, deadline=13.0), make(1, 0.0, 100, cfg), make(2, 0.0, 1000, cfg)]
    # Alone 12 ms; with 1: 13 ms (meets 13); with 2 as well: 23 ms.
    b = form_batch(0.0, q, fixed_model(), cfg)
    assert b is not None and b.rids == (0, 1)
    assert not b.full  # left out for the deadline only: it may run right after


def test_overflow_groups_similar_lengths() -> None:
    cfg = PolicyConfig(latency_target_ms=50.0, max_batch_tokens=300)
    q = [
        make(0, 0.0, 20, cfg),  # seed, length class 5
        make(1, 0.1, 200, cfg),  # class 8
        make(2, 0.2, 25, cfg),  # class 5
        make(3, 0.3, 60, cfg),  # class 6
        make(4, 0.4, 30, cfg),  # class 5
    ]
    # Everything is due in ~50 ms and two full batches take 2 * 5 ms: none is "soon",
    # so the class overflows the budget and the closest lengths go first.
    b = form_batch(1.0, q, fixed_model(), cfg)
    assert b is not None and b.rids == (0, 2, 4, 3) and b.full


def test_decide_waits_while_the_next_request_pays() -> None:
    model = fixed_model(fixed=10.0, per_k=1.0)
    q = [make(0, 0.0, 10, CFG)]
    arrivals = ArrivalStats(last_ms=0.0, gap_ms=1.0, tokens=10.0)
    d = decide(0.0, q, model, arrivals, CFG)
    # P(B)=10.01, P(x)=10.01, P(B+x)=10.02, n=1: g* = (10.01+10.01-10.02-0.01)/2.
    g_star = (10.01 + 10.01 - 10.02 - 1 * (10.02 - 10.01)) / 2
    assert d.batch is None
    assert d.reason == "wait"
    assert d.wait_until == pytest.approx(g_star)
    assert d.wait_until is not None
    d = decide(d.wait_until, q, model, arrivals, CFG)
    assert d.batch is not None and d.reason == "silence"


def test_decide_stops_waiting_before_the_due_time() -> None:
    model = fixed_model(fixed=10.0, per_k=1.0)
    cfg = PolicyConfig(latency_target_ms=12.0, max_batch_tokens=1000)
    q = [make(0, 0.0, 10, cfg)]
    d = decide(0.0, q, model, ArrivalStats(0.0, 1.0, 10.0), cfg)
    # due 12, P(B+x) 10.02: one more gap of 1 ms is affordable until 12 - 10.02 - 1 = 0.98.
    assert d.batch is None and d.wait_until == pytest.approx(0.98)
    assert d.wait_until is not None
    d = decide(d.wait_until, q, model, ArrivalStats(0.0, 1.0, 10.0), cfg)
    assert d.batch is not None and d.reason == "slack"


def test_decide_dispatches_when_waiting_cannot_pay() -> None:
    model = fixed_model(fixed=10.0, per_k=1.0)
    q = [make(0, 0.0, 10, CFG)]
    d = decide(0.0, q, model, ArrivalStats(0.0, 6.0, 10.0), CFG)  # gap 6 > g* ~ 5
    assert d.batch is not None and d.reason == "waiting-cannot-pay"
    d = decide(0.0, q, model, ArrivalStats(0.0, None, 10.0), CFG)
    assert d.batch is not None and d.reason == "no-rate"
    d = decide(0.0, q, model, ArrivalStats(0.0, 1.0, 10.0), CFG, closing=True)
    assert d.batch is not None and d.reason == "closing"
    assert decide(0.0, [], model, ArrivalStats(), CFG).reason == "empty"


def test_a_cheap_fixed_cost_means_no_waiting() -> None:
    model = fixed_model(fixed=0.1, per_k=100.0)
    q = [make(0, 0.0, 50, CFG), make(1, 0.0, 50, CFG)]
    d = decide(0.0, q, model, ArrivalStats(0.0, 0.5, 50.0), CFG)
    assert d.batch is not None and d.batch.rids == (0, 1)


def test_expired_fails_what_cannot_make_its_deadline() -> None:
    model = fixed_model(fixed=10.0, per_k=0.0)
    q = [
        make(0, 0.0, 10, CFG, deadline=5.0),
        make(1, 0.0, 10, CFG, deadline=30.0),
        make(2, 0.0, 10, CFG),
    ]
    gone, next_at = expired(0.0, q, model, earliest_start=0.0)
    assert [r.rid for r in gone] == [0]
    assert next_at == 20.0
    gone, _ = expired(0.0, q, model, earliest_start=25.0)  # all workers busy until 25
    assert [r.rid for r in gone] == [0, 1]


def test_plan_latency_counts_the_batches_ahead() -> None:
    model = fixed_model(fixed=2.0, per_k=10.0, margin=1.5)
    q = [make(i, 0.0, 1000, CFG) for i in range(3)]  # one full batch each
    new = make(3, 1.0, 100, CFG)
    # A worker frees at 5: three batches of 12 ms, then 3 ms for the new one, with margin.
    lat = plan_latency(1.0, new, q, model, CFG, [5.0], ArrivalStats(), DispatchStats())
    assert lat == pytest.approx(5.0 + 3 * 12.0 + 1.5 * 3.0 - 1.0)
    # Two workers: batches go to whichever frees first.
    lat = plan_latency(
        1.0,
        new,
        q,
        model,
        PolicyConfig(max_batch_tokens=1000, workers=2),
        [5.0, 1.0],
        ArrivalStats(),
        DispatchStats(),
    )
    assert lat == pytest.approx(17.0 + 1.5 * 3.0 - 1.0)
    # Requests expected before its batch starts (every 2 ms, 50 tokens) join it.
    lat = plan_latency(
        1.0, new, q, model, CFG, [5.0], ArrivalStats(1.0, 2.0, 50.0), DispatchStats(0.5)
    )
    extra = min((41.0 - 1.0) / 2.0 * 50.0, 900.0)
    assert lat == pytest.approx(41.0 + 1.5 * (2.0 + 10.0 * (100 + extra) / 1000) - 1.0)


def test_admission() -> None:
    model = fixed_model(fixed=2.0, per_k=10.0)
    cfg = PolicyConfig(latency_target_ms=50.0, max_batch_tokens=1000, max_queue=5)
    busy = [make(i, 0.0, 1000, cfg) for i in range(4)]  # 48 ms of work ahead
    new = make(9, 1.0, 100, cfg)

    a = admit(1.0, new, busy, model, cfg, [1.0], ArrivalStats(), DispatchStats(), miss_budget=0.0)
    assert a.kind is AdmissionKind.OVERLOADED and a.reason == "slo"
    assert a.predicted_latency_ms == pytest.approx(4 * 12.0 + 3.0)
    assert a.retry_after_ms == 12.0  # the excess (1 ms) is below one full batch
    a = admit(1.0, new, busy, model, cfg, [1.0], ArrivalStats(), DispatchStats(), miss_budget=1.0)
    assert a.kind is AdmissionKind.ACCEPT and a.reason == "miss-budget"
    a = admit(
        1.0, new, busy[:3], model, cfg, [1.0], ArrivalStats(), DispatchStats(), miss_budget=0.0
    )
    assert a.kind is AdmissionKind.ACCEPT and a.reason == ""

    full = [*busy, make(5, 0.0, 10, cfg)]
    a = admit(1.0, new, full, model, cfg, [1.0], ArrivalStats(), DispatchStats(), miss_budget=2.0)
    assert a.kind is AdmissionKind.OVERLOADED and a.reason == "queue"

    huge = make(9, 1.0, 10_000, cfg)  # 102 ms alone, but nothing is queued before it
    a = admit(1.0, huge, [], model, cfg, [1.0], ArrivalStats(), DispatchStats(), miss_budget=0.0)
    assert a.kind is AdmissionKind.ACCEPT

    hurried = make(9, 1.0, 100, cfg, deadline=2.0)
    a = admit(1.0, hurried, [], model, cfg, [1.0], ArrivalStats(), DispatchStats(), miss_budget=0.0)
    assert a.kind is AdmissionKind.DEADLINE

    no_shed = PolicyConfig(latency_target_ms=50.0, max_batch_tokens=1000, shed=False)
    a = admit(
        1.0, new, busy, model, no_shed, [1.0], ArrivalStats(), DispatchStats(), miss_budget=0.0
    )
    assert a.kind is AdmissionKind.ACCEPT


def test_miss_budget_arithmetic() -> None:
    b = settle_miss_budget(0.0, missed=False, reserved=False, percentile=0.99)
    assert b == pytest.approx(0.01)
    assert settle_miss_budget(0.0, True, False, 0.99) == pytest.approx(-0.99)
    assert settle_miss_budget(-1.0, False, True, 0.99) == pytest.approx(0.01)  # refunded
    assert settle_miss_budget(-1.0, True, True, 0.99) == pytest.approx(-0.99)  # paid already
    assert settle_miss_budget(MISS_BUDGET_CAP, False, True, 0.9) == MISS_BUDGET_CAP
    assert settle_miss_budget(-MISS_BUDGET_CAP, True, False, 0.9) == -MISS_BUDGET_CAP


def test_calibration_steps_and_bounds() -> None:
    assert calibrate(1.0, missed=True, percentile=0.99) == pytest.approx(1.0 + 0.05 * 0.99)
    assert calibrate(1.0, missed=False, percentile=0.99) == pytest.approx(1.0 - 0.05 * 0.01)
    f = 1.0
    for _ in range(100_000):  # hits only: the plan was pessimistic; trusted down to the floor
        f = calibrate(f, missed=False, percentile=0.9)
    assert f == CALIBRATION_MIN == 0.85
    for _ in range(1_000):  # misses only: capped
        f = calibrate(f, missed=True, percentile=0.9)
    assert f == CALIBRATION_MAX


def test_arrival_statistics() -> None:
    s = update_arrivals(ArrivalStats(), 10.0, 40)
    assert s == ArrivalStats(10.0, None, 40.0)
    s = update_arrivals(s, 14.0, 8)
    assert s == ArrivalStats(14.0, 4.0, 40.0 + 0.125 * (8 - 40.0))
    s = update_arrivals(s, 14.0, 8)
    assert s.gap_ms == 4.0 + 0.125 * (0.0 - 4.0)


def test_config_is_checked() -> None:
    with pytest.raises(ValueError):
        PolicyConfig(latency_target_ms=0)
    with pytest.raises(ValueError):
        PolicyConfig(latency_target_ms=100, bulk_latency_target_ms=50)
    with pytest.raises(ValueError):
        PolicyConfig(workers=0)
    assert math.isfinite(CFG.lane_target_ms(Lane.BULK))
