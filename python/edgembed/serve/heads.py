"""Rerankers and sparse models on ``embed serve``, beside the embedding model.

::

    POST /rerank      TEI ({query, texts}) or Cohere/Jina ({query, documents}), by the body
    POST /v1/rerank   Cohere/Jina: {model, query, documents, top_n, return_documents}
                      ─► {id, model, results: [{index, relevance_score, document}], usage, meta}
    POST /predict     TEI: a text, a [text, text] pair, or a list of them ─► [{score, label}]
    POST /embed_sparse  TEI: {inputs, truncate, prompt_name} ─► [[{index, value}], ...]
         │
         └─► fair gate + slices ─► this model's own AdaptiveBatcher ─► Reranker / SPLADE Embedder

Each served model (:class:`ServedHead`) has its own adaptive batcher — the same algorithm as the
embedding model's, with its own cost model, counted in tokens: a (query, document) pair costs
the tokens of the two together, as the encoder reads them. So an embedding request never waits
behind a rerank batch, nor the reverse; the two only share the CPU, whose contention each
batcher's cost model sees in its own batches' times. ``install_heads`` adds the routes of the
models it is given to an app made by ``create_app`` and runs their batchers while the app runs.

Scores: ``/rerank`` and ``/v1/rerank`` give the model's activation of its logit (sigmoid for a
one-label cross-encoder; ``raw_scores`` the logit itself), as sentence-transformers'
``CrossEncoder.predict`` and TEI do; ``/predict`` follows TEI: sigmoid for one label, softmax
over several (``raw_scores``: the logits), every label sorted by score.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..batching import AdaptiveBatcher
from ..errors import (
    BackendUnavailable,
    DeadlineExceeded,
    EdgembedError,
    InputError,
    InputTooLong,
    ModelNotFound,
)
from ..reranker import score_activation
from .auth import key_id
from .fair import Slicer
from .limits import check_inputs
from .model import ServedModel
from .shared import (
    INLINE_CHARS,
    Deadline,
    Priority,
    ServerState,
    compact_json,
    json_response,
    openai_errors,
    queue_tokens,
    tei_errors,
    with_retry_after,
)

__all__ = ["ServedHead", "install_heads", "placeholder_model"]

_STRICT = ConfigDict(strict=True, extra="forbid")
_STATUSES = (400, 413, 415, 422, 429, 503, 504)


# ----------------------------------------- schemas ---------------------------------------------


class TEIRerankRequest(BaseModel):
    """``POST /rerank`` as Hugging Face TEI 1.9 takes it."""

    model_config = _STRICT

    query: str = Field(description="The query every text is scored against.")
    texts: list[str] = Field(description="The texts to rank.")
    truncate: bool | None = Field(default=None, description="Cut pairs past the model's max "
                                  "length; `false` answers 413. Default: the server's setting.")
    truncation_direction: Literal["right", "Right"] = "right"
    raw_scores: bool = Field(default=False, description="The logits, without the sigmoid.")
    return_text: bool = Field(default=False, description="Include each text in its result.")


class TEIRank(BaseModel):
    index: int
    score: float
    text: str | None = None


class DocumentText(BaseModel):
    model_config = _STRICT

    text: str


class CohereRerankRequest(BaseModel):
    """``POST /v1/rerank`` (and ``/rerank``) as Cohere's and Jina's clients send it (LangChain,
    LlamaIndex, Dify)."""

    model_config = _STRICT

    query: str = Field(description="The query every document is scored against.")
    documents: list[str | DocumentText] = Field(
        description="The documents to rank: strings, or objects with a `text` field.")
    model: str | None = Field(default=None, description="A served reranker's name; omit it "
                              "for the first one.")
    top_n: int | None = Field(default=None, ge=1, description="Return the best `top_n` only.")
    return_documents: bool = Field(default=False,
                                   description="Include each document in its result.")


class CohereResult(BaseModel):
    index: int
    relevance_score: float
    document: DocumentText | None = None


class RerankUsage(BaseModel):
    total_tokens: int


class CohereRerankResponse(BaseModel):
    id: str
    model: str
    results: list[CohereResult]
    usage: RerankUsage
    meta: dict[str, Any]


class PredictRequest(BaseModel):
    """``POST /predict`` as TEI 1.9 takes it: ``inputs`` is a text, a ``[text, text]`` pair,
    or a list of texts and pairs."""

    model_config = _STRICT

    inputs: str | list[str | list[str]]
    truncate: bool | None = None
    truncation_direction: Literal["right", "Right"] = "right"
    raw_scores: bool = False


class Prediction(BaseModel):
    score: float
    label: str


class EmbedSparseRequest(BaseModel):
    """``POST /embed_sparse`` as TEI 1.9 takes it."""

    model_config = _STRICT

    inputs: str | list[str]
    truncate: bool | None = None
    truncation_direction: Literal["right", "Right"] = "right"
    prompt_name: str | None = None


class SparseValue(BaseModel):
    index: int
    value: float


# -------------------------------------- served models ------------------------------------------


class ServedHead:
    """A cross-encoder (``Reranker``) or a SPLADE ``Embedder`` as the server runs it: the target
    of its own batcher (``embed``, ``count_tokens``) and the routes' helpers."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.task = "rerank" if hasattr(model, "rerank") else "sparse"
        if self.task == "sparse" and getattr(model, "task", "") != "sparse":
            raise InputError(f"{model.model_name} is not a reranker or a sparse model")
        self.name = str(model.model_name)
        self.max_length = int(model.max_length)
        self.max_batch_tokens = int(model.max_batch_tokens)
        self.batcher: AdaptiveBatcher | None = None
        self.slicer: Slicer | None = None
        self.metrics_prefix = f"edgembed_{self.task}_batcher"  # install_heads numbers twins

    # the batcher's target: items are (query, document) pairs or texts
    def embed(self, items: list[Any]) -> Any:
        if self.task == "rerank":
            return self.model.logits(items)
        return self.model.embed_sparse(items)

    def count_tokens(self, items: Sequence[Any]) -> list[int]:
        return self.tokens(list(items), truncate=True)

    def tokens(self, items: list[Any], *, truncate: bool) -> list[int]:
        """Tokens each item costs; without ``truncate`` one over max_length raises
        InputTooLong (413)."""
        if self.task == "rerank":
            counts = [int(n) for n in self.model.count_items(items, truncate=truncate)]
            what = "pairs" if any(not isinstance(x, str) for x in items) else "inputs"
        else:
            counts = [int(n) for n in self.model.count_tokens(items, truncate=truncate)]
            what = "inputs"
        if not truncate:
            for i, n in enumerate(counts):
                if n > self.max_length:
                    raise InputTooLong(f"{what}[{i}] has {n} tokens, over the model's max "
                                       f"length {self.max_length}; shorten it or send "
                                       "truncate=true")
        return counts

    def start(self, state: ServerState) -> None:
        s = state.settings
        budget = s.max_batch_tokens or self.max_batch_tokens
        self.batcher = AdaptiveBatcher(
            self, latency_target_ms=s.latency_target_ms,
            bulk_latency_target_ms=s.bulk_latency_target_ms, percentile=s.percentile,
            max_batch_tokens=budget, max_queue=s.max_queue, workers=s.workers, shed=s.shed,
            cost_prior=s.cost_prior)
        batcher = self.batcher
        self.slicer = Slicer(
            lambda: batcher, max_length=self.max_length, max_batch_tokens=budget,
            latency_target_ms=s.latency_target_ms,
            max_wait_ms=batcher.config.bulk_latency_target_ms if s.shed else math.inf,
            capacity_tokens=s.fair_tokens,
            max_waiting_tokens=queue_tokens(s, budget, self.max_length),
            slice_tokens=s.slice_tokens, workers=s.workers)

    async def aclose(self) -> None:
        if self.batcher is not None:
            await self.batcher.aclose(drain=True)

    def problem(self) -> str | None:
        if self.batcher is not None and self.batcher.closed:
            return f"the batcher of {self.name} is closed"
        return None

    def prometheus(self) -> str:
        if self.batcher is None:
            return ""
        return self.batcher.prometheus_text(self.metrics_prefix)

    async def run(self, request: Request, items: list[Any], *, truncate: bool,
                  priority: str | None, deadline_ms: float | None,
                  started: float) -> tuple[Any, int]:
        """``items`` through the fair gate and this model's batcher: (outputs, tokens)."""
        if self.slicer is None:
            raise BackendUnavailable("the server is still starting; retry in a moment")
        if deadline_ms is not None and time.perf_counter() - started >= deadline_ms / 1000.0:
            raise DeadlineExceeded(f"the deadline of {deadline_ms:g} ms passed before the "
                                   "request could be queued")
        chars = sum(len(x) if isinstance(x, str) else len(x[0]) + len(x[1]) for x in items)
        if chars < INLINE_CHARS:
            counts = self.tokens(items, truncate=truncate)
        else:
            counts = await asyncio.to_thread(self.tokens, items, truncate=truncate)
        out = await self.slicer.embed(
            key_id(request.headers.get("authorization")), items, counts,
            priority=priority or "interactive", deadline_ms=deadline_ms, started=started)
        return out, sum(counts)


