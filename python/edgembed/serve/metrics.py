"""The server's Prometheus metrics, next to the batcher's, in the text exposition format.

``GET /metrics`` serves ``edgembed_http_*`` and ``edgembed_server_*`` (this module) followed by
``edgembed_batcher_*`` (:func:`edgembed.batching.prometheus_text`). No ``prometheus_client``:
everything is updated on the event loop thread and rendered from plain counters.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

from .asgi import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_TYPE", "DURATION_BOUNDS_S", "METHODS", "HttpMetrics", "MetricsMiddleware"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DURATION_BOUNDS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# The method label's values: any other method name a client sends counts as "other", so
# junk requests cannot grow the label set (every label value is a new time series).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# Why a request was refused before or instead of being embedded, by status.
REJECTION_REASONS = {
    400: "invalid_json",
    401: "unauthorized",
    404: "not_found",
    413: "too_large",
    422: "invalid",
    429: "overloaded",
    503: "unavailable",
    504: "deadline_exceeded",
}


def _num(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    return repr(float(v))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


class _Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        i = 0
        while i < len(self.bounds) and value > self.bounds[i]:
            i += 1
        self.counts[i] += 1
        self.total += value


class HttpMetrics:
    """Requests by route, method and status; latency per route; refusals; texts and tokens."""

    def __init__(self, routes: Iterable[str], model_labels: dict[str, str]) -> None:
        self.routes = frozenset(routes)
        self.model_labels = dict(model_labels)
        self.requests: dict[tuple[str, str, str], int] = {}
        self.durations: dict[str, _Histogram] = {}
        self.rejections: dict[str, int] = {}
        self.in_flight = 0
        self.texts = 0
        self.tokens = 0
        self.started = time.time()

    def route_of(self, path: str) -> str:
        """The route template a path belongs to (bounded label values), else ``other``."""
        if path in self.routes:
            return path
        for route in self.routes:
            head, brace, _ = route.partition("{")
            if brace and path.startswith(head) and "/" not in path[len(head):]:
                return route
        return "other"

    def observe(self, path: str, method: str, status: int, seconds: float) -> None:
        route = self.route_of(path)
        key = (route, method if method in METHODS else "other", str(status) if
               100 <= status <= 599 else "other")
        self.requests[key] = self.requests.get(key, 0) + 1
        hist = self.durations.get(route)
        if hist is None:
            hist = self.durations[route] = _Histogram(DURATION_BOUNDS_S)
        hist.observe(seconds)
        reason = REJECTION_REASONS.get(status)
        if reason is not None:
            self.rejections[reason] = self.rejections.get(reason, 0) + 1

    def embedded(self, texts: int, tokens: int) -> None:
        self.texts += texts
        self.tokens += tokens

    def render(self) -> str:
        out: list[str] = []

        def head(name: str, kind: str, help_: str) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")

        head("edgembed_server_info", "gauge", "The served model (value 1).")
        out.append(f"edgembed_server_info{_labels(self.model_labels.items())} 1")
        head("edgembed_server_start_time_seconds", "gauge", "Unix time the server started.")
        out.append(f"edgembed_server_start_time_seconds {_num(self.started)}")
        head("edgembed_http_requests_total", "counter", "HTTP requests by route, method, status.")
        for (route, method, status), n in sorted(self.requests.items()):
            labels = _labels((("route", route), ("method", method), ("status", status)))
            out.append(f"edgembed_http_requests_total{labels} {n}")
        head("edgembed_http_rejections_total", "counter",
             "Requests answered with an error, by reason.")
        for reason in sorted(set(REJECTION_REASONS.values())):
            n = self.rejections.get(reason, 0)
            out.append(f"edgembed_http_rejections_total{_labels([('reason', reason)])} {n}")
        head("edgembed_http_in_flight_requests", "gauge", "HTTP requests being answered.")
        out.append(f"edgembed_http_in_flight_requests {self.in_flight}")
        head("edgembed_http_request_duration_seconds", "histogram",
             "Time from request to the end of the response, by route.")
        for route, hist in sorted(self.durations.items()):
            cumulative = 0
            for bound, count in zip([*hist.bounds, math.inf], hist.counts, strict=True):
                cumulative += count
                labels = _labels((("route", route), ("le", _num(bound))))
                out.append(f"edgembed_http_request_duration_seconds_bucket{labels} {cumulative}")
            labels = _labels([("route", route)])
            out.append(f"edgembed_http_request_duration_seconds_sum{labels} {_num(hist.total)}")
            out.append(f"edgembed_http_request_duration_seconds_count{labels} {cumulative}")
        head("edgembed_server_texts_total", "counter", "Texts embedded.")
        out.append(f"edgembed_server_texts_total {self.texts}")
        head("edgembed_server_tokens_total", "counter", "Tokens embedded (after truncation).")
        out.append(f"edgembed_server_tokens_total {self.tokens}")
        return "\n".join(out) + "\n"


class MetricsMiddleware:
    """Counts every HTTP request (including those refused by the inner middlewares)."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def counting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_flight += 1
        try:
            await self.app(scope, receive, counting_send)
        finally:
            self.metrics.in_flight -= 1
            self.metrics.observe(scope["path"], scope["method"], status,
                                 time.perf_counter() - start)
