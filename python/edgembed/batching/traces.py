"""Arrival traces for the simulator: Poisson, bursty on/off, ramps, mixed text lengths.

A :class:`Trace` is data — requests with arrival times (ms), the token count of each text, a
lane, an optional deadline and cancellation time — plus an optional close. Generators are seeded
and use only :mod:`random`, so a seed gives the same trace on every machine; the JavaScript
tests never generate traces, they read the JSON written by :meth:`Trace.to_json`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .policy import Lane

__all__ = [
    "LengthSampler",
    "Trace",
    "TraceRequest",
    "bursty",
    "fixed_lengths",
    "mixed_lengths",
    "poisson",
    "ramp",
]

LengthSampler = Callable[[random.Random], int]


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace. ``deadline_ms`` and ``cancel_after_ms`` are relative to arrival."""

    rid: int
    arrival_ms: float
    tokens: tuple[int, ...]
    lane: Lane = Lane.INTERACTIVE
    deadline_ms: float | None = None
    cancel_after_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rid": self.rid,
            "arrival_ms": self.arrival_ms,
            "tokens": list(self.tokens),
            "lane": self.lane.value,
            "deadline_ms": self.deadline_ms,
            "cancel_after_ms": self.cancel_after_ms,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TraceRequest:
        return cls(
            rid=int(d["rid"]),
            arrival_ms=float(d["arrival_ms"]),
            tokens=tuple(int(t) for t in d["tokens"]),
            lane=Lane(d.get("lane", "interactive")),
            deadline_ms=None if d.get("deadline_ms") is None else float(d["deadline_ms"]),
            cancel_after_ms=(
                None if d.get("cancel_after_ms") is None else float(d["cancel_after_ms"])
            ),
        )


@dataclass(frozen=True)
class Trace:
    """Requests in arrival order (ties keep list order); optionally a close at ``close_at_ms``."""

    requests: tuple[TraceRequest, ...]
    close_at_ms: float | None = None
    drain: bool = True
    name: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "meta": self.meta,
            "close": None
            if self.close_at_ms is None
            else {"at_ms": self.close_at_ms, "drain": self.drain},
            "requests": [r.to_json() for r in self.requests],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Trace:
        close = d.get("close")
        return cls(
            requests=tuple(TraceRequest.from_json(r) for r in d["requests"]),
            close_at_ms=None if close is None else float(close["at_ms"]),
            drain=True if close is None else bool(close["drain"]),
            name=str(d.get("name", "")),
            meta=dict(d.get("meta", {})),
        )

    @property
    def mean_tokens(self) -> float:
        total = 0
        for r in self.requests:
            for t in r.tokens:
                total += t
        return total / len(self.requests) if self.requests else 0.0


def fixed_lengths(n: int) -> LengthSampler:
    """Every text has ``n`` tokens."""
    return lambda rng: n


def mixed_lengths(
    short: tuple[int, int] = (8, 40), long: tuple[int, int] = (64, 256), long_share: float = 0.2
) -> LengthSampler:
    """Mostly short texts (queries) with a share of long ones (passages), uniform in each range."""

    def sample(rng: random.Random) -> int:
        lo, hi = long if rng.random() < long_share else short
        return rng.randint(lo, hi)

    return sample


def _round(t: float) -> float:
    # Microsecond resolution keeps the JSON short; the value stored is the value simulated.
    return round(t, 3)


def _build(
    times: Sequence[float],
    rng: random.Random,
    lengths: LengthSampler,
    texts_per_request: int,
    bulk_share: float,
    deadline_ms: float | None,
    deadline_share: float,
) -> tuple[TraceRequest, ...]:
    out = []
    for i, t in enumerate(times):
        tokens = tuple(lengths(rng) for _ in range(texts_per_request))
        lane = Lane.BULK if rng.random() < bulk_share else Lane.INTERACTIVE
        with_deadline = deadline_ms is not None and rng.random() < deadline_share
        deadline = deadline_ms if with_deadline else None
        out.append(TraceRequest(i, _round(t), tokens, lane, deadline))
    return tuple(out)


def poisson(
    rate_per_s: float,
    duration_ms: float,
    *,
    seed: int,
    lengths: LengthSampler | None = None,
    texts_per_request: int = 1,
    bulk_share: float = 0.0,
    deadline_ms: float | None = None,
    deadline_share: float = 0.0,
    name: str = "poisson",
) -> Trace:
    """Poisson arrivals at ``rate_per_s`` for ``duration_ms``."""
    rng = random.Random(seed)
    times = []
    t = rng.expovariate(rate_per_s / 1000.0)
    while t < duration_ms:
        times.append(t)
        t += rng.expovariate(rate_per_s / 1000.0)
    reqs = _build(
        times,
        rng,
        lengths or mixed_lengths(),
        texts_per_request,
        bulk_share,
        deadline_ms,
        deadline_share,
    )
    return Trace(
        reqs,
        name=name,
        meta={
            "kind": "poisson",
            "rate_per_s": rate_per_s,
            "duration_ms": duration_ms,
            "seed": seed,
        },
    )


def bursty(
    rate_on_per_s: float,
    on_ms: float,
    off_ms: float,
    duration_ms: float,
    *,
    seed: int,
    rate_off_per_s: float = 0.0,
    lengths: LengthSampler | None = None,
    bulk_share: float = 0.0,
    name: str = "bursty",
) -> Trace:
    """On/off arrivals: Poisson at ``rate_on_per_s`` for ``on_ms``, then ``rate_off_per_s``."""
    rng = random.Random(seed)
    times = []
    t = 0.0
    while t < duration_ms:
        period_start = t
        for start, length, rate in (
            (period_start, on_ms, rate_on_per_s),
            (period_start + on_ms, off_ms, rate_off_per_s),
        ):
            if rate <= 0:
                continue
            u = start + rng.expovariate(rate / 1000.0)
            while u < start + length and u < duration_ms:
                times.append(u)
                u += rng.expovariate(rate / 1000.0)
        t = period_start + on_ms + off_ms
    reqs = _build(times, rng, lengths or mixed_lengths(), 1, bulk_share, None, 0.0)
    return Trace(
        reqs,
        name=name,
        meta={
            "kind": "bursty",
            "rate_on_per_s": rate_on_per_s,
            "rate_off_per_s": rate_off_per_s,
            "on_ms": on_ms,
            "off_ms": off_ms,
            "seed": seed,
        },
    )


def ramp(
    rate_from_per_s: float,
    rate_to_per_s: float,
    duration_ms: float,
    *,
    seed: int,
    lengths: LengthSampler | None = None,
    name: str = "ramp",
) -> Trace:
    """Poisson arrivals whose rate moves linearly from one value to another (by thinning)."""
    rng = random.Random(seed)
    peak = max(rate_from_per_s, rate_to_per_s) / 1000.0
    times = []
    t = rng.expovariate(peak)
    while t < duration_ms:
        rate = (rate_from_per_s + (rate_to_per_s - rate_from_per_s) * t / duration_ms) / 1000.0
        if rng.random() * peak < rate:
            times.append(t)
        t += rng.expovariate(peak)
    reqs = _build(times, rng, lengths or mixed_lengths(), 1, 0.0, None, 0.0)
    return Trace(
        reqs,
        name=name,
        meta={
            "kind": "ramp",
            "rate_from_per_s": rate_from_per_s,
            "rate_to_per_s": rate_to_per_s,
            "seed": seed,
        },
    )
