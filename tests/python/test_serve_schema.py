"""The OpenAPI document against the running server, with schemathesis.

Generated requests (valid and invalid, bounded in number) go to a real uvicorn server on
127.0.0.1 serving the int8 model with an API key; every response must be documented, match its
schema, and none may be a 5xx. Well-formed requests may still meet limits the schema cannot
state (tokens per text with truncation off): 413 is accepted for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402

from edgembed.embedder import Embedder  # noqa: E402
from edgembed.serve.app import DEADLINE_HEADER, create_app  # noqa: E402
from edgembed.serve.model import ServedModel  # noqa: E402
from edgembed.serve.server import BackgroundServer  # noqa: E402
from edgembed.serve.settings import ServeSettings  # noqa: E402

KEY = "schema-test-key"
EXAMPLES = 100  # per generation mode, over all operations
CONFIG = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "404", "413", "429"]

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "404", "405", "413", "415", "422"]
"""


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    embedder = Embedder.load("all-minilm-l6-v2", variant="int8", backend="onnx")
    settings = ServeSettings(api_keys=(KEY,), max_inputs=16, max_input_chars=512,
                             max_body_bytes=64 * 1024, shed=False)
    with BackgroundServer(create_app(ServedModel.from_embedder(embedder), settings)) as s:
        yield s


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_openapi_conformance(server: BackgroundServer, mode: str) -> None:
    config = schemathesis.config.SchemathesisConfig.from_str(CONFIG)
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=config)
    strategy = schema.as_strategy(schemathesis.GenerationMode(mode))
    auth = {"Authorization": f"Bearer {KEY}"}

    @given(case=strategy)
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case: Any) -> None:
        headers = case.headers or {}
        try:
            if float(headers.get(DEADLINE_HEADER, "inf")) < 10_000:
                # A deadline too short to meet is answered 504 by design (docs/server.md);
                # generated ones are made long enough to exercise everything else.
                headers[DEADLINE_HEADER] = "60000"
        except ValueError:
            pass
        case.call_and_validate(base_url=server.url, headers=auth, timeout=30)

    check()
