"""The batch worker: runs OpenAI-style batches from the store, a group of requests at a time.

Batches take turns (``turn_s`` each, in creation order), so one large batch does not hold
back every batch created after it.

::

    validating ─► in_progress ─► finalizing ─► completed
        │              ├─ cancel requested ─► cancelling ─► cancelled (answered lines kept)
        │              └─ past expires_at ─────────────────► expired   (answered lines kept)
        └─ bad lines ─► failed (errors.data says which lines and why; nothing is run)

In progress, a group of request lines is answered concurrently (so the batcher can put their
texts in the same batches), their result lines are appended to ``output.jsonl`` (status 200)
or ``errors.jsonl`` (any other) and flushed to disk, and only then is the group committed in
the store. On start the worker cuts both files back to their committed lengths: a request
answered before a crash but not committed is answered again, and appears once.

Answering a request is the server's business (``handle``); a transient refusal of the batcher
(``Overloaded``) is retried after its ``retry_after``, and ``BatcherClosed`` stops the worker
with the group uncommitted, to be redone after a restart.

What goes wrong stays as small as it can:

- one request (a line nested too deeply to parse, an unexpected error answering it): that
  request's error line, as the route would answer it (422, 500); the batch goes on;
- the environment (``OSError`` such as a full disk, an SQLite error): nothing is recorded, the
  worker waits (0.5 s, doubling up to 30 s) and tries again, and ``problem`` says why
  meanwhile (the server's ``/ready`` answers 503 with it);
- anything else while running a batch: that batch ends as ``failed``, with the results
  committed before published in its output and error files.

When a batch ends, whatever its status, its committed result files are published to its
``output_folder`` if it has one, as ``{batch_id}_output.jsonl`` and ``{batch_id}_errors.jsonl``,
with the owner's credentials (``access``; the folder is checked against the allow-lists again,
which may have changed since the batch was created). A store that refuses them turns
``completed`` into ``failed`` (an error ``storage_error``), and the files stay downloadable
from the server. ``ended`` is called after each final status (the store has queued the batch's
webhook then).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BatcherClosed, NotAllowed, Overloaded, StorageError
from ..io.readers import TooDeep, loads, nonblank_lines, top_level_string
from ..io.storage import RedactingFilter, append_durably, truncate_durably
from .access import AccessPolicy
from .store import BatchRecord, JobStore

__all__ = ["Answer", "Handler", "JobWorker", "request_lines", "validate_lines"]

_log = logging.getLogger("edgembed.jobs")
_log.addFilter(RedactingFilter())  # no password or storage secret in a log line

MAX_REPORTED_ERRORS = 100
RETRY_CAP_S = 5.0
BACKOFF_START_S = 0.5  # the worker's wait after an error of the disk or the database, doubled
BACKOFF_CAP_S = 30.0  # on each further error up to this


@dataclass(frozen=True)
class Answer:
    """What one request got: an HTTP status, the body, and the tokens it cost."""

    status: int
    body: dict[str, Any]
    tokens: int = 0


Handler = Callable[[dict[str, Any]], Awaitable[Answer]]


def request_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of every request of an input file: its non-blank lines."""
    return nonblank_lines(path)


def validate_lines(
    path: Path, endpoint: str, max_requests: int
) -> tuple[int, list[dict[str, Any]]]:
    """(number of requests, problems) of a batch input file, as OpenAI's validation reports
    them: each problem names its line."""
    problems: list[dict[str, Any]] = []
    seen: set[str] = set()
    total = 0

    def problem(line: int | None, code: str, message: str, param: str | None = None) -> None:
        if len(problems) < MAX_REPORTED_ERRORS:
            problems.append({"code": code, "message": message, "param": param, "line": line})

    for n, raw in request_lines(path):
        total += 1
        try:
            obj = loads(raw)
        except TooDeep:
            # Valid JSON the parser cannot follow: the request fails alone when it runs (an
            # error line with its custom_id), as a body the schema refuses does.
            cid = top_level_string(raw, "custom_id")
            if cid is not None and cid in seen:
                problem(n, "duplicate_custom_id", f"custom_id {cid!r} appears more than "
                                                  "once; each request needs its own",
                        "custom_id")
            elif cid:
                seen.add(cid)
            else:
                problem(n, "missing_required_parameter", "custom_id must be a non-empty "
                                                         "string", "custom_id")
            continue
        except ValueError:
            problem(n, "invalid_json_line", "this line is not valid JSON (or not UTF-8)")
            continue
        if not isinstance(obj, dict):
            problem(n, "invalid_request", "each line must be a JSON object with custom_id, "
                                          "method, url and body")
            continue
        cid = obj.get("custom_id")
        if not isinstance(cid, str) or not cid:
            problem(n, "missing_required_parameter", "custom_id must be a non-empty string",
                    "custom_id")
        elif cid in seen:
            problem(n, "duplicate_custom_id", f"custom_id {cid!r} appears more than once; "
                                              "each request needs its own", "custom_id")
        else:
            seen.add(cid)
        if obj.get("method") != "POST":
            problem(n, "invalid_method", "method must be POST", "method")
        if obj.get("url") != endpoint:
            problem(n, "mismatched_endpoint", f"url {obj.get('url')!r} differs from the batch's "
                                              f"endpoint {endpoint!r}", "url")
        if not isinstance(obj.get("body"), dict):
            problem(n, "invalid_request", "body must be a JSON object", "body")
    if total == 0:
        problem(None, "empty_file", "the input file has no requests")
    if total > max_requests:
        problem(None, "too_many_requests", f"the input file has {total} requests, over the "
                                           f"limit of {max_requests} per batch "
                                           "(--max-batch-requests); split it")
    return total, problems


