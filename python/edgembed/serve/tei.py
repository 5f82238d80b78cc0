"""The Hugging Face Text Embeddings Inference (TEI 1.9) API for an embedding model.

    POST /embed        texts → vectors                         (InferenceClient.feature_extraction)
    POST /             /embed, or /similarity for a body whose ``inputs`` is an object
                       (InferenceClient posts there when given the server's root URL)
    POST /invocations  the same as /
    POST /similarity   a text against others → cosine similarities (sentence_similarity)
    POST /embed_all    texts → one vector per token (the encoder's last hidden states)
    POST /tokenize     texts → tokens with their UTF-8 byte offsets, as TEI gives them
    POST /decode       token ids → texts
    GET  /info         the model and the server's limits

Bodies and answers have TEI's shapes; errors its shape (``{"error", "error_type"}``) with the
statuses of ``errors.py`` (an empty request is 400 ``empty``, as in TEI). /embed, / and
/similarity go through the adaptive batcher like the OpenAI route; /embed_all runs on
onnxruntime (the engine returns pooled vectors only), one request at a time, beside it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import Response

from .. import __version__
from .._unicode import well_formed
from ..errors import EmptyInput, LimitExceeded, Overloaded
from .limits import check_inputs
from .schemas import (
    DecodeRequest,
    DecodeResponse,
    EmbedAllRequest,
    EmbedAllResponse,
    EmbedRequest,
    EmbedResponse,
    Info,
    RootRequest,
    SimilarityParameters,
    SimilarityRequest,
    SimilarityResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from .shared import (
    EMBED_STATUSES,
    Deadline,
    Priority,
    ServerState,
    compact_json,
    embed_texts,
    json_response,
    tei_errors,
    with_retry_after,
)

__all__ = ["EMBED_ALL_BATCHES", "TEI_ROUTES", "install_tei_routes"]

TEI_ROUTES = ("/embed", "/", "/invocations", "/similarity", "/embed_all", "/tokenize",
              "/decode", "/info")
# /embed_all answers one vector per token: a request may hold at most this many batches'
# worth of tokens (2,048 tokens per batch on a CPU: 16,384 tokens, 6.3 M values for MiniLM).
EMBED_ALL_BATCHES = 8


def _texts(inputs: str | list[str]) -> list[str]:
    return [inputs] if isinstance(inputs, str) else inputs


def install_tei_routes(app: FastAPI, state: ServerState) -> None:
    """Add the TEI routes to ``app``."""
    model, settings = state.model, state.settings
    tei_post = with_retry_after(tei_errors(*EMBED_STATUSES))
    tei_post[200] = {"model": EmbedResponse, "description": "One vector per input."}

    async def embed(request: Request, body: EmbedRequest, priority: str | None,
                    deadline: float | None) -> Response:
        started = time.perf_counter()
        texts = _texts(body.inputs)
        check_inputs(texts, settings, "inputs")
        model.check_dimensions(body.dimensions)
        truncate = settings.truncate if body.truncate is None else body.truncate
        vectors, _ = await embed_texts(
            state, request, texts, truncate=truncate, normalize=body.normalize,
            dimensions=body.dimensions, prompt_name=body.prompt_name,
            left=body.truncation_direction.lower() == "left",
            priority=priority, deadline_ms=deadline, started=started,
        )
        return await json_response(lambda: compact_json(vectors.tolist()), vectors.size)

    async def similarity(request: Request, body: SimilarityRequest, priority: str | None,
                         deadline: float | None) -> Response:
        started = time.perf_counter()
        if not body.inputs.sentences:
            raise EmptyInput("'inputs.sentences' is an empty list; send at least one sentence "
                             "to compare with 'inputs.source_sentence'")
        texts = [body.inputs.source_sentence, *body.inputs.sentences]
        check_inputs(texts, settings, "inputs.sentences")
        params = body.parameters or SimilarityParameters()
        truncate = settings.truncate if params.truncate is None else params.truncate
        vectors, _ = await embed_texts(
            state, request, texts, truncate=truncate, normalize=True, dimensions=None,
            prompt_name=params.prompt_name,
            left=params.truncation_direction.lower() == "left",
            priority=priority, deadline_ms=deadline, started=started,
        )
        # cosine similarity: the vectors are unit length (a zero vector stays zero: 0)
        scores = (vectors[1:].astype(np.float64) @ vectors[0].astype(np.float64)).tolist()
        return Response(compact_json(scores), media_type="application/json")

    @app.post("/embed", tags=["TEI"], summary="Embed texts (Hugging Face TEI API)",
              response_model=None, responses=tei_post)
    async def tei_embed(request: Request, body: EmbedRequest, priority: Priority = None,
                        deadline: Deadline = None) -> Response:
        return await embed(request, body, priority, deadline)

    root_post = with_retry_after(tei_errors(*EMBED_STATUSES))
    root_post[200] = {"description": "An /embed body gets vectors, a /similarity body scores.",
                      "content": {"application/json": {"schema": {"anyOf": [
                          {"$ref": "#/components/schemas/EmbedResponse"},
                          {"$ref": "#/components/schemas/SimilarityResponse"}]}}}}

    async def root(request: Request, body: RootRequest, priority: Priority = None,
                   deadline: Deadline = None) -> Response:
        if isinstance(body, SimilarityRequest):
            return await similarity(request, body, priority, deadline)
        return await embed(request, body, priority, deadline)

    for path in ("/", "/invocations"):
        app.post(path, tags=["TEI"], response_model=None, responses=root_post,
                 summary="Embed texts, or score sentence similarity (TEI root route)",
                 description="The body of /embed, or of /similarity (an `inputs` object). "
                             "`huggingface_hub.InferenceClient` posts here when given the "
                             "server's URL.")(root)

    sim_post = with_retry_after(tei_errors(*EMBED_STATUSES))
    sim_post[200] = {"model": SimilarityResponse,
                     "description": "One cosine similarity per sentence."}

    @app.post("/similarity", tags=["TEI"], summary="Sentence similarity (TEI API)",
              response_model=None, responses=sim_post)
    async def tei_similarity(request: Request, body: SimilarityRequest,
                             priority: Priority = None, deadline: Deadline = None) -> Response:
        return await similarity(request, body, priority, deadline)

    states_lock = asyncio.Lock()
    waiting = 0
    all_post = with_retry_after(tei_errors(400, 413, 415, 422, 429, 503))
    all_post[200] = {"model": EmbedAllResponse,
                     "description": "Per input, one vector per token."}

    @app.post("/embed_all", tags=["TEI"], response_model=None, responses=all_post,
              summary="Every token's vector (TEI API)",
              description="The encoder's last hidden states, before pooling, special tokens "
                          "included. Computed by onnxruntime on the served variant, one request "
                          "at a time beside the batcher.")
    async def embed_all(body: EmbedAllRequest) -> Response:
        nonlocal waiting
        texts = _texts(body.inputs)
        check_inputs(texts, settings, "inputs")
        model.check_prompt(body.prompt_name)
        truncate = settings.truncate if body.truncate is None else body.truncate
        left = body.truncation_direction.lower() == "left"
        items = [model.text(t, body.prompt_name) for t in texts]
        counts = await asyncio.to_thread(model.tokens, items, truncate=truncate)
        budget = settings.max_batch_tokens or model.max_batch_tokens
        limit = EMBED_ALL_BATCHES * budget
        if sum(counts) > limit:
            raise LimitExceeded(f"/embed_all answers one vector per token: this request has "
                                f"{sum(counts)} tokens, over the limit of {limit}; split it "
                                "into several requests", "inputs")
        if waiting >= settings.max_queue:
            raise Overloaded(f"{waiting} /embed_all requests are waiting; retry later",
                             retry_after=1.0)
        waiting += 1
        try:
            async with states_lock:
                states = await asyncio.to_thread(
                    model.token_embeddings, texts, truncate=truncate, left=left,
                    prompt_name=body.prompt_name)
        finally:
            waiting -= 1
        n = sum(int(s.size) for s in states)
        return await json_response(lambda: compact_json([s.tolist() for s in states]), n)

    tok_post = tei_errors(400, 413, 415, 422, 503)
    tok_post[200] = {"model": TokenizeResponse, "description": "Per input, its tokens."}

    @app.post("/tokenize", tags=["TEI"], response_model=None, responses=tok_post,
              summary="Tokenize texts (TEI API)",
              description="Every token (no truncation) with the text it covers and its UTF-8 "
                          "byte offsets `start`/`stop` in the prompt + text, as TEI gives them; "
                          "special tokens have null offsets.")
    async def tokenize(body: TokenizeRequest) -> Response:
        texts = _texts(body.inputs)
        check_inputs(texts, settings, "inputs")
        model.check_prompt(body.prompt_name)
        prompt = model.prompt_text(body.prompt_name)

        def run() -> bytes:
            spans = model.spans(texts, add_special_tokens=body.add_special_tokens,
                                prompt_name=body.prompt_name)
            return compact_json([_tei_tokens(well_formed(prompt + t), s)
                           for t, s in zip(texts, spans, strict=True)])

        chars = sum(len(t) for t in texts)
        data = run() if chars < 4096 else await asyncio.to_thread(run)
        return Response(data, media_type="application/json")

    dec_post = tei_errors(400, 413, 415, 422, 503)
    dec_post[200] = {"model": DecodeResponse, "description": "One text per id list."}

    @app.post("/decode", tags=["TEI"], response_model=None, responses=dec_post,
              summary="Decode token ids (TEI API)")
    async def decode(body: DecodeRequest) -> Response:
        ids: list[Any] = list(body.ids)
        if not ids:
            raise EmptyInput("'ids' is an empty list; send token ids")
        seqs: list[list[int]] = [ids] if isinstance(ids[0], int) else ids
        for i, seq in enumerate(seqs):
            if not seq:
                raise EmptyInput(f"'ids[{i}]' is an empty list; send token ids")
        if len(seqs) > settings.max_inputs:
            raise LimitExceeded(f"'ids' has {len(seqs)} lists, over the limit of "
                                f"{settings.max_inputs} per request (--max-inputs)", "ids")
        texts = await asyncio.to_thread(model.decode, seqs,
                                        skip_special_tokens=body.skip_special_tokens)
        return Response(compact_json(texts), media_type="application/json")

    @app.get("/info", tags=["TEI"], summary="The served model and the server's limits",
             response_model=Info)
    async def info() -> Info:
        facts = model.info()
        return Info.model_validate({
            "model_id": model.name,
            "model_sha": facts["model_sha"],
            "model_dtype": facts["model_dtype"],
            "served_model_name": model.name,
            "model_type": {"embedding": {"pooling": facts["pooling"]}},
            "max_concurrent_requests": settings.max_queue,
            "max_input_length": model.max_length,
            "max_batch_tokens": settings.max_batch_tokens or model.max_batch_tokens,
            "max_batch_requests": None,
            "max_client_batch_size": settings.max_inputs,
            "auto_truncate": settings.truncate,
            "tokenization_workers": 1,
            "version": __version__,
            "sha": None,
            "docker_label": None,
        })


def _tei_tokens(text: str, spans: list[Any]) -> list[dict[str, Any]]:
    """TEI's SimpleToken list: character offsets become UTF-8 byte offsets into ``text``."""
    data = text.encode("utf-8")
    at = [0] * (len(text) + 1)  # byte offset of each character
    pos = 0
    for i, ch in enumerate(text):
        at[i] = pos
        pos += len(ch.encode("utf-8"))
    at[len(text)] = pos
    out = []
    for s in spans:
        if s.special:
            out.append({"id": s.id, "text": s.token, "special": True, "start": None,
                        "stop": None})
        else:
            start, stop = at[s.start], at[s.end]
            out.append({"id": s.id, "text": data[start:stop].decode("utf-8", "replace"),
                        "special": False, "start": start, "stop": stop})
    return out
