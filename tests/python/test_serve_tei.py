"""The rest of TEI's API, the clients users point at edgembed, and the API docs pages.

One real server for the module (uvicorn on 127.0.0.1, an API key) serving the int8 model on
onnxruntime. References are independent of the route under test: token ids and offsets from
Hugging Face ``tokenizers`` loaded from the model's own tokenizer.json (and from the C engine's
tokenizer, a second implementation), vectors from ``Embedder.embed`` of the same texts, token
states from onnxruntime run directly on the exported ONNX file. The clients are the real
``huggingface_hub``, ``openai``, ``langchain-openai`` and LlamaIndex's OpenAI-like embedding.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")
openai = pytest.importorskip("openai")
huggingface_hub = pytest.importorskip("huggingface_hub")
httpx = pytest.importorskip("httpx2")

from edgembed.embedder import Embedder  # noqa: E402
from edgembed.serve.app import create_app  # noqa: E402
from edgembed.serve.model import ServedModel  # noqa: E402
from edgembed.serve.server import BackgroundServer  # noqa: E402
from edgembed.serve.settings import ServeSettings  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
KEY = "tei-test-key-42"
TEXTS = ["The quick brown fox jumps over the lazy dog.",
         "Ünïcödé, emoji 🙂 and CJK 漢字 are tokenized like everything else.",
         "a kitten sat on the mat"]
# past 256 tokens: left truncation keeps the markets, right truncation the cats
LONG = "Cats sleep on warm windowsills. " * 40 + "Stock markets fell sharply today. " * 40


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.load("all-minilm-l6-v2", variant="int8", backend="onnx")


@pytest.fixture(scope="module")
def server(embedder: Embedder) -> Iterator[BackgroundServer]:
    # answers, not timing: no shedding (the machine may be loaded)
    settings = ServeSettings(api_keys=(KEY,), latency_target_ms=1000, max_inputs=64, shed=False)
    app = create_app(ServedModel.from_embedder(embedder), settings)
    with BackgroundServer(app, settings) as s:
        yield s
    huggingface_hub.close_session()


@pytest.fixture()
def http(server: BackgroundServer) -> Iterator[Any]:
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"}) as client:
        yield client


@pytest.fixture(scope="module")
def hf_tokenizer(embedder: Embedder) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(embedder.model_dir / "source" / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def assert_close(got: Any, want: Any, tol: float = 1e-6) -> None:
    got, want = np.asarray(got, dtype=np.float32), np.asarray(want, dtype=np.float32)
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= tol


def byte_offsets(text: str, start: int, end: int) -> tuple[int, int]:
    return len(text[:start].encode()), len(text[:end].encode())


# ----------------------------------------------- /info -----------------------------------------


def test_info_has_tei_shape(http: Any) -> None:
    r = http.get("/info")
    assert r.status_code == 200
    info = r.json()
    assert info["model_id"] == info["served_model_name"] == "all-minilm-l6-v2"
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["model_dtype"] == "int8"
    assert info["max_input_length"] == 256
    assert info["max_client_batch_size"] == 64 and info["auto_truncate"] is True
    assert info["max_batch_tokens"] == 2048 and info["max_concurrent_requests"] == 1024
    assert set(info) >= {"model_sha", "max_batch_requests", "tokenization_workers", "version",
                         "sha", "docker_label"}


# --------------------------------------------- /tokenize ---------------------------------------


def test_tokenize_gives_tokenizers_ids_and_byte_offsets(http: Any, hf_tokenizer: Any) -> None:
    r = http.post("/tokenize", json={"inputs": TEXTS})
    assert r.status_code == 200, r.text
    got = r.json()
    assert len(got) == len(TEXTS)
    for text, tokens in zip(TEXTS, got, strict=True):
        enc = hf_tokenizer.encode(text)
        assert [t["id"] for t in tokens] == enc.ids
        for t, tok, (s, e), special in zip(tokens, enc.tokens, enc.offsets,
                                           enc.special_tokens_mask, strict=True):
            assert t["special"] is bool(special)
            if special:
                assert (t["text"], t["start"], t["stop"]) == (tok, None, None)
            else:  # TEI's offsets are UTF-8 bytes; text is what they cover
                assert (t["start"], t["stop"]) == byte_offsets(text, s, e)
                assert t["text"] == text.encode()[t["start"]:t["stop"]].decode()
    # the non-ASCII text: byte offsets differ from character offsets
    assert any(len(t["text"]) != t["stop"] - t["start"] for t in got[1] if not t["special"])


def test_tokenize_offsets_agree_with_the_c_engine(http: Any, native_library: Path,
                                                  bundle: Path) -> None:
    from edgembed.backends.native import NativeBackend

    engine = NativeBackend(bundle)
    got = http.post("/tokenize", json={"inputs": TEXTS}).json()
    for text, tokens, spans in zip(TEXTS, got, engine.tokenize_offsets(TEXTS), strict=True):
        assert [t["id"] for t in tokens] == [i for i, _, _ in spans]
        for t, (_, s, e) in zip(tokens, spans, strict=True):
            if not t["special"]:
                assert (t["start"], t["stop"]) == byte_offsets(text, s, e)


def test_tokenize_options(http: Any, hf_tokenizer: Any) -> None:
    plain = http.post("/tokenize", json={"inputs": "a b", "add_special_tokens": False}).json()
    assert [t["id"] for t in plain[0]] == hf_tokenizer.encode("a b",
                                                             add_special_tokens=False).ids
    # not truncated: all of a long text's tokens
    long = http.post("/tokenize", json={"inputs": LONG}).json()[0]
    assert len(long) == len(hf_tokenizer.encode(LONG).ids) > 256
    assert http.post("/tokenize", json={"inputs": "x", "prompt_name": "query"}).status_code == 200
    bad = http.post("/tokenize", json={"inputs": "x", "prompt_name": "nope"})
    assert bad.status_code == 422 and "nope" in bad.json()["error"]
    empty = http.post("/tokenize", json={"inputs": []})
    assert empty.status_code == 400 and empty.json()["error_type"] == "empty"


# ---------------------------------------------- /decode ----------------------------------------


def test_decode(http: Any, hf_tokenizer: Any) -> None:
    ids = [hf_tokenizer.encode(t).ids for t in TEXTS]
    r = http.post("/decode", json={"ids": ids})
    assert r.status_code == 200
    assert r.json() == [hf_tokenizer.decode(i, skip_special_tokens=True) for i in ids]
    one = http.post("/decode", json={"ids": ids[0], "skip_special_tokens": False}).json()
    assert one == [hf_tokenizer.decode(ids[0], skip_special_tokens=False)]
    assert one[0].startswith("[CLS] the quick brown fox")
    for body, status in (({"ids": []}, 400), ({"ids": [[1], []]}, 400),
                         ({"ids": [10**6]}, 422), ({"ids": [-1]}, 422)):
        assert http.post("/decode", json=body).status_code == status, body


# -------------------------------------- /similarity and POST / ---------------------------------


def cosine(a: Any, b: Any) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_similarity(http: Any, embedder: Embedder) -> None:
    body = {"inputs": {"source_sentence": "a cat sat", "sentences": TEXTS}}
    r = http.post("/similarity", json=body)
    assert r.status_code == 200
    v = embedder.embed(["a cat sat", *TEXTS])
    assert np.allclose(r.json(), [cosine(v[0], x) for x in v[1:]], atol=1e-6)
    assert http.post("/", json=body).json() == r.json()  # POST / takes a similarity body too
    r = http.post("/similarity", json={"inputs": {"source_sentence": "x", "sentences": []}})
    assert r.status_code == 400 and r.json()["error_type"] == "empty"


def test_hf_sentence_similarity_on_the_root_url(server: BackgroundServer,
                                                embedder: Embedder) -> None:
    hf = huggingface_hub.InferenceClient(model=server.url, token=KEY, timeout=60)
    try:
        scores = hf.sentence_similarity("a cat sat on the mat", other_sentences=TEXTS)
        v = embedder.embed(["a cat sat on the mat", *TEXTS])
        assert np.allclose(scores, [cosine(v[0], x) for x in v[1:]], atol=1e-6)
        assert scores[2] > scores[0]  # the kitten is closer than the fox
        # and feature extraction on the same root URL still embeds
        assert_close(hf.feature_extraction(TEXTS[0]), embedder.embed([TEXTS[0]]))
    finally:
        hf.close()


# ------------------------------------- truncation and prompts ----------------------------------


def test_left_truncation_keeps_the_end(http: Any, embedder: Embedder, hf_tokenizer: Any) -> None:
    left = http.post("/embed", json={"inputs": [LONG], "truncation_direction": "Left"})
    right = http.post("/embed", json={"inputs": [LONG], "truncation_direction": "right"})
    assert left.status_code == right.status_code == 200
    assert_close(left.json(), embedder.embed([LONG], truncation_direction="left"))
    assert_close(right.json(), embedder.embed([LONG]))
    assert cosine(left.json()[0], right.json()[0]) < 0.5  # different tokens were kept
    # the ids the Embedder keeps are tokenizers' own left truncation
    hf_tokenizer.enable_truncation(256, direction="left")
    try:
        assert embedder.tokenize([LONG], truncation_direction="left") == [
            hf_tokenizer.encode(LONG).ids]
    finally:
        hf_tokenizer.no_truncation()
    bad = http.post("/embed", json={"inputs": "x", "truncation_direction": "middle"})
    assert bad.status_code == 422


def test_prompt_name_routes(http: Any, embedder: Embedder) -> None:
    for path in ("/embed", "/embed_all"):
        r = http.post(path, json={"inputs": "x", "prompt_name": "document"})
        assert r.status_code == 200, (path, r.text)
        r = http.post(path, json={"inputs": "x", "prompt_name": "nothing"})
        assert r.status_code == 422 and "nothing" in r.json()["error"]
    r = http.post("/similarity", json={"inputs": {"source_sentence": "a", "sentences": ["b"]},
                                       "parameters": {"prompt_name": "query"}})
    assert r.status_code == 200


def test_prompt_and_left_truncation_through_the_batcher_keep_each_requests_options(
    server: BackgroundServer, embedder: Embedder
) -> None:
    """Requests with different options grouped into one batch each get their own vectors."""
    import threading

    bodies: list[dict[str, Any]] = [{"inputs": [LONG, TEXTS[i % 3]], "truncation_direction": d}
                                     for i, d in enumerate(["left", "right"] * 6)]
    got: dict[int, Any] = {}

    def one(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=60,
                          headers={"Authorization": f"Bearer {KEY}"}) as c:
            got[i] = c.post("/embed", json=bodies[i]).json()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i, body in enumerate(bodies):
        assert_close(got[i], embedder.embed(body["inputs"],
                                            truncation_direction=body["truncation_direction"]))


# --------------------------------------------- /embed_all --------------------------------------


def test_embed_all_gives_onnx_token_states(http: Any, embedder: Embedder,
                                           hf_tokenizer: Any) -> None:
    import onnxruntime as ort

    r = http.post("/embed_all", json={"inputs": TEXTS[:2]})
    assert r.status_code == 200, r.text
    got = r.json()
    path = embedder.manifest.variant_path(embedder.model_dir, "int8")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for text, states in zip(TEXTS[:2], got, strict=True):
        ids = np.array([hf_tokenizer.encode(text).ids], dtype=np.int64)
        (want,) = session.run(["token_embeddings"],
                              {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        assert np.asarray(states).shape == (ids.shape[1], 384)
        assert_close(states, want[0], tol=1e-5)
        # mean pooling of the states is the model's (unnormalized) sentence vector
        assert_close(np.mean(states, axis=0), embedder.embed([text], normalize=False)[0],
                     tol=1e-5)
    long = http.post("/embed_all", json={"inputs": LONG}).json()
    assert len(long[0]) == 256
    too_long = http.post("/embed_all", json={"inputs": LONG, "truncate": False})
    assert too_long.status_code == 413


# ------------------------------------------ model names ----------------------------------------


def test_strict_model_name_restores_404(embedder: Embedder) -> None:
    settings = ServeSettings(strict_model_name=True, served_model_names=("alias",))
    app = create_app(ServedModel.from_embedder(embedder), settings)
    with BackgroundServer(app, settings) as s, openai.OpenAI(
            base_url=f"{s.url}/v1", api_key="x", max_retries=0) as client:
        with pytest.raises(openai.NotFoundError) as e404:
            client.embeddings.create(model="text-embedding-3-small", input="x")
        assert e404.value.body["code"] == "model_not_found"
        assert len(client.embeddings.create(model="alias", input="x").data) == 1


def test_token_ids_are_refused_with_what_langchain_needs(server: BackgroundServer) -> None:
    # LangChain's OpenAIEmbeddings sends tiktoken ids unless check_embedding_ctx_length=False;
    # this is the request it sends (tiktoken itself downloads its tables, so it is not used).
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0) as client:
        for ids in ([[9906, 1917]], [9906, 1917]):
            with pytest.raises(openai.UnprocessableEntityError) as err:
                client.embeddings.create(model="text-embedding-ada-002", input=ids)
            message = err.value.body["message"]
            assert "check_embedding_ctx_length=False" in message and "token ids" in message


# --------------------------------------------- clients -----------------------------------------


def test_langchain_openai_embeddings(server: BackgroundServer, embedder: Embedder) -> None:
    lc = pytest.importorskip("langchain_openai")
    import asyncio

    emb = lc.OpenAIEmbeddings(model="text-embedding-3-small", base_url=f"{server.url}/v1",
                              api_key=KEY, check_embedding_ctx_length=False, max_retries=0)
    assert_close(emb.embed_documents(TEXTS), embedder.embed(TEXTS))
    assert_close([emb.embed_query(TEXTS[0])], embedder.embed([TEXTS[0]]))

    async def embed_async() -> Any:
        # The async client's connections belong to this event loop: closed here, before the
        # loop ends, rather than by the client's finalizer on whatever loop runs at collection.
        try:
            return await emb.aembed_documents(TEXTS)
        finally:
            await emb.async_client._client.close()

    assert_close(asyncio.run(embed_async()), embedder.embed(TEXTS))


def test_llama_index_openai_like_embedding(server: BackgroundServer,
                                           embedder: Embedder) -> None:
    mod = pytest.importorskip("llama_index.embeddings.openai_like")
    emb = mod.OpenAILikeEmbedding(model_name="all-minilm-l6-v2", api_base=f"{server.url}/v1",
                                  api_key=KEY, embed_batch_size=2, max_retries=0)
    assert_close([emb.get_text_embedding(TEXTS[0])], embedder.embed([TEXTS[0]]))
    assert_close(emb.get_text_embedding_batch(TEXTS), embedder.embed(TEXTS))
    assert_close([emb.get_query_embedding(TEXTS[1])], embedder.embed([TEXTS[1]]))


# ------------------------------------------ /docs and /redoc -----------------------------------


def test_docs_pages_load_only_local_assets(server: BackgroundServer) -> None:
    import re

    for page in ("/docs", "/redoc"):
        r = httpx.get(server.url + page, timeout=30)  # no API key needed
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        urls = re.findall(r'(?:src|href)="([^"]+)"|url: \'([^\']+)\'|spec-url="([^"]+)"', r.text)
        urls = [u for group in urls for u in group if u]
        assert urls and all(u.startswith("/") and not u.startswith("//") for u in urls), urls
        assert "http://" not in r.text and "https://" not in r.text
        for u in urls:
            asset = httpx.get(server.url + u, timeout=30)
            assert asset.status_code == 200 and len(asset.content) > 100, u
    assert httpx.get(server.url + "/docs/assets/secrets", timeout=30).status_code == 404


def test_docs_render_in_chromium_without_other_hosts(server: BackgroundServer) -> None:
    hosts = REPO / "tests" / "js" / "hosts" / "node_modules" / "playwright-core" / "index.mjs"
    chromium = Path(os.environ.get("EDGEMBED_CHROMIUM", "/usr/bin/chromium"))
    if not hosts.is_file() or not chromium.is_file():
        pytest.skip("needs Chromium and playwright-core: run js/test.sh (./build.sh js) first")
    out = subprocess.run(["node", str(REPO / "tests" / "python" / "docs_pages.mjs"),
                          server.url, str(chromium)],
                         capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["foreign"] == [], report["foreign"]  # no request left 127.0.0.1
    assert report["swagger_operations"] >= 10  # Swagger UI rendered the routes
    assert "/v1/embeddings" in report["swagger_paths"] and "/similarity" in report["swagger_paths"]
    assert report["redoc_title"].startswith("edgembed")
