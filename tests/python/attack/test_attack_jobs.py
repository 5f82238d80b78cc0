"""Attacks 3, 4, 9 and 10 on the Batch API's jobs: bad lines, two servers, a failing disk,
a damaged database, a jobs directory that is a file, JSON nested 100,000 deep.

The Batch API runs for real (uvicorn on 127.0.0.1, the ``openai`` client, the int8 model); the
two-server and damaged-database attacks start ``embed serve`` itself.
"""

from __future__ import annotations

import errno
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx2")
pytest.importorskip("python_multipart", reason="needs python-multipart (the serve extra)")

from edgembed.embedder import Embedder  # noqa: E402
from edgembed.io.storage import append_durably  # noqa: E402
from edgembed.jobs import worker as worker_module  # noqa: E402
from edgembed.jobs.store import JobStore  # noqa: E402
from edgembed.serve.app import create_app  # noqa: E402
from edgembed.serve.jobs_routes import JobService, JobSettings, install_jobs  # noqa: E402
from edgembed.serve.model import ServedModel  # noqa: E402
from edgembed.serve.server import BackgroundServer  # noqa: E402
from edgembed.serve.settings import ServeSettings  # noqa: E402

from .conftest import embed_cli, no_traceback  # noqa: E402

DEEP = 100_000


def line(cid: str, body: Any) -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/embeddings",
                       "body": body})


def deep_line(cid: str) -> str:
    nested = "[" * DEEP + "]" * DEEP
    return (f'{{"custom_id": "{cid}", "method": "POST", "url": "/v1/embeddings", '
            f'"body": {{"input": {nested}}}}}')