def placeholder_model(head: ServedHead) -> ServedModel:
    """The server's main model when it serves no embedding model: its embedding routes say
    which routes this model answers instead."""
    routes = "POST /rerank or /v1/rerank" if head.task == "rerank" else "POST /embed_sparse"
    kind = "cross-encoder" if head.task == "rerank" else "sparse model"

    def refuse(texts: list[str]) -> Any:
        raise InputError(f"{head.name} is a {kind}; this server embeds no dense vectors with "
                         f"it: use {routes}")

    def count(texts: list[str], truncate: bool) -> list[int]:
        return [1] * len(texts)

    return ServedModel(name=head.name, dim=int(head.model.dim if head.task == "sparse"
                                                else head.model.num_labels),
                       max_length=head.max_length, embed_raw=refuse, count_tokens=count,
                       variant=str(head.model.variant), backend=str(head.model.backend),
                       max_batch_tokens=head.max_batch_tokens)


# ------------------------------------------ routes ---------------------------------------------


def _validate(model: type[BaseModel], body: Any) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors()]
        raise RequestValidationError(errors, body=body) from None


async def _json_body(request: Request) -> Any:
    import json

    from .errors import InvalidJSON, NotJSON

    kind = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if kind != "application/json" and not (kind.startswith("application/")
                                           and kind.endswith("+json")):
        raise NotJSON("the request body must be JSON, sent with "
                      "'Content-Type: application/json'")
    try:
        return json.loads(await request.body())
    except ValueError:
        raise InvalidJSON("the request body is not valid JSON; send a JSON object with "
                          "'Content-Type: application/json'") from None


