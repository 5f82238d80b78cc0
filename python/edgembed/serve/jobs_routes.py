"""The OpenAI Batch API on ``embed serve``: ``/v1/files`` and ``/v1/batches``.

::

    POST /v1/files (purpose=batch) ─► JOBS_DIR/files
      or input_blob (s3://…, allow-listed) ─► copied into JOBS_DIR/files when the batch is made
    POST /v1/batches ─► store (SQLite) ─► JobWorker ─► AdaptiveBatcher, bulk lane ─► model
                                             └─► output.jsonl, errors.jsonl
                                                   └─► output_folder (s3://…) when it ends
                                             └─► webhook event queued ─► WebhookSender ─► POST
    GET /v1/batches/{id} ─► output_file_id ─► GET /v1/files/{id}/content

Enabled by ``embed serve --jobs-dir DIR`` (``install_jobs`` on a created app; the options are
in ``jobs_settings``, which imports no web framework). Each request line
of a batch is answered as ``POST /v1/embeddings`` would answer it — same validation, limits and
vectors — but on the batcher's bulk lane, so batches fill idle capacity and never push
interactive requests past their latency target. Files and batches belong to the API key that
created them; another key gets 404 for them. The store and the worker are in ``edgembed.jobs``;
which object-store URLs and webhooks a key may use, and with which credentials and secret, is
``edgembed.jobs.access``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException

from ..errors import BatcherClosed, EdgembedError, InputError, ModelNotFound, Overloaded
from ..io.storage import Location
from ..jobs.access import AccessPolicy, owner_of
from ..jobs.store import BatchRecord, FileRecord, JobStore
from ..jobs.webhooks import WebhookSender
from ..jobs.worker import Answer, JobWorker
from .errors import LimitExceeded, error_body, http_error, status_error
from .jobs_settings import JobSettings
from .limits import check_inputs
from .model import encode_base64
from .schemas import EmbeddingRequest
from .shared import ServerState

__all__ = ["JobService", "JobSettings", "install_jobs"]

ENDPOINT = "/v1/embeddings"
BATCH_KEY = "batch-jobs"
MULTIPART_SLACK = 64 * 1024  # form boundaries and headers around the file
_COPY = 1 << 20

PageSize = Annotated[int, Query(ge=1, le=10_000, description="Items per page.")]


def install_jobs(app: FastAPI, settings: JobSettings, *, store: JobStore | None = None,
                 access: AccessPolicy | None = None) -> JobService:
    """Add the job routes to an app made by ``create_app``, and run the worker while it runs.

    ``store``: the job store of ``settings.jobs_dir`` when the caller opened it already (it
    holds the directory's lock: one server per jobs directory). ``access``: the settings'
    ``access_policy`` when the caller made it already (``embed serve`` does, before the model
    loads).

    The worker starts after the app's own startup (the batcher exists) and stops before the
    app's shutdown drains the batcher: work it had in flight is not committed and is redone
    after the restart.
    """
    if importlib.util.find_spec("python_multipart") is None:
        raise ImportError("the job API needs python-multipart to read uploads: "
                          "pip install 'edgembed[serve]'")
    state: ServerState = app.state.edgembed
    if access is None:
        access = settings.access_policy(state.settings.api_keys)
    service = JobService(state, store or JobStore(settings.jobs_dir), settings, access)
    service.install(app)
    state.checks.append(lambda: service.worker.problem)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as value:
            service.start()
            try:
                yield value
            finally:
                await service.stop()
                service.store.close()

    app.router.lifespan_context = lifespan
    app.state.edgembed_jobs = service
    return service


class Folder(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    url: str = Field(max_length=2048, description="An object-store folder, like "
                                                  "`s3://bucket/results/`.")


class Hook(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    url: str = Field(max_length=2048, description="An http(s) URL under one of the server's "
                                                  "`--allow-webhook` prefixes.")


class BatchCreate(BaseModel):
    """``POST /v1/batches``, as OpenAI's ``client.batches.create`` sends it, with edgembed's
    object-store and webhook fields (sent through the client's ``extra_body``)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    input_file_id: str | None = Field(
        default=None, description="A file uploaded with purpose `batch` (or give `input_blob`).")
    endpoint: str = Field(description="Must be `/v1/embeddings`.")
    completion_window: str = Field(description="Must be `24h`.")
    metadata: dict[str, str] | None = Field(default=None, max_length=16,
                                            description="Up to 16 string pairs, kept as given.")
    input_blob: str | None = Field(
        default=None, max_length=2048,
        description="Instead of `input_file_id`: an object-store URL (`s3://bucket/in.jsonl`) "
                    "under one of the server's `--allow-storage` prefixes (or the API key's "
                    "own), read when the batch is created.")
    output_folder: Folder | None = Field(
        default=None, description="Where the output and error files are written, as "
                                  "`{batch_id}_output.jsonl` and `{batch_id}_errors.jsonl`, "
                                  "when the batch ends.")
    webhook: Hook | None = Field(
        default=None, description="Called when the batch ends (`batch.completed`, "
                                  "`batch.failed`, `batch.cancelled`, `batch.expired`), signed "
                                  "per Standard Webhooks with the API key's secret.")


class JobService:
    """The routes' shared parts: the store, the worker, and how one request is answered."""

    def __init__(self, state: ServerState, store: JobStore, settings: JobSettings,
                 access: AccessPolicy | None = None) -> None:
        self.state = state
        self.store = store
        self.settings = settings
        self.access = access or AccessPolicy()
        self.sender = WebhookSender(store, self.access.secret, self.access.webhook_allowed,
                                    schedule=settings.webhook_retries_s)
        self.worker = JobWorker(store, self.answer, max_requests=settings.max_batch_requests,
                                group=settings.requests_in_flight, access=self.access,
                                ended=self.sender.notify)

    def start(self) -> None:
        self.worker.start()
        self.sender.start()

    async def stop(self) -> None:
        await self.worker.stop()
        await self.sender.stop()

    def _fetch_input(self, owner: str, loc: Location, url: str) -> FileRecord:
        """Copy an input object into the store as a batch file (``max_upload_bytes`` at
        most)."""
        staged = self.store.upload_path()
        try:
            loc.download(staged, self.settings.max_upload_bytes)
            return self.store.add_file(owner, "batch", url.rstrip("/").rsplit("/", 1)[-1],
                                       staged)
        finally:
            staged.unlink(missing_ok=True)

    # -- one request line ------------------------------------------------------------------------

    async def answer(self, body: dict[str, Any]) -> Answer:
        """Answer one ``/v1/embeddings`` body as the route would, on the bulk lane.

        Overloaded and BatcherClosed propagate (the worker retries, or stops); every other
        error becomes the status and body the route would have answered.
        """
        state, model = self.state, self.state.model
        try:
            try:
                req = EmbeddingRequest.model_validate(body)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(x) for x in first.get("loc", ())) or "body"
                return Answer(422, error_body("openai", status_error(422),
                                              f"{where}: {first.get('msg', 'invalid')}", where))
            if req.model is not None and req.model not in state.names:
                raise ModelNotFound(f"the model {req.model!r} is not served here; this server "
                                    f"serves {model.name!r}")
            texts = [req.input] if isinstance(req.input, str) else req.input
            check_inputs(texts, state.settings, "input")
            model.check_dimensions(req.dimensions)
            slicer = state.slicer
            if slicer is None:
                raise BatcherClosed("the server is not running")
            counts = await asyncio.to_thread(model.tokens, texts,
                                             truncate=state.settings.truncate)
            # Batch jobs share one key at the gate: together they take one fair share.
            raw = await slicer.embed(BATCH_KEY, texts, counts, priority="bulk",
                                     deadline_ms=None, started=time.perf_counter())
        except (Overloaded, BatcherClosed):
            raise
        except EdgembedError as exc:
            row = http_error(exc)
            return Answer(row.status, error_body("openai", row, str(exc),
                                                 getattr(exc, "param", None)))
        import numpy as np

        vectors = model.finish(np.asarray(raw, dtype=np.float32).reshape(len(texts), -1),
                               normalize=True, dimensions=req.dimensions)
        b64 = req.encoding_format == "base64"
        tokens = sum(counts)
        data = [{"object": "embedding", "index": i,
                 "embedding": encode_base64(v) if b64 else v.tolist()}
                for i, v in enumerate(vectors)]
        state.metrics.embedded(len(texts), tokens)
        return Answer(200, {"object": "list", "data": data, "model": model.name,
                            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, tokens)

    # -- routes ----------------------------------------------------------------------------------

    def owner(self, request: Request) -> str:
        """Whose request this is: a digest of its API key ("" when keys are off)."""
        if not self.state.settings.auth_enabled:
            return ""
        token = request.headers.get("authorization", "").strip().partition(" ")[2].strip()
        return owner_of(token)

    def install(self, app: FastAPI) -> None:
        store = self.store
        tags: list[str | Enum] = ["Batch jobs"]

        @app.post("/v1/files", tags=tags, summary="Upload a batch input file (JSONL)",
                  openapi_extra=_UPLOAD_DOC, responses=_links(_FILE_LINKS))
        async def create_file(request: Request) -> JSONResponse:
            owner = self.owner(request)
            staged, filename = await self._receive_upload(request)
            try:
                record = await asyncio.to_thread(store.add_file, owner, "batch", filename,
                                                 staged)
            finally:
                staged.unlink(missing_ok=True)
            return JSONResponse(record.to_api())

        @app.get("/v1/files", tags=tags, summary="List your files")
        async def list_files(request: Request, purpose: str | None = None, limit: PageSize = 20,
                             after: str | None = None) -> JSONResponse:
            page, more = store.list_files(self.owner(request), purpose=purpose, limit=limit,
                                          after=after)
            return JSONResponse(_page([f.to_api() for f in page], more))

        @app.get("/v1/files/{file_id}", tags=tags, summary="Describe a file")
        async def get_file(request: Request, file_id: str) -> JSONResponse:
            return JSONResponse(self._file(request, file_id).to_api())

        @app.get("/v1/files/{file_id}/content", tags=tags,
                 summary="Download a file (a batch's output or errors)",
                 response_class=FileResponse)
        async def file_content(request: Request, file_id: str) -> FileResponse:
            record = self._file(request, file_id)
            return FileResponse(store.file_path(record), media_type="application/jsonl",
                                filename=record.filename)

        @app.delete("/v1/files/{file_id}", tags=tags, summary="Delete a file")
        async def delete_file(request: Request, file_id: str) -> JSONResponse:
            found = store.delete_file(self.owner(request), file_id)  # JobConflict: 409
            if not found:
                raise _not_found("file", file_id)
            return JSONResponse({"id": file_id, "object": "file", "deleted": True})

        @app.post("/v1/batches", tags=tags, summary="Create a batch of /v1/embeddings requests",
                  responses=_links(_BATCH_LINKS))
        async def create_batch(request: Request, body: BatchCreate) -> JSONResponse:
            owner = self.owner(request)
            if body.endpoint != ENDPOINT:
                raise InputError(f"endpoint {body.endpoint!r} is not served here; batches run "
                                 f"{ENDPOINT} requests")
            if body.completion_window != "24h":
                raise InputError("completion_window must be '24h'")
            if (body.input_file_id is None) == (body.input_blob is None):
                raise InputError("give the input as input_file_id (an uploaded file) or as "
                                 "input_blob (an object-store URL), one of the two")
            access = self.access
            # Every URL is checked against the allow-lists before anything is read or written.
            source = target = None
            blob = folder = hook = None
            if body.input_blob is not None:
                blob, source = access.storage_location(owner, body.input_blob,
                                                       what="input_blob")
            if body.output_folder is not None:
                folder, target = access.storage_location(owner, body.output_folder.url,
                                                         what="output_folder", folder=True)
            if body.webhook is not None:
                hook = access.webhook_url(owner, body.webhook.url)
            if target is not None:  # the credentials may write there: fail now, not at the end
                await asyncio.to_thread(
                    target.probe, target.child(f".edgembed-probe-{secrets.token_hex(6)}"))
            if source is not None and blob is not None:
                record = await asyncio.to_thread(self._fetch_input, owner, source, blob)
            else:
                assert body.input_file_id is not None
                found = store.get_file(owner, body.input_file_id)
                if found is None:
                    raise _not_found("file", body.input_file_id)
                record = found
            if record.purpose != "batch":
                raise InputError(f"file {record.id} has purpose {record.purpose!r}; upload "
                                 "the input with purpose 'batch'")
            batch = store.create_batch(owner, record.id, ENDPOINT, "24h",
                                       self.state.model.name, body.metadata,
                                       input_blob=blob,
                                       output_folder=folder, webhook_url=hook)
            self.worker.notify()
            return JSONResponse(batch.to_api())

        @app.get("/v1/batches", tags=tags, summary="List your batches, newest first")
        async def list_batches(request: Request, limit: PageSize = 20,
                               after: str | None = None) -> JSONResponse:
            page, more = store.list_batches(self.owner(request), limit=limit, after=after)
            return JSONResponse(_page([b.to_api() for b in page], more))

        @app.get("/v1/batches/{batch_id}", tags=tags, summary="Describe a batch")
        async def get_batch(request: Request, batch_id: str) -> JSONResponse:
            return JSONResponse(self._batch(request, batch_id).to_api())

        @app.post("/v1/batches/{batch_id}/cancel", tags=tags, summary="Cancel a batch")
        async def cancel_batch(request: Request, batch_id: str) -> JSONResponse:
            batch = store.request_cancel(self.owner(request), batch_id)  # JobConflict: 409
            if batch is None:
                raise _not_found("batch", batch_id)
            self.worker.notify()
            return JSONResponse(batch.to_api())

    def _file(self, request: Request, file_id: str) -> FileRecord:
        record = self.store.get_file(self.owner(request), file_id)
        if record is None:
            raise _not_found("file", file_id)
        return record

    def _batch(self, request: Request, batch_id: str) -> BatchRecord:
        batch = self.store.get_batch(self.owner(request), batch_id)
        if batch is None:
            raise _not_found("batch", batch_id)
        return batch

    async def _receive_upload(self, request: Request) -> tuple[Path, str]:
        """Read a multipart upload (``file`` and ``purpose``) into the store's staging area,
        refusing it (413) as soon as it passes ``max_upload_bytes``."""
        limit = self.settings.max_upload_bytes
        too_big = LimitExceeded(f"the file is over the upload limit of {limit} bytes "
                                "(--max-upload-bytes); split it into several batches", "file")
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit + MULTIPART_SLACK:
            raise too_big
        received = 0

        async def receive() -> Any:
            nonlocal received
            message = await request.receive()
            received += len(message.get("body", b""))
            if received > limit + MULTIPART_SLACK:
                raise too_big
            return message

        kind = request.headers.get("content-type", "")
        if not kind.startswith("multipart/form-data"):
            raise InputError("upload the file as multipart/form-data with fields 'file' and "
                             "'purpose' (as the OpenAI clients do)")
        form = await Request(request.scope, receive).form(max_files=1, max_fields=8)
        try:
            purpose, upload = form.get("purpose"), form.get("file")
            if purpose != "batch":
                raise InputError(f"purpose must be 'batch' (this server stores batch inputs "
                                 f"only), not {purpose!r}")
            if upload is None or isinstance(upload, str):
                raise InputError("the form has no 'file' part")
            staged = self.store.upload_path()
            size = 0
            with open(staged, "wb") as out:
                while chunk := await upload.read(_COPY):
                    size += len(chunk)
                    if size > limit:
                        out.close()
                        staged.unlink(missing_ok=True)
                        raise too_big
                    out.write(chunk)
            return staged, os.path.basename(upload.filename or "input.jsonl")
        finally:
            await form.close()


def _not_found(kind: str, ident: str) -> HTTPException:
    return HTTPException(404, f"no {kind} with id {ident!r}")


def _page(data: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": more}


def _links(links: dict[str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI links from a created object's id to the operations on it (clients and
    stateful API testers follow them)."""
    return {200: {"description": "The created object.", "links": links}}


_FILE_ID = {"file_id": "$response.body#/id"}
_FILE_LINKS = {
    "GetFile": {"operationId": "get_file_v1_files__file_id__get", "parameters": _FILE_ID},
    "GetFileContent": {"operationId": "file_content_v1_files__file_id__content_get",
                       "parameters": _FILE_ID},
    "CreateBatch": {"operationId": "create_batch_v1_batches_post",
                    "requestBody": {"input_file_id": "$response.body#/id",
                                    "endpoint": "/v1/embeddings", "completion_window": "24h"}},
    "DeleteFile": {"operationId": "delete_file_v1_files__file_id__delete",
                   "parameters": _FILE_ID},
}
_BATCH_ID = {"batch_id": "$response.body#/id"}
_BATCH_LINKS = {
    "GetBatch": {"operationId": "get_batch_v1_batches__batch_id__get", "parameters": _BATCH_ID},
    "CancelBatch": {"operationId": "cancel_batch_v1_batches__batch_id__cancel_post",
                    "parameters": _BATCH_ID},
}

_UPLOAD_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object",
            "required": ["file", "purpose"],
            "properties": {
                "file": {"type": "string", "format": "binary",
                         "description": "JSONL: one /v1/embeddings request per line, as "
                                        "{custom_id, method: POST, url: /v1/embeddings, body}."},
                "purpose": {"type": "string", "enum": ["batch"]},
            },
        }}},
    },
}
