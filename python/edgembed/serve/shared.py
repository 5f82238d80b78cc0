"""What the server's route modules share: the request headers they read, the state of a
running server, the OpenAPI response tables, JSON rendering, and the path of texts through the
fair gate and the adaptive batcher (``embed_texts``). ``app.py`` builds the app from it, and the
TEI, rerank and job routes import it rather than the app.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
from fastapi import Header, Request
from fastapi.responses import Response

from ..batching import AdaptiveBatcher
from ..errors import BackendUnavailable, DeadlineExceeded
from .auth import key_id
from .fair import Slicer
from .metrics import HttpMetrics
from .model import FloatArray, ServedModel
from .schemas import OpenAIErrorResponse, TEIErrorResponse
from .settings import ServeSettings

PRIORITY_HEADER = "X-Edgembed-Priority"
DEADLINE_HEADER = "X-Edgembed-Deadline-Ms"
MAX_DEADLINE_MS = 3_600_000.0
# Requests with fewer characters than this count their tokens on the event loop; larger ones
# in a worker thread, so a long request never stalls the others. Likewise for rendering
# responses with more values than INLINE_VALUES.
INLINE_CHARS = 4096
INLINE_VALUES = 16384
# The tokens admitted at the fair gate (fair.py) and not yet computed before a 429, in batches
# of the budget, besides one request of the largest size (queue_tokens).
WAITING_BATCHES = 64

Priority = Annotated[
    Literal["interactive", "bulk"] | None,
    Header(
        alias=PRIORITY_HEADER,
        description="Batching lane. `interactive` (default) is served first and held to the "
                    "latency target; `bulk` waits for a 10x longer target and fills batches.",
    ),
]
Deadline = Annotated[
    float | None,
    Header(
        alias=DEADLINE_HEADER, gt=0, le=MAX_DEADLINE_MS, allow_inf_nan=False,
        description="Milliseconds from arrival within which the request must be answered; one "
                    "that cannot be met is refused at once, or dropped before computing, "
                    "with 504.",
    ),
]


@dataclass
class ServerState:
    """What the routes share: the model, the settings, the batcher, readiness, metrics."""

    model: ServedModel
    settings: ServeSettings
    metrics: HttpMetrics
    names: frozenset[str]
    created: int = field(default_factory=lambda: int(time.time()))
    batcher: AdaptiveBatcher | None = None
    slicer: Slicer | None = None
    draining: bool = False
    # Parts that can fail on their own (the batch worker): each says what is wrong, or None.
    checks: list[Callable[[], str | None]] = field(default_factory=list)
    # More Prometheus text for /metrics (the batchers of models served beside this one).
    extra_metrics: list[Callable[[], str]] = field(default_factory=list)

    @property
    def status(self) -> Literal["ready", "starting", "draining", "degraded"]:
        if self.draining or (self.batcher is not None and self.batcher.closed):
            return "draining"
        if self.batcher is None:
            return "starting"
        return "degraded" if self.problems() else "ready"

    def problems(self) -> list[str]:
        """What is not working now (empty while everything is)."""
        return [p for p in (check() for check in self.checks) if p]

    def begin_drain(self) -> None:
        """Called on SIGTERM: /ready answers 503 while the last requests finish."""
        self.draining = True


Responses = dict[int | str, dict[str, Any]]


def openai_errors(*statuses: int) -> Responses:
    return {s: {"model": OpenAIErrorResponse, "description": DESCRIPTIONS[s]} for s in statuses}


def tei_errors(*statuses: int) -> Responses:
    return {s: {"model": TEIErrorResponse, "description": DESCRIPTIONS[s]} for s in statuses}


DESCRIPTIONS = {
    400: "The body is not valid JSON.",
    401: "Missing or unknown API key.",
    404: "The requested model is not served here.",
    413: "Over a limit: body size, inputs per request, characters per input, or tokens with "
         "truncation off. The message names the limit.",
    415: "The body is not sent as JSON (`Content-Type: application/json`).",
    422: "The body or a header does not match the schema, or an option is out of range.",
    429: "The queue is full or the latency target is out of reach; retry after `Retry-After`.",
    503: "The server is shutting down or its backend is unavailable.",
    504: "The request's deadline (X-Edgembed-Deadline-Ms) cannot be met.",
}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "string"}}}
EMBED_STATUSES = (400, 413, 415, 422, 429, 503, 504)


def with_retry_after(responses: Responses) -> Responses:
    for status in (429, 503):
        if status in responses:
            responses[status] = {**responses[status], "headers": _RETRY_AFTER}
    return responses


async def embed_texts(
    state: ServerState,
    request: Request,
    texts: list[str],
    *,
    truncate: bool,
    normalize: bool,
    dimensions: int | None,
    prompt_name: str | None,
    left: bool,
    priority: str | None,
    deadline_ms: float | None,
    started: float,
) -> tuple[FloatArray, int]:
    """``texts`` through the fair gate and the adaptive batcher: (vectors, tokens read)."""
    model, metrics = state.model, state.metrics
    slicer = state.slicer
    if slicer is None:  # only before the lifespan has started
        raise BackendUnavailable("the server is still starting; retry in a moment")
    model.check_prompt(prompt_name)
    items = [model.text(t, prompt_name, left) for t in texts]
    if deadline_ms is not None and time.perf_counter() - started >= deadline_ms / 1000.0:
        raise DeadlineExceeded(f"the deadline of {deadline_ms:g} ms passed before the "
                               "request could be queued")
    if sum(len(t) for t in items) < INLINE_CHARS:
        counts = model.tokens(items, truncate=truncate)
    else:
        counts = await asyncio.to_thread(model.tokens, items, truncate=truncate)
    raw = np.asarray(await slicer.embed(
        key_id(request.headers.get("authorization")), items, counts,
        priority=priority or "interactive", deadline_ms=deadline_ms, started=started),
        dtype=np.float32)
    vectors = model.finish(raw.reshape(len(items), -1), normalize=normalize,
                           dimensions=dimensions)
    tokens = sum(counts)
    metrics.embedded(len(items), tokens)
    return vectors, tokens


def queue_tokens(settings: ServeSettings, budget: int, max_length: int) -> int:
    """``--max-queue-tokens``, or by default room for ``WAITING_BATCHES`` batches besides one
    request of ``--max-inputs`` texts at the model's max length: on an idle server, every
    request within the other limits is admitted, and one such request never fills the queue."""
    return (settings.max_queue_tokens
            or WAITING_BATCHES * budget + settings.max_inputs * max_length)


def compact_json(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()


async def json_response(render: Callable[[], bytes], n_values: int) -> Response:
    """A JSON response; large ones are rendered in a worker thread, off the event loop."""
    body = render() if n_values <= INLINE_VALUES else await asyncio.to_thread(render)
    return Response(body, media_type="application/json")