def _scores(head: ServedHead, logits: Any, raw: bool) -> Any:
    out = np.asarray(logits, np.float32)
    return out if raw else score_activation(head.model.activation, out)


def install_heads(app: FastAPI, heads: Sequence[ServedHead]) -> None:
    """Serve ``heads`` (rerankers, sparse models) on an app made by ``create_app``: their
    routes, their batchers for as long as the app runs, their names in ``/v1/models``, their
    batchers in ``/ready`` and ``/metrics``."""
    state: ServerState = app.state.edgembed
    rerankers = [h for h in heads if h.task == "rerank"]
    sparse = [h for h in heads if h.task == "sparse"]
    state.names = frozenset({*state.names, *(h.name for h in heads)})
    paths = ((("/rerank", "/v1/rerank", "/predict") if rerankers else ())
             + (("/embed_sparse",) if sparse else ()))
    state.metrics.routes = frozenset({*state.metrics.routes, *paths})
    for task, group in (("rerank", rerankers), ("sparse", sparse)):
        for k, h in enumerate(group):
            h.metrics_prefix = f"edgembed_{task}{k + 1 if k else ''}_batcher"
    for h in heads:
        state.checks.append(h.problem)
        state.extra_metrics.append(h.prometheus)
    if rerankers:
        _install_rerank(app, state, rerankers)
    if sparse:
        _install_sparse(app, state, sparse[0])
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        for h in heads:
            h.start(state)
        try:
            async with inner(a) as value:
                yield value
        finally:
            for h in heads:
                await h.aclose()

    app.router.lifespan_context = lifespan


