"""What the batcher counts, the ``stats()`` snapshot, and its Prometheus text exposition.

No dependency on ``prometheus_client``: :func:`prometheus_text` renders the text exposition
format (version 0.0.4) that any Prometheus server scrapes, so a web app can serve it at
``/metrics`` as is.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["BatcherStats", "Histogram", "Recorder", "prometheus_text"]

BATCH_SIZE_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
BATCH_TOKEN_BOUNDS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
LATENCY_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
RECENT = 2048  # completed requests kept for percentiles and throughput


class Histogram:
    """Counts per upper bound (``le``), plus one overflow bucket, and the running sum."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        i = 0
        while i < len(self.bounds) and value > self.bounds[i]:
            i += 1
        self.counts[i] += 1
        self.total += value
        self.n += 1

    def as_dict(self) -> dict[str, Any]:
        """``bounds`` (upper, inclusive), ``counts`` per bucket (one more: the overflow)."""
        return {
            "bounds": list(self.bounds),
            "counts": list(self.counts),
            "count": self.n,
            "sum": self.total,
        }


def _percentile(ordered: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 when empty)."""
    if not ordered:
        return 0.0
    i = min(max(math.ceil(p * len(ordered)) - 1, 0), len(ordered) - 1)
    return ordered[i]


@dataclass(frozen=True)
class BatcherStats:
    """A snapshot of the batcher; every field is documented in docs/batching.md."""

    queue_depth: int
    queue_tokens: int
    in_flight_batches: int
    workers: int
    submitted: int
    completed: int
    overloaded: int
    deadline_exceeded: int
    cancelled: int
    closed: int
    failed: int
    batches: int
    batch_size_histogram: dict[str, Any]
    batch_tokens_histogram: dict[str, Any]
    latency_histogram_ms: dict[str, Any]
    mean_batch_size: float
    mean_batch_tokens: float
    latency_ms: dict[str, float]
    latency_target_ms: float
    percentile: float
    slo_attainment: float
    recent_slo_attainment: float
    throughput_rps: float
    throughput_tokens_per_s: float
    arrival_gap_ms: float | None
    cost_model: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Recorder:
    """Counters, histograms and the recent-latency window kept by the scheduler."""

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        self.submitted = 0
        self.batches = 0
        self.batch_size = Histogram(BATCH_SIZE_BOUNDS)
        self.batch_tokens = Histogram(BATCH_TOKEN_BOUNDS)
        self.latency = Histogram(LATENCY_BOUNDS_MS)
        self.within_target = 0
        self.judged = 0
        # (completion ms, latency ms, tokens, within target)
        self.recent: deque[tuple[float, float, int, bool]] = deque(maxlen=RECENT)

    def outcome(self, name: str, n: int = 1) -> None:
        self.outcomes[name] = self.outcomes.get(name, 0) + n

    def dispatched(self, n_requests: int, tokens: int) -> None:
        self.batches += 1
        self.batch_size.observe(n_requests)
        self.batch_tokens.observe(tokens)

    def served(self, now: float, latency_ms: float, tokens: int, target_ms: float) -> None:
        self.outcome("ok")
        self.latency.observe(latency_ms)
        ok = latency_ms <= target_ms
        self.judged += 1
        self.within_target += 1 if ok else 0
        self.recent.append((now, latency_ms, tokens, ok))

    def latency_summary(self) -> dict[str, float]:
        values = sorted(x[1] for x in self.recent)
        mean = 0.0
        for v in values:
            mean += v
        mean = mean / len(values) if values else 0.0
        return {
            "mean": mean,
            "p50": _percentile(values, 0.5),
            "p90": _percentile(values, 0.9),
            "p99": _percentile(values, 0.99),
            "max": values[-1] if values else 0.0,
        }

    def throughput(self) -> tuple[float, float]:
        """Requests and tokens per second over the recent window of completions."""
        if len(self.recent) < 2:
            return 0.0, 0.0
        span = self.recent[-1][0] - self.recent[0][0]
        if span <= 0.0:
            return 0.0, 0.0
        tokens = 0
        for x in list(self.recent)[1:]:
            tokens += x[2]
        return (len(self.recent) - 1) * 1000.0 / span, tokens * 1000.0 / span

    def recent_attainment(self) -> float:
        if not self.recent:
            return 1.0
        ok = 0
        for x in self.recent:
            ok += 1 if x[3] else 0
        return ok / len(self.recent)


def prometheus_text(stats: BatcherStats, prefix: str = "edgembed_batcher") -> str:
    """Render a snapshot in the Prometheus text exposition format."""
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {prefix}_{name} {help_}")
        lines.append(f"# TYPE {prefix}_{name} {kind}")
        for labels, value in samples:
            lines.append(f"{prefix}_{name}{labels} {_num(value)}")

    outcomes = {
        "ok": stats.completed,
        "overloaded": stats.overloaded,
        "deadline_exceeded": stats.deadline_exceeded,
        "cancelled": stats.cancelled,
        "closed": stats.closed,
        "failed": stats.failed,
    }
    metric(
        "requests_total",
        "counter",
        "Requests by outcome.",
        [(f'{{outcome="{k}"}}', float(v)) for k, v in outcomes.items()],
    )
    metric("submitted_total", "counter", "Requests submitted.", [("", float(stats.submitted))])
    metric("batches_total", "counter", "Batches dispatched.", [("", float(stats.batches))])
    metric("queue_depth", "gauge", "Requests waiting.", [("", float(stats.queue_depth))])
    metric("queue_tokens", "gauge", "Tokens waiting.", [("", float(stats.queue_tokens))])
    metric("in_flight_batches", "gauge", "Batches running.", [("", stats.in_flight_batches)])
    metric(
        "slo_attainment_ratio",
        "gauge",
        "Share of served requests within their lane's latency target (recent window).",
        [("", stats.recent_slo_attainment)],
    )
    metric(
        "throughput_rps",
        "gauge",
        "Served requests per second (recent window).",
        [("", stats.throughput_rps)],
    )
    metric(
        "cost_model",
        "gauge",
        "Current cost-model parameters.",
        [(f'{{param="{k}"}}', v) for k, v in stats.cost_model.items()],
    )
    for name, help_, hist, scale in (
        ("batch_size", "Requests per batch.", stats.batch_size_histogram, 1.0),
        ("batch_tokens", "Tokens per batch.", stats.batch_tokens_histogram, 1.0),
        ("latency_seconds", "Latency of served requests.", stats.latency_histogram_ms, 1e-3),
    ):
        lines.append(f"# HELP {prefix}_{name} {help_}")
        lines.append(f"# TYPE {prefix}_{name} histogram")
        cumulative = 0
        for bound, count in zip([*hist["bounds"], None], hist["counts"], strict=True):
            cumulative += count
            le = "+Inf" if bound is None else _num(bound * scale)
            lines.append(f'{prefix}_{name}_bucket{{le="{le}"}} {cumulative}')
        lines.append(f"{prefix}_{name}_sum {_num(hist['sum'] * scale)}")
        lines.append(f"{prefix}_{name}_count {cumulative}")
    return "\n".join(lines) + "\n"


def _num(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))
