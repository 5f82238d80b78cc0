"""Online model of a batch's service time.

A batch of ``T`` real tokens whose texts, padded to the longest one, would hold ``T + P`` tokens
(``P`` padding tokens) is predicted to take::

    predict(T, P) = fixed_ms + ms_per_ktoken * (T / 1000) + ms_per_kpadding * (P / 1000)

The three coefficients are fitted continuously from observed batches by exponentially weighted
least squares, pulled towards a prior (the warm start) that never decays, so the fit stays
defined when every batch looks alike. Each observation is first clipped to a band around the
current prediction whose width follows the mean absolute relative error, so one slow batch (a
page fault, another process) moves the fit little, while a lasting change widens the band and is
learned within a few batches.

The latency *margin* is the ``percentile`` quantile of ``observed / predicted`` over the last
``window`` batches (never below 1): multiplying a prediction by it gives the service time that
batch will stay under with that probability. The policy uses mean predictions to decide what is
possible at all (deadlines) and margined ones to keep a latency target.

Every step is plain IEEE-754 double arithmetic in a fixed order (no ``sum()``, ``log``, ``exp``
or ``pow``), so the JavaScript port reproduces each value bit for bit; docs/batching.md gives the
same algorithm as pseudo-code.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["CostModel", "CostPrior"]

# Fitting constants. They are part of the decision algorithm: the JS port uses the same values.
DECAY = 0.98  # weight of the past per observation (memory of about 50 batches)
CLIP_WIDTH = 3.0  # observations are clipped to prediction * (1 ± CLIP_WIDTH * deviation)
DEVIATION_RATE = 0.1  # EWMA rate of the mean absolute relative error
DEVIATION_CAP = 1.0  # one observation moves the deviation by at most this relative error
DEVIATION_FLOOR = 0.05  # the clipping band is never narrower than ±CLIP_WIDTH × 5 %
MARGIN_WINDOW = 128  # batches kept for the latency margin
MARGIN_MIN_SAMPLES = 16  # until then the margin is CostPrior.margin
MARGIN_CAP = 10.0
MIN_PREDICTION_MS = 0.001  # guards the ratio observed / predicted
PRIOR_SCALE_KTOKENS = 0.1  # the prior's weight on the slopes is set at batches of 100 tokens


@dataclass(frozen=True)
class CostPrior:
    """Warm start of the cost model: coefficients, their weight, the first margin and deviation.

    ``weight`` counts as that many observed batches (of 100 tokens, for the slopes); it never
    decays, so where the data carry no information (e.g. no padding seen yet) the fit keeps
    these coefficients, and elsewhere the data take over within a few batches.
    """

    fixed_ms: float = 2.0
    ms_per_ktoken: float = 100.0
    ms_per_kpadding: float = 20.0
    weight: float = 0.25
    margin: float = 1.5
    deviation: float = 0.25

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CostPrior:
        """Read the fields this class knows from a mapping (e.g. ``stats().cost_model``)."""
        known = {f: float(data[f]) for f in cls.__dataclass_fields__ if f in data}
        return cls(**known)


def _features(tokens: float, padding: float) -> tuple[float, float, float]:
    return (1.0, tokens / 1000.0, padding / 1000.0)


def _solve3(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve the 3×3 system ``a x = b`` by Gaussian elimination without pivoting.

    ``a`` is symmetric positive definite (weighted normal equations plus a positive diagonal
    prior), for which elimination without pivoting is stable. The loop order is part of the
    algorithm so that other implementations round identically.
    """
    m = [row[:] for row in a]
    v = b[:]
    for k in range(3):
        for i in range(k + 1, 3):
            f = m[i][k] / m[k][k]
            for j in range(k, 3):
                m[i][j] = m[i][j] - f * m[k][j]
            v[i] = v[i] - f * v[k]
    x = [0.0, 0.0, 0.0]
    for i in (2, 1, 0):
        acc = v[i]
        for j in range(i + 1, 3):
            acc = acc - m[i][j] * x[j]
        x[i] = acc / m[i][i]
    return x