class JobWorker:
    """Runs the store's batches one after another, on the server's event loop."""

    def __init__(
        self,
        store: JobStore,
        handle: Handler,
        *,
        max_requests: int = 50_000,
        group: int = 32,
        poll_s: float = 1.0,
        turn_s: float = 10.0,
        access: AccessPolicy | None = None,
        ended: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.handle = handle
        self.access = access or AccessPolicy()
        self.ended = ended
        self.max_requests = max_requests
        self.group = group
        self.poll_s = poll_s
        self.turn_s = turn_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._problem: str | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="edgembed-jobs")

    def notify(self) -> None:
        """Something changed (a new batch, a cancel): look now instead of at the next poll."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop at once; the group in progress is not committed and is redone on restart."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @property
    def problem(self) -> str | None:
        """Why the worker is not running batches now (None while it is): for ``/ready``."""
        if self._task is not None and self._task.done() and not self._stopping:
            return "the batch worker has stopped; see the server's log"
        return self._problem

    async def _run(self) -> None:
        last = 0
        backoff = BACKOFF_START_S
        while not self._stopping:
            try:
                last = await self._turn(last)
            except BatcherClosed:
                return  # the server is stopping: the batch continues after the restart
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the disk, the database: wait, then try again
                self._problem = f"the batch worker is retrying after an error: {exc!r}"
                _log.exception("the batch worker failed; retrying in %.1f s", backoff)
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), backoff)
                backoff = min(backoff * 2.0, BACKOFF_CAP_S)
            else:
                self._problem = None
                backoff = BACKOFF_START_S

    async def _turn(self, last: int) -> int:
        """Give the next batch its turn (or wait for one); returns its sequence number.

        An error of the environment (the disk, the database) propagates: ``_run`` retries
        later, the batch untouched. Any other error is a bug in running this batch: the batch
        ends as failed, its committed results published, and the other batches go on.
        """
        batch = self.store.next_active(last)
        if batch is None:
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)
            return last
        await asyncio.sleep(0)  # never hold the event loop between turns
        try:
            await self._process(batch)
        except (BatcherClosed, asyncio.CancelledError, OSError, sqlite3.Error):
            raise
        except Exception:
            _log.exception("batch %s failed", batch.id)
            errors = [{"code": "server_error", "line": None, "param": None,
                       "message": "the server could not finish this batch (see its log); "
                                  "the requests answered before are in its output and error "
                                  "files"}]
            current = self.store.batch(batch.id)
            if current.status in ("in_progress", "finalizing", "cancelling"):
                await self._finish(batch.id, "failed", errors)
            else:
                self.store.fail(batch.id, errors, any_status=True)
                self._ended()
        return batch.seq

    async def _finish(self, batch_id: str, status: str,
                      errors: list[dict[str, Any]] | None = None) -> None:
        """End a batch as ``status`` with what was committed: its result files cut back to
        their committed lengths, published to its output folder (if any), then recorded."""
        current = self.store.batch(batch_id)
        folder = self.store.batch_dir(batch_id)
        truncate_durably(folder / "output.jsonl", current.output_bytes)
        truncate_durably(folder / "errors.jsonl", current.error_bytes)
        blobs: tuple[str | None, str | None] = (None, None)
        if current.output_folder:
            try:
                blobs = await self.publish(current)
            except (StorageError, NotAllowed) as exc:  # the files stay on the server
                _log.warning("batch %s: %s", batch_id, exc)
                before = json.loads(current.errors)["data"] if current.errors else []
                errors = [*(errors or before), {
                    "code": "storage_error", "line": None, "param": "output_folder",
                    "message": f"{exc}; the results are still at /v1/files/{{id}}/content"}]
                if status == "completed":
                    status = "failed"
        self.store.finish(current, status, errors, output_blob=blobs[0], error_blob=blobs[1])
        self._ended()

    async def publish(self, batch: BatchRecord) -> tuple[str | None, str | None]:
        """Write a batch's result files to its output folder; returns the objects' URLs."""
        assert batch.output_folder is not None
        local = self.store.batch_dir(batch.id)
        out: list[str | None] = []
        for name, count in (("output.jsonl", batch.completed), ("errors.jsonl", batch.failed)):
            if count == 0:  # as finish() gives such a batch no file
                out.append(None)
                continue
            url, target = self.access.storage_location(
                batch.owner, f"{batch.output_folder}{batch.id}_{name}", what="output_folder")
            await asyncio.to_thread(target.upload, local / name)
            out.append(url)
        return out[0], out[1]

    def _ended(self) -> None:
        if self.ended is not None:
            self.ended()

    async def _process(self, batch: BatchRecord) -> None:
        if batch.status == "validating":
            record = self.store.get_file(batch.owner, batch.input_file_id)
            if record is None:
                self.store.fail(batch.id, [{"code": "file_not_found", "line": None,
                                            "param": "input_file_id",
                                            "message": f"input file {batch.input_file_id} "
                                                       "is gone"}])
                self._ended()
                return
            total, problems = await asyncio.to_thread(
                validate_lines, self.store.file_path(record), batch.endpoint, self.max_requests)
            if problems:
                self.store.fail(batch.id, problems)
                self._ended()
                return
            self.store.start(batch.id, total)
            batch = self.store.batch(batch.id)
        if batch.status == "in_progress":
            await self._run_requests(batch)
            batch = self.store.batch(batch.id)
        if batch.status == "finalizing":
            await self._finish(batch.id, "completed")
        elif batch.status == "cancelling":
            await self._finish(batch.id, "cancelled")

    async def _run_requests(self, batch: BatchRecord) -> None:
        record = self.store.get_file(batch.owner, batch.input_file_id)
        folder = self.store.batch_dir(batch.id)
        folder.mkdir(parents=True, exist_ok=True)
        out_path, err_path = folder / "output.jsonl", folder / "errors.jsonl"
        truncate_durably(out_path, batch.output_bytes)  # lines after the last commit go
        truncate_durably(err_path, batch.error_bytes)
        if record is None:  # cannot happen: files in use cannot be deleted
            self.store.begin_finalizing(batch.id)
            return
        done = batch.next_line
        lines = itertools.islice(request_lines(self.store.file_path(record)), done, None)
        out_bytes, err_bytes = batch.output_bytes, batch.error_bytes
        turn_ends = time.monotonic() + self.turn_s
        with open(out_path, "ab") as out, open(err_path, "ab") as err:
            while True:
                status = self.store.status(batch.id)
                if status != "in_progress":
                    return  # cancelling: _process finishes it
                if time.time() > batch.expires_at:
                    await self._finish(batch.id, "expired")
                    return
                group = [raw for _, raw in itertools.islice(lines, self.group)]
                if not group:
                    break
                answers = await asyncio.gather(
                    *(self._answer(batch.id, done + i, raw) for i, raw in enumerate(group)))
                good = [a for a in answers if a[0]]
                bad = [a for a in answers if not a[0]]
                out_bytes += await asyncio.to_thread(append_durably, out, [a[1] for a in good])
                err_bytes += await asyncio.to_thread(append_durably, err, [a[1] for a in bad])
                done += len(group)
                self.store.advance(batch.id, next_line=done, output_bytes=out_bytes,
                                   error_bytes=err_bytes, completed=len(good), failed=len(bad),
                                   tokens=sum(a[2] for a in answers))
                if time.monotonic() > turn_ends:
                    other = self.store.next_active(batch.seq)
                    if other is not None and other.id != batch.id:
                        return  # another batch waits: its turn; this one continues later
        self.store.begin_finalizing(batch.id)

    async def _answer(self, batch_id: str, index: int, raw: bytes) -> tuple[bool, bytes, int]:
        """(succeeded, result line, tokens) for one request line.

        Whatever goes wrong with one request — a line too deep to parse, an unexpected error
        while answering it — is that request's error line (as the route would answer 422 or
        500), never the batch's end.
        """
        try:
            request = loads(raw)
        except TooDeep:
            request = {"custom_id": top_level_string(raw, "custom_id"), "body": None}
            answer = Answer(422, _error(422, "invalid_request_error", "invalid_request",
                                        "the request nests deeper than JSON can be read; "
                                        "flatten it", "body"))
        else:
            answer = await self._handle(request["body"])
        stem = batch_id.removeprefix("batch_")
        line = {"id": f"batch_req_{stem}_{index}", "custom_id": request["custom_id"],
                "response": {"status_code": answer.status,
                             "request_id": f"req_{stem}_{index}", "body": answer.body},
                "error": None}
        data = (json.dumps(line, separators=(",", ":"), allow_nan=False) + "\n").encode()
        return answer.status == 200, data, answer.tokens

    async def _handle(self, body: dict[str, Any]) -> Answer:
        delay = 0.05
        while True:
            try:
                return await self.handle(body)
            except Overloaded as exc:  # the bulk lane is full: wait, as a client would
                if self._stopping:
                    raise BatcherClosed("the server is stopping") from None
                await asyncio.sleep(min(max(exc.retry_after, delay), RETRY_CAP_S))
                delay = min(delay * 2, RETRY_CAP_S)
            except (BatcherClosed, asyncio.CancelledError):
                raise
            except Exception:
                _log.exception("a batch request failed")
                return Answer(500, _error(500, "server_error", "internal_error",
                                          "internal server error", None))


def _error(status: int, kind: str, code: str, message: str, param: str | None
           ) -> dict[str, Any]:
    """An error body in the OpenAI shape, as the route answers it."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}