def _install_rerank(app: FastAPI, state: ServerState, rerankers: list[ServedHead]) -> None:
    settings = state.settings

    def pick(name: str | None) -> ServedHead:
        if name is None:
            return rerankers[0]
        for h in rerankers:
            if h.name == name:
                return h
        if name in settings.served_model_names:
            return rerankers[0]
        if len(rerankers) == 1 and not settings.strict_model_name:
            return rerankers[0]  # like TEI: one reranker answers whatever model is named
        served = ", ".join(repr(h.name) for h in rerankers)
        why = ("" if len(rerankers) == 1 else
               "; with several rerankers a request names one of them")
        raise ModelNotFound(f"the reranker {name!r} is not served here; this server serves "
                            f"{served}{why} (see GET /v1/models)")

    async def rank(request: Request, head: ServedHead, query: str, docs: list[str], *,
                   truncate: bool, raw: bool, priority: str | None, deadline: float | None,
                   started: float, field: str) -> tuple[list[int], Any, int]:
        if head.model.num_labels != 1:
            raise InputError(f"{head.name} has {head.model.num_labels} labels; ranking needs "
                             "a one-label cross-encoder (POST /predict gives every label)")
        check_inputs(docs, settings, field)
        check_inputs([query], settings, "query")
        logits, tokens = await head.run(request, [(query, d) for d in docs], truncate=truncate,
                                        priority=priority, deadline_ms=deadline,
                                        started=started)
        scores = _scores(head, logits, raw)[:, 0]
        order = sorted(range(len(docs)), key=lambda i: (-float(scores[i]), i))
        state.metrics.embedded(len(docs), tokens)
        return order, scores, tokens

    async def cohere(request: Request, body: CohereRerankRequest, priority: str | None,
                     deadline: float | None, started: float) -> Response:
        head = pick(body.model)
        docs = [d if isinstance(d, str) else d.text for d in body.documents]
        order, scores, tokens = await rank(
            request, head, body.query, docs, truncate=settings.truncate, raw=False,
            priority=priority, deadline=deadline, started=started, field="documents")
        results = []
        for i in order[:body.top_n]:
            item: dict[str, Any] = {"index": i, "relevance_score": float(scores[i])}
            if body.return_documents:
                item["document"] = {"text": docs[i]}
            results.append(item)
        return Response(compact_json({
            "id": str(uuid.uuid4()), "model": head.name, "results": results,
            "usage": {"total_tokens": tokens},
            "meta": {"api_version": {"version": "2"},
                     "billed_units": {"search_units": 1}, "tokens": {"input_tokens": tokens}},
        }), media_type="application/json")

    async def tei(request: Request, body: TEIRerankRequest, priority: str | None,
                  deadline: float | None, started: float) -> Response:
        head = rerankers[0]
        truncate = settings.truncate if body.truncate is None else body.truncate
        order, scores, _ = await rank(
            request, head, body.query, body.texts, truncate=truncate, raw=body.raw_scores,
            priority=priority, deadline=deadline, started=started, field="texts")
        out = []
        for i in order:
            item: dict[str, Any] = {"index": i, "score": float(scores[i])}
            if body.return_text:
                item["text"] = body.texts[i]
            out.append(item)
        return await json_response(lambda: compact_json(out), len(out))

    cohere_doc = with_retry_after(openai_errors(404, *_STATUSES))
    cohere_doc[200] = {"model": CohereRerankResponse,
                       "description": "The documents, best first."}

    @app.post("/v1/rerank", tags=["Rerank"], summary="Rerank documents (Cohere and Jina API)",
              response_model=None, responses=cohere_doc)
    async def v1_rerank(request: Request, body: CohereRerankRequest, priority: Priority = None,
                        deadline: Deadline = None) -> Response:
        return await cohere(request, body, priority, deadline, time.perf_counter())

    either = with_retry_after(tei_errors(404, *_STATUSES))
    either[200] = {"model": list[TEIRank] | CohereRerankResponse,
                   "description": "TEI's list of {index, score} for `texts`, or Cohere's "
                                  "object for `documents`; best first."}

    @app.post("/rerank", tags=["Rerank"], response_model=None, responses=either,
              summary="Rerank texts (TEI: query + texts; Cohere and Jina: query + documents)",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": {"oneOf": [
                      {"$ref": "#/components/schemas/TEIRerankRequest"},
                      {"$ref": "#/components/schemas/CohereRerankRequest"}]}}}}})
    async def rerank(request: Request, priority: Priority = None,
                     deadline: Deadline = None) -> Response:
        started = time.perf_counter()
        body = await _json_body(request)
        if isinstance(body, dict) and "documents" in body:
            return await cohere(request, _validate(CohereRerankRequest, body), priority,
                                deadline, started)
        return await tei(request, _validate(TEIRerankRequest, body), priority, deadline,
                         started)

    predict_doc = with_retry_after(tei_errors(*_STATUSES))
    predict_doc[200] = {"model": list[Prediction] | list[list[Prediction]],
                        "description": "Every label with its score, best first; a list per "
                                       "input for a list of inputs."}

    @app.post("/predict", tags=["TEI"], summary="Classify texts or text pairs (TEI API)",
              response_model=None, responses=predict_doc)
    async def predict(request: Request, body: PredictRequest, priority: Priority = None,
                      deadline: Deadline = None) -> Response:
        started = time.perf_counter()
        head = rerankers[0]
        single, items = _predict_inputs(body.inputs)
        check_inputs([t for x in items for t in ((x,) if isinstance(x, str) else x)], settings,
                     "inputs")
        truncate = settings.truncate if body.truncate is None else body.truncate
        logits, tokens = await head.run(request, items, truncate=truncate, priority=priority,
                                        deadline_ms=deadline, started=started)
        logits = np.asarray(logits, np.float32)
        scores = logits if body.raw_scores else _tei_activation(logits)
        labels = head.model.labels or [f"LABEL_{i}" for i in range(logits.shape[1])]
        out = [[{"score": float(row[j]), "label": labels[j]}
                for j in sorted(range(len(row)), key=lambda j: (-float(row[j]), j))]
               for row in scores]
        state.metrics.embedded(len(items), tokens)
        return await json_response(lambda: compact_json(out[0] if single else out), logits.size)