class CostModel:
    """Predicts batch service times (ms) and learns from each completed batch."""

    def __init__(self, prior: CostPrior | None = None, percentile: float = 0.99) -> None:
        if not 0.0 < percentile < 1.0:
            raise ValueError(f"percentile must be in (0, 1), got {percentile}")
        self.prior = prior if prior is not None else CostPrior()
        self.percentile = percentile
        p = self.prior
        self._theta_prior = [p.fixed_ms, p.ms_per_ktoken, p.ms_per_kpadding]
        slope = p.weight * (PRIOR_SCALE_KTOKENS * PRIOR_SCALE_KTOKENS)
        self._lambda = [p.weight, slope, slope]
        self._sxx = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
        self._sxy = [0.0, 0.0, 0.0]
        self.theta = list(self._theta_prior)
        self.deviation = p.deviation
        self.margin = p.margin
        self.observations = 0
        self._ratios: deque[float] = deque(maxlen=MARGIN_WINDOW)

    @property
    def fixed_ms(self) -> float:
        return self.theta[0]

    def predict(self, tokens: float, padding: float = 0.0) -> float:
        """Mean predicted service time (ms) of a batch."""
        t = self.theta
        return t[0] + t[1] * (tokens / 1000.0) + t[2] * (padding / 1000.0)

    def predict_margin(self, tokens: float, padding: float = 0.0) -> float:
        """Service time (ms) the batch stays under with probability ``percentile``."""
        return self.predict(tokens, padding) * self.margin

    def observe(self, tokens: float, padding: float, service_ms: float) -> None:
        """Fold one completed batch into the fit and the margin."""
        predicted = self.predict(tokens, padding)
        if predicted < MIN_PREDICTION_MS:
            predicted = MIN_PREDICTION_MS
        ratio = service_ms / predicted
        self._ratios.append(ratio)

        deviation = self.deviation if self.deviation > DEVIATION_FLOOR else DEVIATION_FLOOR
        band = CLIP_WIDTH * deviation
        low = predicted * (1.0 - band)
        high = predicted * (1.0 + band)
        clipped = min(max(service_ms, low), high)
        if clipped < 0.0:
            clipped = 0.0
        error = abs(ratio - 1.0)
        if error > DEVIATION_CAP:
            error = DEVIATION_CAP
        self.deviation = self.deviation + DEVIATION_RATE * (error - self.deviation)

        x = _features(tokens, padding)
        for i in range(3):
            for j in range(3):
                self._sxx[i][j] = DECAY * self._sxx[i][j] + x[i] * x[j]
            self._sxy[i] = DECAY * self._sxy[i] + x[i] * clipped
        a = [row[:] for row in self._sxx]
        b = self._sxy[:]
        for i in range(3):
            a[i][i] = a[i][i] + self._lambda[i]
            b[i] = b[i] + self._lambda[i] * self._theta_prior[i]
        theta = _solve3(a, b)
        self.theta = [t if t > 0.0 else 0.0 for t in theta]
        self.observations += 1
        self.margin = self._margin()

    def _margin(self) -> float:
        n = len(self._ratios)
        if n < MARGIN_MIN_SAMPLES:
            return self.prior.margin
        ordered = sorted(self._ratios)
        index = math.ceil(self.percentile * n) - 1
        index = min(max(index, 0), n - 1)
        q = ordered[index]
        return min(max(q, 1.0), MARGIN_CAP)

    def snapshot(self) -> dict[str, float]:
        """Current parameters; ``CostPrior.from_dict`` turns this into a warm start."""
        return {
            "fixed_ms": self.theta[0],
            "ms_per_ktoken": self.theta[1],
            "ms_per_kpadding": self.theta[2],
            "margin": self.margin,
            "deviation": self.deviation,
            "observations": float(self.observations),
        }
