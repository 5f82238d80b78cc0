"""``embed serve`` with real clients against a real uvicorn server serving the int8 model.

One server for the module, on 127.0.0.1 and a free port, with an API key, CORS for one origin
and small limits. Vectors are compared with ``Embedder.embed`` of the same texts: the int8 model
is batch-invariant and the server shapes vectors exactly as the Embedder does, so they agree to
1e-6 whatever the batcher grouped them with.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")
openai = pytest.importorskip("openai")
huggingface_hub = pytest.importorskip("huggingface_hub")
httpx = pytest.importorskip("httpx2")

from edgembed.embedder import Embedder  # noqa: E402
from edgembed.serve.app import DEADLINE_HEADER, PRIORITY_HEADER, create_app  # noqa: E402
from edgembed.serve.model import ServedModel  # noqa: E402
from edgembed.serve.server import BackgroundServer  # noqa: E402
from edgembed.serve.settings import ServeSettings  # noqa: E402

KEY = "test-key-0123456789"
ORIGIN = "http://app.example"
ALIAS = "text-embedding-edgembed"
MAX_INPUTS = 32
MAX_CHARS = 4000
MAX_BODY = 128 * 1024
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "edgembed runs the same model in Python, the browser and at the edge.",
    "Quantized int8 encoders keep batch invariance.",
    "",
    "Ünïcödé, emoji 🙂 and CJK 漢字 are tokenized like everything else.",
    "A much longer text. " * 80,  # past the model's 256 tokens: truncated
]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.load("all-minilm-l6-v2", variant="int8", backend="onnx")


@pytest.fixture(scope="module")
def server(embedder: Embedder) -> Iterator[BackgroundServer]:
    settings = ServeSettings(
        api_keys=(KEY,), cors_origins=(ORIGIN,), served_model_names=(ALIAS,),
        max_inputs=MAX_INPUTS, max_input_chars=MAX_CHARS, max_body_bytes=MAX_BODY,
        latency_target_ms=1000,  # these tests are about answers; test_serve_load about time
    )
    app = create_app(ServedModel.from_embedder(embedder), settings)
    with BackgroundServer(app, settings) as s:
        yield s
    huggingface_hub.close_session()  # its module-wide HTTP client holds a connection to us


@pytest.fixture()
def http(server: BackgroundServer) -> Iterator[Any]:
    with httpx.Client(base_url=server.url, timeout=30,
                      headers={"Authorization": f"Bearer {KEY}"}) as client:
        yield client


@pytest.fixture()
def client(server: BackgroundServer) -> Iterator[Any]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0) as c:
        yield c


def server_state(server: BackgroundServer) -> Any:
    return server.app.state.edgembed


def assert_close(got: Any, want: Any) -> None:
    got, want = np.asarray(got, dtype=np.float32), np.asarray(want, dtype=np.float32)
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-6


# ---------------------------------------- OpenAI client ----------------------------------------


def test_openai_float(client: Any, embedder: Embedder) -> None:
    r = client.embeddings.create(model="all-minilm-l6-v2", input=TEXTS, encoding_format="float")
    assert r.model == "all-minilm-l6-v2"
    assert [d.index for d in r.data] == list(range(len(TEXTS)))
    assert_close([d.embedding for d in r.data], embedder.embed(TEXTS))
    tokens = sum(embedder.count_tokens(TEXTS))
    assert r.usage.prompt_tokens == r.usage.total_tokens == tokens
    assert embedder.count_tokens([TEXTS[-1]]) == [embedder.max_length]  # counted truncated


def test_openai_base64(client: Any, embedder: Embedder) -> None:
    r = client.embeddings.create(model=ALIAS, input=TEXTS[:3], encoding_format="base64")
    assert all(isinstance(d.embedding, str) for d in r.data)
    got = [np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in r.data]
    assert_close(got, embedder.embed(TEXTS[:3]))


def test_openai_default_encoding_is_decoded(client: Any, embedder: Embedder) -> None:
    # Without encoding_format the client asks for base64 and decodes it itself.
    r = client.embeddings.create(model="all-minilm-l6-v2", input="a single string")
    assert len(r.data) == 1
    assert_close([r.data[0].embedding], embedder.embed(["a single string"]))


def test_openai_dimensions(client: Any, embedder: Embedder) -> None:
    r = client.embeddings.create(model="all-minilm-l6-v2", input=TEXTS[:2], dimensions=64,
                                 encoding_format="float")
    assert_close([d.embedding for d in r.data], embedder.embed(TEXTS[:2], dimensions=64))
    assert np.allclose(np.linalg.norm([d.embedding for d in r.data], axis=1), 1.0, atol=1e-6)


def test_openai_any_model_name_gets_the_served_model(client: Any, embedder: Embedder) -> None:
    # like TEI: a single-model server serves whatever 'model' a client sends (clients send
    # their own defaults, such as text-embedding-ada-002); --strict-model-name: 404
    r = client.embeddings.create(model="text-embedding-3-small", input="x",
                                 encoding_format="float")
    assert r.model == "all-minilm-l6-v2"
    assert_close([r.data[0].embedding], embedder.embed(["x"]))


def test_openai_errors_are_raised_with_their_status(client: Any) -> None:
    with pytest.raises(openai.UnprocessableEntityError):
        client.embeddings.create(model="all-minilm-l6-v2", input="x", dimensions=385)
    with (openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0) as bad,
          pytest.raises(openai.AuthenticationError)):
        bad.embeddings.create(model="all-minilm-l6-v2", input="x")


def test_concurrent_requests_share_batches_and_keep_vectors(
    server: BackgroundServer, embedder: Embedder
) -> None:
    texts = [f"request number {i}: {TEXTS[i % 3]}" for i in range(24)]
    want = embedder.embed(texts)
    batcher = server_state(server).batcher
    before = batcher.stats()
    got: dict[int, Any] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            with httpx.Client(base_url=server.url, timeout=30,
                              headers={"Authorization": f"Bearer {KEY}"}) as c:
                r = c.post("/embed", json={"inputs": texts[i]})
                r.raise_for_status()
                got[i] = r.json()[0]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert_close([got[i] for i in range(len(texts))], want)
    after = batcher.stats()
    # Requests were grouped: fewer batches than requests, and the vectors did not change.
    assert after.batches - before.batches < after.submitted - before.submitted


# ----------------------------------- Hugging Face InferenceClient ------------------------------


def test_hf_feature_extraction(server: BackgroundServer, embedder: Embedder) -> None:
    hf = huggingface_hub.InferenceClient(model=f"{server.url}/embed", token=KEY, timeout=30)
    try:
        vec = hf.feature_extraction(TEXTS[1])
        assert vec.dtype == np.float32 and vec.shape == (1, embedder.dim)
        assert_close(vec, embedder.embed([TEXTS[1]]))
        raw = hf.feature_extraction(TEXTS[0], normalize=False)
        assert_close(raw, embedder.embed([TEXTS[0]], normalize=False))
    finally:
        hf.close()


def test_hf_root_route(server: BackgroundServer, embedder: Embedder) -> None:
    # InferenceClient given the server's URL posts to "/", as it does to a TEI server.
    hf = huggingface_hub.InferenceClient(model=server.url, token=KEY, timeout=30)
    try:
        assert_close(hf.feature_extraction(TEXTS[4]), embedder.embed([TEXTS[4]]))
    finally:
        hf.close()


def test_hf_errors(server: BackgroundServer) -> None:
    hf = huggingface_hub.InferenceClient(model=f"{server.url}/embed", token="nope", timeout=30)
    try:
        with pytest.raises(huggingface_hub.errors.HfHubHTTPError) as info:
            hf.feature_extraction("x")
        assert info.value.response.status_code == 401
    finally:
        hf.close()


# --------------------------------------------- TEI ---------------------------------------------


def test_tei_embed_options(http: Any, embedder: Embedder) -> None:
    r = http.post("/embed", json={"inputs": TEXTS[:3], "normalize": False, "dimensions": 32})
    assert r.status_code == 200
    assert_close(r.json(), embedder.embed(TEXTS[:3], normalize=False, dimensions=32))
    r = http.post("/embed", json={"inputs": TEXTS[1], "prompt_name": "query"})
    assert r.status_code == 200
    assert_close(r.json(), embedder.embed_query([TEXTS[1]]))


def test_tei_truncate_false_is_413(http: Any) -> None:
    r = http.post("/embed", json={"inputs": ["short", TEXTS[-1]], "truncate": False})
    assert r.status_code == 413
    body = r.json()
    assert body["error_type"] == "validation"
    assert "texts[1]" in body["error"] and "max length 256" in body["error"]
    assert http.post("/embed", json={"inputs": TEXTS[-1], "truncate": True}).status_code == 200


# ------------------------------------------ error shapes ---------------------------------------


def openai_error(r: Any, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["message"]
    return dict(err)


def tei_error(r: Any, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == kind
    return str(body["error"])


def test_limits_answer_413_naming_the_limit(http: Any) -> None:
    err = openai_error(http.post("/v1/embeddings", json={"input": ["x"] * (MAX_INPUTS + 1)}),
                       413, "limit_exceeded")
    assert f"limit of {MAX_INPUTS}" in err["message"] and "--max-inputs" in err["message"]
    assert err["param"] == "input"
    err = openai_error(http.post("/v1/embeddings", json={"input": ["ok", "y" * (MAX_CHARS + 1)]}),
                       413, "limit_exceeded")
    assert "'input[1]'" in err["message"] and f"limit of {MAX_CHARS}" in err["message"]
    msg = tei_error(http.post("/embed", json={"inputs": ["x"] * (MAX_INPUTS + 1)}), 413,
                    "validation")
    assert "'inputs'" in msg and "--max-inputs" in msg


def test_body_limit_declared_and_chunked(http: Any) -> None:
    big = json.dumps({"input": ["z" * 1000] * 200}).encode()
    assert len(big) > MAX_BODY
    err = openai_error(http.post("/v1/embeddings", content=big,
                                 headers={"content-type": "application/json"}),
                       413, "limit_exceeded")
    assert f"limit of {MAX_BODY} bytes" in err["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server counts as it reads
        for i in range(0, len(big), 8192):
            yield big[i:i + 8192]

    r = http.post("/v1/embeddings", content=chunks(), headers={"content-type": "application/json"})
    err = openai_error(r, 413, "limit_exceeded")
    assert "--max-body-bytes" in err["message"]


def test_invalid_json_is_400_and_schema_errors_are_422(http: Any) -> None:
    hdr = {"content-type": "application/json"}
    openai_error(http.post("/v1/embeddings", content=b'{"input": [', headers=hdr), 400,
                 "invalid_json")
    tei_error(http.post("/embed", content=b"{nope", headers=hdr), 400, "validation")
    err = openai_error(http.post("/v1/embeddings", json={"input": [1, 2, 3]}), 422,
                       "invalid_request")
    assert err["param"].startswith("input")
    err = openai_error(http.post("/v1/embeddings", json={"model": "all-minilm-l6-v2"}), 422,
                       "invalid_request")
    assert "input" in err["message"]
    tei_error(http.post("/embed", json={"inputs": "x", "normalize": "yes"}), 422, "validation")
    tei_error(http.post("/embed", json={"inputs": []}), 400, "empty")  # as TEI answers it
    err = openai_error(http.post("/v1/embeddings", json={"input": "x", "dimensions": 0}), 422,
                       "invalid_request")
    openai_error(http.post("/v1/embeddings", json={"input": "x", "dimensions": 1000}), 422,
                 "invalid_input")
    tei_error(http.post("/embed", json={"inputs": "x", "prompt_name": "nope"}), 422, "validation")


def test_body_must_be_declared_json(http: Any) -> None:
    # Never parsed without the header: browsers send text/plain cross-site without preflight.
    r = http.post("/v1/embeddings", content=b'{"input": "x"}',
                  headers={"content-type": "text/plain"})
    openai_error(r, 415, "unsupported_media_type")


def test_unknown_route_and_method(http: Any) -> None:
    openai_error(http.get("/v1/nothing"), 404, "not_found")
    r = http.get("/v1/embeddings")
    openai_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "POST"


# ---------------------------------------------- auth -------------------------------------------


@pytest.mark.parametrize("authorization", [
    None, "Bearer", "Bearer wrong-key", f"Basic {KEY}", f"Bearer {KEY}x", f"Bearer {KEY[:-1]}",
    f"{KEY}",
])
def test_401_without_a_valid_key(server: BackgroundServer, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    with httpx.Client(base_url=server.url, timeout=10, headers=headers) as c:
        r = c.post("/v1/embeddings", json={"input": "x"})
        err = openai_error(r, 401, "invalid_api_key")
        # The same answer whatever was wrong: nothing says which part failed.
        assert err["message"] == ("missing or invalid API key: send it as "
                                  "'Authorization: Bearer <key>'")
        assert r.headers["www-authenticate"].startswith("Bearer")
        tei_error(c.post("/embed", json={"inputs": "x"}), 401, "unauthorized")
        assert c.get("/metrics").status_code == 401
        assert c.get("/v1/models").status_code == 401
        # Probes and the API description stay public.
        assert c.get("/health").json() == {"status": "ok"}
        assert c.get("/ready").json() == {"status": "ready", "model": "all-minilm-l6-v2"}
        assert c.get("/openapi.json").status_code == 200


def test_scheme_is_case_insensitive(server: BackgroundServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as c:
        r = c.post("/embed", json={"inputs": "x"}, headers={"Authorization": f"bearer {KEY}"})
        assert r.status_code == 200


# ------------------------------------- probes, models, metrics ---------------------------------


def test_models(http: Any) -> None:
    body = http.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["all-minilm-l6-v2", ALIAS]
    assert http.get(f"/v1/models/{ALIAS}").json()["id"] == ALIAS
    openai_error(http.get("/v1/models/other"), 404, "model_not_found")


def test_metrics(http: Any) -> None:
    http.post("/embed", json={"inputs": ["warm", "up"]}).raise_for_status()
    r = http.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    for name in (
        'edgembed_server_info{model="all-minilm-l6-v2",variant="int8",backend="onnx",dim="384"} 1',
        "edgembed_batcher_queue_depth ",
        'edgembed_batcher_batch_size_bucket{le="+Inf"}',
        'edgembed_batcher_batch_tokens_bucket{le="+Inf"}',
        'edgembed_batcher_latency_seconds_bucket{le="+Inf"}',
        "edgembed_batcher_slo_attainment_ratio ",
        'edgembed_batcher_requests_total{outcome="overloaded"}',
        'edgembed_http_rejections_total{reason="unauthorized"}',
        'edgembed_http_rejections_total{reason="too_large"}',
        'edgembed_http_requests_total{route="/embed",method="POST",status="200"}',
        'edgembed_http_request_duration_seconds_bucket{route="/embed",le="+Inf"}',
        "edgembed_server_tokens_total ",
    ):
        assert name in text, name
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert float(samples["edgembed_server_texts_total"]) >= 2
    assert float(samples['edgembed_batcher_requests_total{outcome="ok"}']) >= 1


def test_priority_and_deadline_headers(http: Any, embedder: Embedder) -> None:
    r = http.post("/embed", json={"inputs": "bulk text"},
                  headers={PRIORITY_HEADER: "bulk", DEADLINE_HEADER: "60000"})
    assert r.status_code == 200
    assert_close(r.json(), embedder.embed(["bulk text"]))
    err = openai_error(http.post("/v1/embeddings", json={"input": "x"},
                                 headers={PRIORITY_HEADER: "urgent"}), 422, "invalid_request")
    assert err["param"] == PRIORITY_HEADER
    openai_error(http.post("/v1/embeddings", json={"input": "x"},
                           headers={DEADLINE_HEADER: "-5"}), 422, "invalid_request")
    # Too short to be met: refused at once, never computed.
    openai_error(http.post("/v1/embeddings", json={"input": ["long text " * 100] * 32},
                           headers={DEADLINE_HEADER: "0.01"}), 504, "deadline_exceeded")


def test_cors(server: BackgroundServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as c:
        pre = c.options("/v1/embeddings", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type"})
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == ORIGIN
        r = c.post("/embed", json={"inputs": "x"},
                   headers={"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"})
        assert r.headers["access-control-allow-origin"] == ORIGIN
        other = c.options("/v1/embeddings", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in other.headers


def test_openapi_document(http: Any) -> None:
    doc = http.get("/openapi.json").json()
    for path in ("/v1/embeddings", "/embed", "/", "/v1/models", "/health", "/ready", "/metrics"):
        assert path in doc["paths"], path
    req = doc["components"]["schemas"]["EmbeddingRequest"]["properties"]["input"]["anyOf"]
    assert {"type": "string", "maxLength": MAX_CHARS} in req
    assert any(o.get("maxItems") == MAX_INPUTS for o in req)
    post = doc["paths"]["/v1/embeddings"]["post"]
    assert post["security"] == [{"bearerAuth": []}]
    assert {"400", "401", "404", "413", "415", "422", "429", "503", "504"} <= set(post["responses"])
    names = {p["name"] for p in post["parameters"]}
    assert names == {PRIORITY_HEADER, DEADLINE_HEADER}
    assert "security" not in doc["paths"]["/health"]["get"]
