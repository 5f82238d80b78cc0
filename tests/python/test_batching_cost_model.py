"""The online service-time model: fit, robustness, warm start, margin."""

from __future__ import annotations

import random

import pytest

from edgembed.batching.cost_model import (
    MARGIN_MIN_SAMPLES,
    CostModel,
    CostPrior,
    _solve3,
)


def _feed(
    model: CostModel,
    n: int,
    truth: tuple[float, float, float],
    seed: int = 0,
    noise: float = 0.0,
    outliers: float = 0.0,
) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        tokens = rng.randint(10, 2000)
        padding = rng.randint(0, 500)
        y = truth[0] + truth[1] * tokens / 1000 + truth[2] * padding / 1000
        y *= 1.0 + rng.uniform(-noise, noise)
        if rng.random() < outliers:
            y *= 10.0
        model.observe(tokens, padding, y)


def test_solve3_solves_a_known_system() -> None:
    a = [[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]]
    x = [1.5, -2.0, 0.75]
    b = [sum(a[i][j] * x[j] for j in range(3)) for i in range(3)]
    assert _solve3(a, b) == pytest.approx(x, rel=1e-12)


def test_learns_the_coefficients_of_a_linear_service() -> None:
    model = CostModel(CostPrior(fixed_ms=1.0, ms_per_ktoken=100.0, ms_per_kpadding=50.0))
    _feed(model, 300, (4.0, 20.0, 5.0))
    # Predictions over the range seen are what the policy uses; the prior (a quarter of a batch
    # against ~50 remembered ones) and the feature correlation leave a small coefficient bias.
    for tokens, padding in ((10, 0), (500, 100), (1000, 250), (2000, 500)):
        truth = 4.0 + 20.0 * tokens / 1000 + 5.0 * padding / 1000
        assert model.predict(tokens, padding) == pytest.approx(truth, rel=0.05)
    assert model.theta == pytest.approx([4.0, 20.0, 5.0], rel=0.1)
    assert model.observations == 300


def test_one_outlier_in_fifty_moves_the_fit_little() -> None:
    clean = CostModel()
    dirty = CostModel()
    _feed(clean, 400, (4.0, 20.0, 5.0), seed=3, noise=0.05)
    _feed(dirty, 400, (4.0, 20.0, 5.0), seed=3, noise=0.05, outliers=0.02)
    # Without clipping a 10x outlier in 50 batches would raise the mean prediction by ~18 %.
    assert dirty.predict(1000) == pytest.approx(clean.predict(1000), rel=0.05)


def test_a_lasting_slowdown_is_learned_within_the_models_memory() -> None:
    model = CostModel()
    _feed(model, 200, (4.0, 20.0, 0.0), seed=1)
    assert model.predict(1000) == pytest.approx(24.0, rel=0.03)
    _feed(model, 120, (8.0, 40.0, 0.0), seed=2)  # memory: about 50 batches
    assert model.predict(1000) == pytest.approx(48.0, rel=0.1)


def test_the_prior_stands_where_the_data_say_nothing() -> None:
    model = CostModel(CostPrior(fixed_ms=2.0, ms_per_ktoken=10.0, ms_per_kpadding=7.0))
    rng = random.Random(0)
    for _ in range(200):
        tokens = rng.randint(10, 1000)
        model.observe(tokens, 0, 3.0 + 30.0 * tokens / 1000)  # never any padding
    assert model.theta[2] == pytest.approx(7.0)
    assert model.predict(100) == pytest.approx(6.0, rel=0.02)
    assert model.predict(1000) == pytest.approx(33.0, rel=0.02)


def test_coefficients_never_go_negative() -> None:
    model = CostModel(CostPrior(fixed_ms=0.0, ms_per_ktoken=0.0, ms_per_kpadding=0.0))
    for tokens in range(100, 2000, 50):
        model.observe(tokens, 0, max(0.0, 5.0 - tokens / 1000))  # decreasing: slope < 0
    assert min(model.theta) >= 0.0


def test_margin_is_the_percentile_of_observed_over_predicted() -> None:
    prior = CostPrior(fixed_ms=10.0, ms_per_ktoken=0.0, ms_per_kpadding=0.0, weight=1e9, margin=1.7)
    model = CostModel(prior, percentile=0.9)
    ratios = [1.0 + i / 100 for i in range(20)]  # 1.00 .. 1.19
    for i, r in enumerate(ratios):
        assert model.margin == (1.7 if i < MARGIN_MIN_SAMPLES else model.margin)
        model.observe(0, 0, 10.0 * r)
    # ceil(0.9 * 20) - 1 = 17th of the sorted ratios; the huge prior weight keeps 10 ms.
    assert model.margin == pytest.approx(sorted(ratios)[17])
    assert model.predict_margin(0) == pytest.approx(10.0 * sorted(ratios)[17], rel=1e-6)


def test_snapshot_round_trips_into_a_warm_start() -> None:
    model = CostModel()
    _feed(model, 100, (3.0, 15.0, 2.0))
    warm = CostModel(CostPrior.from_dict(model.snapshot()))
    assert warm.theta == pytest.approx(model.theta)
    assert warm.margin == model.margin


def test_percentile_must_be_a_probability() -> None:
    with pytest.raises(ValueError, match="percentile"):
        CostModel(percentile=1.0)
