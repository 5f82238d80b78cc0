"""The ASGI app: routes, error handlers, the OpenAPI document, and the batcher's lifetime.

    request ─► CORS ─► metrics ─► auth (401) ─► body limit (413) ─► schema (400/422)
            ─► limits (413) ─► token counts (truncate=false: 413) ─► adaptive batcher (429)
            ─► model (raw vectors) ─► per-request dimensions + normalization ─► JSON

One :class:`~edgembed.batching.AdaptiveBatcher` serves every route, so OpenAI and TEI clients
share batches. It starts with the app (ASGI lifespan) and is drained when the app stops.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.openapi.utils import get_openapi
    from fastapi.responses import JSONResponse, PlainTextResponse, Response
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"the HTTP server needs FastAPI and uvicorn ({exc}); "
        "install them with: pip install 'edgembed[serve]'"
    ) from None


from .. import __version__
from ..batching import AdaptiveBatcher
from ..errors import EdgembedError, ModelNotFound
from ..io.storage import RedactingFilter
from .asgi import HeadMiddleware
from .auth import PUBLIC_PATHS, AuthMiddleware, KeyChecker
from .errors import InvalidJSON, NotJSON, error_body, family_of, render_error, status_error
from .fair import Slicer
from .limits import BodyLimitMiddleware, check_inputs
from .metrics import CONTENT_TYPE, HttpMetrics, MetricsMiddleware
from .model import ServedModel, encode_base64
from .schemas import (
    EmbeddingRequest,
    EmbeddingResponse,
    Health,
    ModelList,
    ModelObject,
    OpenAIErrorResponse,
    Readiness,
    TEIErrorResponse,
)
from .settings import ServeSettings
from .shared import (
    DEADLINE_HEADER,
    DESCRIPTIONS,
    EMBED_STATUSES,
    PRIORITY_HEADER,
    Deadline,
    Priority,
    ServerState,
    compact_json,
    embed_texts,
    json_response,
    openai_errors,
    queue_tokens,
    with_retry_after,
)

__all__ = ["DEADLINE_HEADER", "PRIORITY_HEADER", "ServerState", "create_app"]

_log = logging.getLogger("edgembed.serve")
_log.addFilter(RedactingFilter())  # no password or storage secret in a log line

def create_app(model: ServedModel, settings: ServeSettings | None = None) -> FastAPI:
    """The ASGI app serving ``model``. Run it with uvicorn (``edgembed.serve.server``)."""
    settings = settings or ServeSettings()
    from .docs_ui import DOCS_ROUTES
    from .tei import TEI_ROUTES

    routes = ("/v1/embeddings", "/v1/models", "/v1/models/{model_id}", *TEI_ROUTES,
              "/health", "/ready", "/metrics", "/openapi.json",
              *(DOCS_ROUTES if settings.docs else ()))
    metrics = HttpMetrics(routes, {"model": model.name, "variant": model.variant,
                                   "backend": model.backend, "dim": str(model.dim)})
    state = ServerState(model=model, settings=settings, metrics=metrics,
                        names=frozenset({model.name, *settings.served_model_names}))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.batcher = AdaptiveBatcher(
            model,
            latency_target_ms=settings.latency_target_ms,
            bulk_latency_target_ms=settings.bulk_latency_target_ms,
            percentile=settings.percentile,
            max_batch_tokens=settings.max_batch_tokens or model.max_batch_tokens,
            max_queue=settings.max_queue,
            workers=settings.workers,
            shed=settings.shed,
            cost_prior=settings.cost_prior,
        )
        budget = settings.max_batch_tokens or model.max_batch_tokens
        state.slicer = Slicer(
            lambda: state.batcher,
            max_length=model.max_length,
            max_batch_tokens=budget,
            latency_target_ms=settings.latency_target_ms,
            max_wait_ms=(state.batcher.config.bulk_latency_target_ms if settings.shed
                         else math.inf),
            capacity_tokens=settings.fair_tokens,
            max_waiting_tokens=queue_tokens(settings, budget, model.max_length),
            slice_tokens=settings.slice_tokens,
            workers=settings.workers,
        )
        try:
            yield
        finally:
            # In-flight requests have finished (uvicorn waits for them); compute what is queued.
            await state.batcher.aclose(drain=True)

    middleware = [Middleware(MetricsMiddleware, metrics=metrics), Middleware(HeadMiddleware)]
    if settings.cors_origins:
        middleware.insert(0, Middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", PRIORITY_HEADER, DEADLINE_HEADER],
            expose_headers=["Retry-After"],
            max_age=600,
        ))
    if settings.auth_enabled:
        middleware.append(Middleware(AuthMiddleware, checker=KeyChecker(settings.api_keys)))
    middleware.append(Middleware(BodyLimitMiddleware, limit=settings.max_body_bytes))

    app = FastAPI(
        title="edgembed",
        version=__version__,
        summary="OpenAI- and TEI-compatible text embeddings on an adaptive batcher.",
        lifespan=lifespan,
        middleware=middleware,
        docs_url=None,
        redoc_url=None,
        separate_input_output_schemas=False,
    )
    app.state.edgembed = state
    _install_error_handlers(app)
    _install_routes(app, state)
    _install_openapi(app, state)
    if settings.docs:
        from .docs_ui import install_docs

        install_docs(app)
    return app


# ------------------------------------------ routes ---------------------------------------------


def _install_routes(app: FastAPI, state: ServerState) -> None:
    model, settings, metrics = state.model, state.settings, state.metrics

    openai_post = with_retry_after(openai_errors(404, *EMBED_STATUSES))
    openai_post[200] = {"model": EmbeddingResponse, "description": "One embedding per input."}

    @app.post("/v1/embeddings", tags=["OpenAI"], summary="Create embeddings (OpenAI API)",
              response_model=None, responses=openai_post)
    async def create_embeddings(
        request: Request, body: EmbeddingRequest, priority: Priority = None,
        deadline: Deadline = None,
    ) -> Response:
        started = time.perf_counter()
        if settings.strict_model_name and body.model is not None \
                and body.model not in state.names:
            raise ModelNotFound(
                f"the model {body.model!r} is not served here; this server serves "
                f"{model.name!r} (see GET /v1/models)"
            )
        texts = [body.input] if isinstance(body.input, str) else body.input
        check_inputs(texts, settings, "input")
        model.check_dimensions(body.dimensions)
        vectors, tokens = await embed_texts(
            state, request, texts, truncate=settings.truncate, normalize=True,
            dimensions=body.dimensions, prompt_name=None, left=False,
            priority=priority, deadline_ms=deadline, started=started,
        )
        b64 = body.encoding_format == "base64"

        def render() -> bytes:
            data = [{"object": "embedding", "index": i,
                     "embedding": encode_base64(v) if b64 else v.tolist()}
                    for i, v in enumerate(vectors)]
            return compact_json({"object": "list", "data": data, "model": model.name,
                           "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

        return await json_response(render, vectors.size)

    from .tei import install_tei_routes

    install_tei_routes(app, state)

    @app.get("/v1/models", tags=["OpenAI"], summary="List the served model",
             response_model=ModelList)
    async def list_models() -> ModelList:
        return ModelList(data=[ModelObject(id=n, created=state.created)
                               for n in sorted(state.names, key=lambda n: (n != model.name, n))])

    @app.get("/v1/models/{model_id}", tags=["OpenAI"], summary="Describe the served model",
             response_model=ModelObject, responses=openai_errors(404))
    async def get_model(model_id: str) -> ModelObject:
        if model_id not in state.names:
            raise ModelNotFound(f"the model {model_id!r} is not served here; this server serves "
                                f"{model.name!r}")
        return ModelObject(id=model_id, created=state.created)

    @app.get("/health", tags=["Probes"], summary="Liveness: the process answers",
             response_model=Health)
    async def health() -> Health:
        return Health()

    @app.get("/ready", tags=["Probes"], summary="Readiness: the model is loaded and serving",
             response_model=Readiness,
             responses={503: {"model": Readiness,
                              "description": "Starting, draining, or a part is not working "
                                             "(`problems` says which)."}})
    async def ready() -> JSONResponse:
        status = state.status
        body: dict[str, Any] = {"status": status, "model": model.name}
        if status == "degraded":
            body["problems"] = state.problems()
        return JSONResponse(body, status_code=200 if status == "ready" else 503)

    @app.get("/metrics", tags=["Probes"], summary="Prometheus metrics",
             response_class=PlainTextResponse,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Text exposition format 0.0.4."}})
    async def prometheus() -> Response:
        text = metrics.render()
        if state.batcher is not None:
            text += state.batcher.prometheus_text()
        text += "".join(more() for more in state.extra_metrics)
        return Response(text, media_type=CONTENT_TYPE)


# ----------------------------------------- errors ----------------------------------------------


def _install_error_handlers(app: FastAPI) -> None:
    async def on_edgembed_error(request: Request, exc: Exception) -> Response:
        status, headers, body = render_error(request.url.path, exc)
        if status == 500:
            _log.error("%s %s: %s: %s", request.method, request.url.path,
                         type(exc).__name__, exc)
        return _raw(status, headers, body)

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return _raw(*render_error(request.url.path, InvalidJSON(
                "the request body is not valid JSON; send a JSON object with "
                "'Content-Type: application/json'")))
        if not _is_json(request) and any(
                tuple(e.get("loc", ())) == ("body",) for e in errors):
            return _raw(*render_error(request.url.path, NotJSON(
                "the request body must be JSON, sent with 'Content-Type: application/json'")))
        param, message = _describe(errors)
        hint = _token_ids_hint(getattr(exc, "body", None))
        if hint is not None:
            param, message = hint
        row = status_error(422)
        body = _error_json(request.url.path, row.status, message, param)
        return _raw(422, [(b"content-type", b"application/json")], body)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                   for k, v in (exc.headers or {}).items()]
        headers.append((b"content-type", b"application/json"))
        body = _error_json(request.url.path, exc.status_code, str(exc.detail), None)
        return _raw(exc.status_code, headers, body)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        _log.exception("unexpected error answering %s %s", request.method, request.url.path)
        return _raw(*render_error(request.url.path, exc))

    app.add_exception_handler(EdgembedError, on_edgembed_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)


def _is_json(request: Request) -> bool:
    """Whether the request declares a JSON body."""
    value = request.headers.get("content-type")
    if not value:
        return False
    kind = value.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/")
                                          and kind.endswith("+json"))


def _is_ids(value: Any) -> bool:
    """A token-id array (``[1, 2]``) or a list of them (``[[1, 2], [3]]``)."""
    def ints(v: Any) -> bool:
        return isinstance(v, list) and bool(v) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in v)
    return ints(value) or (isinstance(value, list) and bool(value)
                           and all(ints(v) for v in value))


def _token_ids_hint(body: Any) -> tuple[str, str] | None:
    """(param, message) for a body that sends token ids where texts belong: LangChain's
    ``OpenAIEmbeddings`` tokenizes with tiktoken and sends the ids unless told not to."""
    if not isinstance(body, dict):
        return None
    for field_name in ("input", "inputs"):
        if _is_ids(body.get(field_name)):
            return field_name, (
                f"'{field_name}' holds token ids; this server takes texts and tokenizes them "
                "with the model's own tokenizer (ids from another one, such as tiktoken's, "
                "would embed the wrong words). Send the texts themselves: with LangChain's "
                "OpenAIEmbeddings, pass check_embedding_ctx_length=False")
    return None


def _describe(errors: list[Any]) -> tuple[str | None, str]:
    """(param, message) for schema errors: the first error's location, then every message."""
    parts: list[str] = []
    param: str | None = None
    for e in errors[:5]:
        loc = [str(x) for x in e.get("loc", ()) if x not in ("body", "header")]
        if loc and loc[0] in ("embed", "similarity"):  # the kind of body POST / took it for
            loc = loc[1:]
        where = ".".join(loc) or "body"
        param = param or where
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    more = len(errors) - 5
    return param, "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _error_json(path: str, status: int, message: str, param: str | None) -> bytes:
    return json.dumps(error_body(family_of(path), status_error(status), message, param)).encode()