def _predict_inputs(inputs: str | list[str | list[str]]) -> tuple[bool, list[Any]]:
    """(one input?, the inputs as texts and (text, text) pairs), read as TEI reads them: a
    string, or a list of exactly two strings, is one input; any other list is a batch."""
    if isinstance(inputs, str):
        return True, [inputs]
    if len(inputs) == 2 and all(isinstance(x, str) for x in inputs):
        return True, [(inputs[0], inputs[1])]
    if not inputs:
        raise InputError("'inputs' is an empty list; send at least one text or pair")
    items: list[Any] = []
    for i, x in enumerate(inputs):
        if isinstance(x, str):
            items.append(x)
        elif len(x) == 2:
            items.append((x[0], x[1]))
        else:
            raise InputError(f"inputs[{i}] has {len(x)} texts; an input is a text or a pair "
                             "of two texts")
    return False, items


def _tei_activation(logits: Any) -> Any:
    """TEI's scores for /predict: sigmoid for one label, softmax over several."""
    if logits.shape[1] == 1:
        return score_activation("sigmoid", logits)
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def _install_sparse(app: FastAPI, state: ServerState, head: ServedHead) -> None:
    settings = state.settings
    doc = with_retry_after(tei_errors(*_STATUSES))
    doc[200] = {"model": list[list[SparseValue]],
                "description": "Each input's nonzero vocabulary entries, ids ascending."}

    @app.post("/embed_sparse", tags=["TEI"], summary="Sparse (SPLADE) vectors (TEI API)",
              response_model=None, responses=doc)
    async def embed_sparse(request: Request, body: EmbedSparseRequest,
                           priority: Priority = None, deadline: Deadline = None) -> Response:
        started = time.perf_counter()
        texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
        check_inputs(texts, settings, "inputs")
        prefix = ""
        if body.prompt_name is not None:
            prompts = dict(head.model.prompts)
            if body.prompt_name not in prompts:
                known = ", ".join(sorted(prompts)) or "none"
                raise InputError(f"prompt_name {body.prompt_name!r} is not one of this model's "
                                 f"prompts ({known})")
            prefix = prompts[body.prompt_name]
        items = [prefix + t for t in texts] if prefix else texts
        truncate = settings.truncate if body.truncate is None else body.truncate
        vectors, tokens = await head.run(request, items, truncate=truncate, priority=priority,
                                         deadline_ms=deadline, started=started)
        state.metrics.embedded(len(items), tokens)
        return await json_response(lambda: compact_json([v.to_tei() for v in vectors]),
                                    sum(len(v) for v in vectors))


