"""The job store and the batch worker on their own: no model, no HTTP, a fake request handler."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgembed.errors import JobConflict, Overloaded
from edgembed.jobs.store import JobStore
from edgembed.jobs.worker import Answer, JobWorker, validate_lines


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[JobStore]:
    opened = JobStore(tmp_path)
    yield opened
    opened.close()


def line(cid: str, text: str) -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/embeddings",
                       "body": {"input": text}})


def upload(store: JobStore, owner: str, lines: list[str]) -> str:
    staged = store.upload_path()
    staged.write_text("\n".join(lines) + "\n")
    return store.add_file(owner, "batch", "in.jsonl", staged).id


class Echo:
    """Answers each body with its text; refuses the first ``overloaded`` calls as a full
    bulk lane would; counts calls per text."""

    def __init__(self, overloaded: int = 0) -> None:
        self.overloaded = overloaded
        self.calls: dict[str, int] = {}

    async def __call__(self, body: dict[str, Any]) -> Answer:
        if self.overloaded:
            self.overloaded -= 1
            raise Overloaded("full", retry_after=0.001)
        text = body["input"]
        self.calls[text] = self.calls.get(text, 0) + 1
        if text == "bad":
            return Answer(422, {"error": {"message": "bad"}})
        return Answer(200, {"echo": text}, tokens=len(text))


async def run_until_final(store: JobStore, worker: JobWorker, batch_id: str) -> None:
    worker.start()
    try:
        for _ in range(2000):
            if store.status(batch_id) in ("completed", "failed", "cancelled", "expired"):
                return
            await asyncio.sleep(0.005)
        raise AssertionError("the batch did not finish")
    finally:
        await worker.stop()


def outputs(store: JobStore, owner: str, batch_id: str) -> tuple[list[Any], list[Any]]:
    batch = store.get_batch(owner, batch_id)
    assert batch is not None
    read = []
    for file_id in (batch.output_file_id, batch.error_file_id):
        record = store.get_file(owner, file_id) if file_id else None
        text = store.file_path(record).read_text() if record else ""
        read.append([json.loads(x) for x in text.splitlines()])
    return read[0], read[1]


def test_worker_retries_overload_and_splits_outputs(store: JobStore) -> None:
    texts = [f"t{i}" for i in range(10)] + ["bad"]
    file_id = upload(store, "o", [line(f"c{i}", t) for i, t in enumerate(texts)])
    batch = store.create_batch("o", file_id, "/v1/embeddings", "24h", "m", None)
    echo = Echo(overloaded=3)
    asyncio.run(run_until_final(store, JobWorker(store, echo, group=4), batch.id))
    done = store.get_batch("o", batch.id)
    assert done is not None and done.status == "completed"
    assert (done.total, done.completed, done.failed) == (11, 10, 1)
    assert done.tokens == sum(len(t) for t in texts[:10])
    out, err = outputs(store, "o", batch.id)
    assert [x["custom_id"] for x in out] == [f"c{i}" for i in range(10)]
    assert out[3]["response"] == {"status_code": 200, "request_id": f"req_{batch.id[6:]}_3",
                                  "body": {"echo": "t3"}}
    assert [(x["custom_id"], x["response"]["status_code"]) for x in err] == [("c10", 422)]
    assert set(echo.calls.values()) == {1}


def test_lines_written_after_the_last_commit_are_cut_on_resume(store: JobStore) -> None:
    file_id = upload(store, "o", [line(f"c{i}", f"t{i}") for i in range(6)])
    batch = store.create_batch("o", file_id, "/v1/embeddings", "24h", "m", None)
    store.start(batch.id, 6)
    # A crash after two committed requests, with a third answered but not committed.
    first = b"".join(json.dumps({"custom_id": f"c{i}"}).encode() + b"\n" for i in range(2))
    folder = store.batch_dir(batch.id)
    (folder / "output.jsonl").write_bytes(first + b'{"custom_id": "c2", "respo')
    store.advance(batch.id, next_line=2, output_bytes=len(first), error_bytes=0, completed=2,
                  failed=0, tokens=0)
    echo = Echo()
    asyncio.run(run_until_final(store, JobWorker(store, echo, group=3), batch.id))
    out, _ = outputs(store, "o", batch.id)
    assert [x["custom_id"] for x in out] == [f"c{i}" for i in range(6)]
    assert sorted(echo.calls) == ["t2", "t3", "t4", "t5"]


def test_validation_reports_lines_and_limits(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join([line("a", "x"), "[1]", line("a", "y"), "", line("b", "z")]))
    total, problems = validate_lines(path, "/v1/embeddings", max_requests=3)
    assert total == 4
    assert [(p["line"], p["code"]) for p in problems] == [
        (2, "invalid_request"), (3, "duplicate_custom_id"), (None, "too_many_requests")]


def test_store_isolates_owners_pages_and_guards_state(store: JobStore) -> None:
    ids = [upload(store, "alice", [line("x", "y")]) for _ in range(5)]
    upload(store, "bob", [line("x", "y")])
    page, more = store.list_files("alice", limit=2)
    assert [f.id for f in page] == ids[::-1][:2] and more
    page, more = store.list_files("alice", limit=10, after=page[-1].id)
    assert [f.id for f in page] == ids[::-1][2:] and not more
    assert store.get_file("bob", ids[0]) is None
    batch = store.create_batch("alice", ids[0], "/v1/embeddings", "24h", "m", {"k": "v"})
    assert store.get_batch("bob", batch.id) is None
    assert store.request_cancel("bob", batch.id) is None
    with pytest.raises(JobConflict):
        store.delete_file("alice", ids[0])  # the input of a batch that has not finished
    cancelled = store.request_cancel("alice", batch.id)
    assert cancelled is not None and cancelled.status == "cancelling"
    store.finish(store.batch(batch.id), "cancelled")
    store.finish(store.batch(batch.id), "cancelled")  # idempotent
    with pytest.raises(JobConflict):
        store.request_cancel("alice", batch.id)
    assert store.delete_file("alice", ids[0])
    store.close()  # one store per directory at a time (its lock); closing twice is harmless
    reopened = JobStore(store.root)  # durable: the next server sees the same state
    again = reopened.get_batch("alice", batch.id)
    reopened.close()
    assert again is not None and again.status == "cancelled"
    assert again.to_api()["metadata"] == {"k": "v"}


def test_batches_take_turns(store: JobStore) -> None:
    first = upload(store, "o", [line(f"a{i}", f"a{i}") for i in range(6)])
    second = upload(store, "o", [line(f"b{i}", f"b{i}") for i in range(6)])
    a = store.create_batch("o", first, "/v1/embeddings", "24h", "m", None)
    b = store.create_batch("o", second, "/v1/embeddings", "24h", "m", None)
    echo = Echo()
    worker = JobWorker(store, echo, group=2, turn_s=0.0)

    async def both() -> None:
        await run_until_final(store, worker, a.id)
        worker._stopping = False
        await run_until_final(store, worker, b.id)

    asyncio.run(both())
    order = "".join(text[0] for text in echo.calls)  # dicts keep insertion order
    assert order.startswith("aabbaabb"), order
    assert sorted(echo.calls) == sorted([f"a{i}" for i in range(6)] + [f"b{i}" for i in range(6)])