def _raw(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> Response:
    response = Response(body, status_code=status)
    for name, value in headers:
        if name != b"content-length":
            response.headers[name.decode("latin-1")] = value.decode("latin-1")
    return response


# ----------------------------------------- OpenAPI ---------------------------------------------


def _install_openapi(app: FastAPI, state: ServerState) -> None:
    """The generated document, plus what only the running configuration knows: the limits,
    the dimension range, the model's prompts, and the API-key scheme when keys are set."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, summary=app.summary,
                              routes=app.routes, separate_input_output_schemas=False)
            _document_configuration(doc, state)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document_configuration(doc: dict[str, Any], state: ServerState) -> None:
    s, model = state.settings, state.model
    schemas = doc["components"]["schemas"]
    text = {"type": "string", "maxLength": s.max_input_chars}
    for name, prop in (("EmbeddingRequest", "input"), ("EmbedRequest", "inputs"),
                       ("EmbedAllRequest", "inputs"), ("TokenizeRequest", "inputs")):
        field_doc = schemas[name]["properties"][prop]
        schemas[name]["properties"][prop] = {
            "anyOf": [text, {"type": "array", "items": text, "minItems": 1,
                             "maxItems": s.max_inputs}],
            "title": field_doc.get("title", prop),
            "description": f"{field_doc.get('description', '')} At most {s.max_inputs} texts "
                           f"of at most {s.max_input_chars} characters (else 413).",
        }
        dims = schemas[name]["properties"].get("dimensions", {})
        for option in dims.get("anyOf", []):
            if option.get("type") == "integer":
                option["maximum"] = model.dim
    # Checked by the routes (an empty list is TEI's 400 "empty", not a schema error):
    sim = schemas["SimilarityInput"]["properties"]
    sim["source_sentence"]["maxLength"] = s.max_input_chars
    sim["sentences"].update(minItems=1, maxItems=s.max_inputs - 1)
    sim["sentences"]["items"]["maxLength"] = s.max_input_chars
    vocab = getattr(model.embedder, "vocab_size", None)
    for option in schemas["DecodeRequest"]["properties"]["ids"].get("anyOf", []):
        option["minItems"] = 1
        ints = option["items"]
        if ints.get("type") == "array":
            ints.update(minItems=1)
            option["maxItems"] = s.max_inputs
            ints = ints["items"]
        if vocab:
            ints["maximum"] = vocab - 1
    for item in doc["paths"].values():
        for operation in item.values():
            for param in operation.get("parameters", []):
                # An HTTP header is present or absent, never null.
                options = param["schema"].pop("anyOf", None)
                if param["in"] == "header" and options:
                    param["schema"].update(next(o for o in options if o.get("type") != "null"))
    for name in ("EmbedRequest", "EmbedAllRequest", "SimilarityParameters", "TokenizeRequest"):
        prompts = schemas[name]["properties"]["prompt_name"]
        prompts["anyOf"] = [{"type": "string", "enum": sorted(model.prompts)},
                            {"type": "null"}] if model.prompts else [{"type": "null"}]
    if s.auth_enabled:
        doc["components"].setdefault("securitySchemes", {})["bearerAuth"] = {
            "type": "http", "scheme": "bearer",
            "description": "An API key given to the server with --api-key or EDGEMBED_API_KEYS.",
        }
        for path, item in doc["paths"].items():
            if path in PUBLIC_PATHS:
                continue
            for operation in item.values():
                operation["security"] = [{"bearerAuth": []}]
                family = OpenAIErrorResponse if family_of(path) == "openai" else TEIErrorResponse
                operation["responses"]["401"] = {
                    "description": DESCRIPTIONS[401],
                    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
                    "content": {"application/json": {
                        "schema": {"$ref": f"#/components/schemas/{family.__name__}"}}},
                }