# --------------------------------------- loading models ----------------------------------------


def load_models(models: Sequence[str], rerankers: Sequence[str], **load: Any
                ) -> tuple[ServedModel, list[ServedHead], list[Any]]:
    """What ``embed serve --model … --reranker …`` serves: the main model (the embedding model,
    else the first other model), the models served beside it, and every loaded model (for the
    startup line). ``load``: ``variant``, ``backend``, ``threads``. One dense embedding model
    per server."""
    from ..embedder import Embedder, task_of
    from ..reranker import Reranker

    loaded: list[Any] = []
    for name in models:
        if task_of(name) == "rerank":
            loaded.append(Reranker.load(name, **load))
            continue
        try:
            loaded.append(Embedder.load(name, **load))
        except InputError as refused:  # a hub cross-encoder, known to be one once pulled
            from ..manifest import Manifest
            from ..prepare import model_dir_of

            try:
                task = Manifest.load(model_dir_of(name)).task
            except EdgembedError:
                raise refused from None
            if task != "rerank":
                raise
            loaded.append(Reranker.load(name, **load))
    loaded += [Reranker.load(name, **load) for name in rerankers]
    dense = [m for m in loaded if getattr(m, "task", "") == "embedding"]
    if len(dense) > 1:
        raise InputError(f"one server serves one embedding model ({dense[0].model_name} and "
                         f"{dense[1].model_name} were given); run another `embed serve` for "
                         "the second (rerankers and sparse models may be added with --model)")
    spl = [m for m in loaded if getattr(m, "task", "") == "sparse"]
    if len(spl) > 1:
        raise InputError(f"one server serves one sparse model (TEI's /embed_sparse names none; "
                         f"{spl[0].model_name} and {spl[1].model_name} were given)")
    names = [m.model_name for m in loaded]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"{', '.join(twice)} is given twice")
    heads = [ServedHead(m) for m in loaded if m not in dense]
    main = ServedModel.from_embedder(dense[0]) if dense else placeholder_model(heads[0])
    return main, heads, loaded
