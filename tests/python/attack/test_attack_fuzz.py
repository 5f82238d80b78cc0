"""Bounded fuzzing: the HTTP API with schemathesis, the batch-file and line readers with
hypothesis.

The server (uvicorn on 127.0.0.1, the int8 model, an API key, the Batch API on) is fuzzed with
negative data on every operation, the job routes included — every answer must be a documented
4xx, never a 5xx — and statefully, following the OpenAPI links from a created file or batch to
the operations on it. The readers get arbitrary bytes: every row is a text or a malformed row
with a message, and nothing raises.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("python_multipart")

from edgembed.embedder import Embedder  # noqa: E402
from edgembed.io.readers import RowReader  # noqa: E402
from edgembed.jobs.worker import validate_lines  # noqa: E402
from edgembed.serve.app import DEADLINE_HEADER, create_app  # noqa: E402
from edgembed.serve.jobs_routes import JobSettings, install_jobs  # noqa: E402
from edgembed.serve.model import ServedModel  # noqa: E402
from edgembed.serve.server import BackgroundServer  # noqa: E402
from edgembed.serve.settings import ServeSettings  # noqa: E402

KEY = "fuzz-key-0123456789"
CONFIG = """
[checks.not_a_server_error]
enabled = true

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "404", "405", "409", "413", "415", "422"]

[checks.positive_data_acceptance]
enabled = false
"""
FUZZ = settings(max_examples=60, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def server(embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[BackgroundServer]:
    s = ServeSettings(api_keys=(KEY,), max_inputs=16, max_input_chars=512,
                      max_body_bytes=64 * 1024, shed=False)
    app = create_app(ServedModel.from_embedder(embedder), s)
    install_jobs(app, JobSettings(tmp_path_factory.mktemp("fuzz-jobs"),
                                  max_upload_bytes=32 * 1024, max_batch_requests=50))
    with BackgroundServer(app, s) as srv:
        yield srv


def schema_of(server: BackgroundServer) -> Any:
    config = schemathesis.config.SchemathesisConfig.from_str(CONFIG)
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=config)


def long_deadline(case: Any) -> None:
    headers = case.headers or {}
    try:
        if float(headers.get(DEADLINE_HEADER, "inf")) < 10_000:
            headers[DEADLINE_HEADER] = "60000"  # a deadline too short is a 504 by design
    except ValueError:
        pass
    case.headers = headers


def test_negative_data_on_every_operation(server: BackgroundServer) -> None:
    strategy = schema_of(server).as_strategy(schemathesis.GenerationMode.NEGATIVE)

    @given(case=strategy)
    @FUZZ
    def check(case: Any) -> None:
        long_deadline(case)
        response = case.call(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"},
                             timeout=30)
        assert response.status_code < 500, (case.method, case.path, response.text[:300])

    check()


def test_stateful_links(server: BackgroundServer) -> None:
    machine = schema_of(server).as_state_machine()
    url = server.url

    class Fuzz(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            long_deadline(case)
            return {"base_url": url, "headers": {"Authorization": f"Bearer {KEY}"},
                    "timeout": 30}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            assert response.status_code < 500, (case.method, case.path, response.text[:300])

    Fuzz.run(settings=settings(max_examples=15, stateful_step_count=6, deadline=None,
                               database=None, suppress_health_check=list(HealthCheck)))


# --- readers -----------------------------------------------------------------------------------

lines = st.lists(st.one_of(
    st.binary(max_size=60),
    st.text(max_size=40).map(lambda t: json.dumps({"text": t}).encode()),
    st.sampled_from([b'{"text": "\\ud800"}', b'{"text": 1}', b"[" * 3000, b'"bare"', b"{",
                     b"\xff\xfe", b'{"text": null}', b"\xef\xbb\xbf{}", b"\r", b""]),
), max_size=12)


@given(rows=lines, errors=st.sampled_from(["strict", "replace"]))
@FUZZ
def test_jsonl_and_txt_readers(tmp_path_factory: pytest.TempPathFactory, rows: list[bytes],
                               errors: str) -> None:
    path = tmp_path_factory.mktemp("r") / "in.jsonl"
    path.write_bytes(b"\n".join(rows) + b"\n")
    for fmt in ("jsonl", "txt"):
        with RowReader(str(path), fmt, encoding_errors=errors) as reader:
            for row in reader.rows():
                assert (row.text is None) != (row.error is None)
                assert row.text is None or isinstance(row.text, str)


@given(cells=st.lists(st.lists(st.text(max_size=10), min_size=1, max_size=3), max_size=8),
       raw=st.binary(max_size=40))
@FUZZ
def test_csv_reader(tmp_path_factory: pytest.TempPathFactory, cells: list[list[str]],
                    raw: bytes) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["text", "id"])
    writer.writerows(cells)
    path = tmp_path_factory.mktemp("c") / "in.csv"
    path.write_bytes(buf.getvalue().encode("utf-8", "surrogatepass") + raw)
    with RowReader(str(path), "csv", id_column="id") as reader:
        for row in reader.rows():
            assert (row.text is None) != (row.error is None)


@given(rows=lines)
@FUZZ
def test_batch_file_validation(tmp_path_factory: pytest.TempPathFactory,
                               rows: list[bytes]) -> None:
    path: Path = tmp_path_factory.mktemp("b") / "batch.jsonl"
    data = b"\n".join(rows) + b"\n"
    path.write_bytes(data)
    total, problems = validate_lines(path, "/v1/embeddings", 50)
    assert total == sum(1 for line in data.split(b"\n") if line.strip())
    for p in problems:
        assert p["message"] and (p["line"] is None or 1 <= p["line"] <= data.count(b"\n"))