class Jobs:
    """A real server with the Batch API on a fresh jobs directory."""

    def __init__(self, embedder: Embedder, jobs_dir: Path) -> None:
        self.settings = ServeSettings(latency_target_ms=1000)
        self.app = create_app(ServedModel.from_embedder(embedder), self.settings)
        self.service: JobService = install_jobs(
            self.app, JobSettings(jobs_dir, requests_in_flight=4))
        self.server = BackgroundServer(self.app, self.settings)

    def __enter__(self) -> Jobs:
        self.server.start()
        self.client = openai.OpenAI(base_url=f"{self.server.url}/v1", api_key="x",
                                    max_retries=0, timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.stop()

    def run(self, lines: list[str]) -> Any:
        f = self.client.files.create(file=("in.jsonl", ("\n".join(lines) + "\n").encode()),
                                     purpose="batch")
        return self.client.batches.create(input_file_id=f.id, endpoint="/v1/embeddings",
                                          completion_window="24h")

    def wait(self, batch_id: str, statuses: tuple[str, ...] = ("completed", "failed"),
             timeout: float = 90) -> Any:
        end = time.monotonic() + timeout
        while True:
            batch = self.client.batches.retrieve(batch_id)
            if batch.status in statuses:
                return batch
            assert time.monotonic() < end, f"batch stuck in {batch.status}"
            time.sleep(0.05)

    def lines_of(self, file_id: str | None) -> dict[str, Any]:
        if file_id is None:
            return {}
        text = self.client.files.content(file_id).text
        return {r["custom_id"]: r for r in map(json.loads, text.splitlines())}


@pytest.fixture()
def jobs(embedder: Embedder, tmp_path: Path) -> Iterator[Jobs]:
    with Jobs(embedder, tmp_path / "jobs") as j:
        yield j


def test_a_bad_line_fails_alone(jobs: Jobs, embedder: Embedder) -> None:
    texts = [f"request number {i}" for i in range(10)]
    lines = [line(f"r{i}", {"input": t}) for i, t in enumerate(texts)]
    lines.insert(3, deep_line("deep"))
    lines.insert(6, line("lone", {"input": "x \ud800 y"}))
    lines.insert(8, line("schema", {"input": 12}))
    batch = jobs.wait(jobs.run(lines).id)
    assert batch.status == "completed"
    assert batch.request_counts.total == 13
    assert (batch.request_counts.completed, batch.request_counts.failed) == (11, 2)
    out, err = jobs.lines_of(batch.output_file_id), jobs.lines_of(batch.error_file_id)
    assert set(err) == {"deep", "schema"}
    assert err["deep"]["response"]["status_code"] == 422
    assert "nests deeper" in err["deep"]["response"]["body"]["error"]["message"]
    expected = embedder.embed(texts)
    for i in range(10):
        got = out[f"r{i}"]["response"]["body"]["data"][0]["embedding"]
        np.testing.assert_allclose(got, expected[i], atol=1e-6)
    np.testing.assert_allclose(out["lone"]["response"]["body"]["data"][0]["embedding"],
                               embedder.embed("x \ufffd y")[0], atol=1e-6)


def test_an_unexpected_error_still_publishes_what_was_done(
        jobs: Jobs, monkeypatch: pytest.MonkeyPatch) -> None:
    store = jobs.service.store
    real_advance = store.advance
    groups = {"n": 0}

    def advance(batch_id: str, **counts: Any) -> None:
        groups["n"] += 1
        if groups["n"] == 3:  # a bug in the third group's bookkeeping
            raise RuntimeError("a bug")
        real_advance(batch_id, **counts)

    monkeypatch.setattr(store, "advance", advance)
    batch = jobs.wait(jobs.run([line(f"r{i}", {"input": f"t{i}"}) for i in range(20)]).id)
    assert batch.status == "failed"
    assert batch.errors is not None and batch.errors.data[0].code == "server_error"
    assert batch.output_file_id is not None  # the two groups committed (4 requests each)
    out = jobs.lines_of(batch.output_file_id)
    assert sorted(out) == sorted(f"r{i}" for i in range(8))
    assert batch.request_counts.completed == 8


def test_the_worker_survives_a_full_disk_and_ready_tells(
        jobs: Jobs, monkeypatch: pytest.MonkeyPatch) -> None:
    real_append = append_durably  # the worker's, from edgembed.io
    disk = {"full": True}

    def append(f: Any, lines: list[bytes]) -> int:
        if disk["full"] and lines:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_append(f, lines)

    monkeypatch.setattr(worker_module, "append_durably", append)
    batch = jobs.run([line(f"r{i}", {"input": f"text {i}"}) for i in range(6)])
    with httpx.Client(base_url=jobs.server.url, timeout=10) as http:
        end = time.monotonic() + 30
        while (ready := http.get("/ready")).status_code == 200:
            assert time.monotonic() < end, "/ready never told"
            time.sleep(0.05)
        assert ready.status_code == 503
        assert ready.json()["status"] == "degraded"
        assert "No space left on device" in ready.json()["problems"][0]
        assert jobs.client.batches.retrieve(batch.id).status == "in_progress"
        disk["full"] = False  # space again: the worker's next try goes through
        done = jobs.wait(batch.id)
        assert done.status == "completed" and done.request_counts.completed == 6
        assert len(jobs.lines_of(done.output_file_id)) == 6  # each request exactly once
        assert http.get("/ready").status_code == 200


def test_two_servers_on_one_jobs_directory(tmp_path: Path, spawn: Any) -> None:
    jobs_dir = tmp_path / "jobs"
    first = spawn(["serve", "--jobs-dir", str(jobs_dir), "--port", "0", "--backend", "onnx"])
    first.wait_line("serving")
    second = spawn(["serve", "--jobs-dir", str(jobs_dir), "--port", "0", "--backend", "onnx"])
    status, err = second.finish()
    assert status == 1
    assert "Traceback" not in err
    assert f"the jobs directory {jobs_dir} is in use by another server (pid " in err


@pytest.mark.parametrize("damage", ["garbage", "truncated", "file-not-dir"])
def test_a_damaged_store_is_one_line(tmp_path: Path, damage: str) -> None:
    jobs_dir = tmp_path / "jobs"
    if damage == "file-not-dir":
        jobs_dir.write_text("not a directory")
        needle = f"the jobs directory {jobs_dir} is a file, not a directory"
    else:
        JobStore(jobs_dir).close()
        db = jobs_dir / "jobs.sqlite3"
        if damage == "garbage":
            db.write_bytes(b"this is not an SQLite database at all" * 200)
        else:
            con = sqlite3.connect(db)
            con.execute("PRAGMA journal_mode=DELETE")
            con.execute("CREATE TABLE filler (x TEXT)")
            con.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,)] * 400)
            con.commit()
            con.close()
            data = db.read_bytes()
            db.write_bytes(data[: len(data) // 2])
        needle = f"the job database {db}"
    done = embed_cli("serve", "--jobs-dir", str(jobs_dir), "--port", "0", timeout=60)
    err = no_traceback(done)
    assert done.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    if damage != "file-not-dir":
        assert "move" in lines[0] and "away" in lines[0]


def test_embed_batch_deep_json_is_a_malformed_row(tmp_path: Path, embedder: Embedder) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "first"}\n{"text": ' + "[" * DEEP + "]" * DEEP + '}\n'
                   '{"text": "third"}\n')
    out = tmp_path / "out.npy"
    done = embed_cli("batch", str(src), "-o", str(out), "-q", "--backend", "onnx")
    no_traceback(done)
    assert done.returncode == 0
    np.testing.assert_allclose(np.load(out), embedder.embed(["first", "third"]), atol=1e-6)
    (record,) = map(json.loads, (tmp_path / "out.errors.jsonl").read_text().splitlines())
    assert record["row"] == 1 and "nests too deeply" in record["error"]
