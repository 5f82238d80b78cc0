"""Rerankers and sparse models on the HTTP server, beside an embedding model: TEI's /rerank,
/predict and /embed_sparse, Cohere's and Jina's /v1/rerank (and /rerank with `documents`), with
real models (the tiny ones of tests/fixtures/models), a real uvicorn server and a real HTTP
client. Each model has its own adaptive batcher: a rerank batch never holds up an embedding
request."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")
httpx = pytest.importorskip("httpx2")

from edgembed import Embedder, InputError, Reranker  # noqa: E402
from edgembed.serve.app import create_app  # noqa: E402
from edgembed.serve.heads import ServedHead, install_heads, load_models  # noqa: E402
from edgembed.serve.model import ServedModel  # noqa: E402
from edgembed.serve.server import BackgroundServer  # noqa: E402
from edgembed.serve.settings import ServeSettings  # noqa: E402
from tiny_models import model_dir, texts  # noqa: E402

DENSE, RERANK, NLI, SPLADE = (str(model_dir(n)) for n in (
    "bert-h48-mean", "rerank-bert", "rerank-bert-3labels-legacy", "splade-bert"))
DOCS = ["a cat sat on the mat", "the stock market fell today", "cats are small animals", "",
        "naïve café ☕", texts()[40]]
QUERY = "what is a cat"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    h = tmp_path_factory.mktemp("serve-heads-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEMBED_HOME", str(h))
        for module in ("edgembed.embedder", "edgembed.reranker"):
            mp.setattr(f"{module}.cuda_state", lambda _r: (False, "no GPU in tests"))
        yield h


@pytest.fixture(scope="module")
def loaded(home: Path) -> tuple[ServedModel, list[ServedHead], list[Any]]:
    return load_models([DENSE, RERANK, SPLADE], [NLI], variant="fp32", backend="onnx")


@pytest.fixture(scope="module")
def server(loaded: tuple[ServedModel, list[ServedHead], list[Any]]
           ) -> Iterator[BackgroundServer]:
    main, heads, _ = loaded
    settings = ServeSettings(latency_target_ms=1000, max_inputs=16)
    app = create_app(main, settings)
    install_heads(app, heads)
    with BackgroundServer(app, settings) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: BackgroundServer) -> Iterator[Any]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def models(loaded: tuple[ServedModel, list[ServedHead], list[Any]]) -> dict[str, Any]:
    return {m.model_name: m for m in loaded[2]}


def test_what_is_served(loaded: tuple[ServedModel, list[ServedHead], list[Any]],
                        client: Any) -> None:
    main, heads, _ = loaded
    assert main.name == "bert-h48-mean"
    assert [(h.name, h.task) for h in heads] == [("rerank-bert", "rerank"),
                                                  ("splade-bert", "sparse"),
                                                  ("rerank-bert-3labels-legacy", "rerank")]
    ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert ids == ["bert-h48-mean", "rerank-bert", "rerank-bert-3labels-legacy", "splade-bert"]
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/rerank", "/v1/rerank", "/predict", "/embed_sparse", "/embed"} <= set(paths)
    assert client.get("/ready").json()["status"] == "ready"


def test_tei_rerank(loaded: Any, client: Any) -> None:
    r: Reranker = models(loaded)["rerank-bert"]
    want = r.rerank(QUERY, DOCS)
    got = client.post("/rerank", json={"query": QUERY, "texts": DOCS}).json()
    assert [(g["index"], g["score"]) for g in got] == [(w.index, w.score) for w in want]
    assert set(got[0]) == {"index", "score"}
    raw = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "raw_scores": True,
                                       "return_text": True}).json()
    logits = r.score([(QUERY, d) for d in DOCS], raw=True)
    assert [(g["index"], g["text"]) for g in raw] == [(w.index, DOCS[w.index]) for w in want]
    assert [g["score"] for g in raw] == [float(logits[w.index]) for w in want]
    long = {"query": QUERY, "texts": ["short", texts()[-1][:20000]], "truncate": False}
    refused = client.post("/rerank", json=long)
    assert refused.status_code == 413
    assert refused.json()["error"].startswith("pairs[1] has ")


def test_cohere_and_jina_rerank(loaded: Any, client: Any) -> None:
    r: Reranker = models(loaded)["rerank-bert"]
    want = r.rerank(QUERY, DOCS, top_n=3)
    body = {"model": "rerank-bert", "query": QUERY, "top_n": 3, "return_documents": True,
            "documents": [d if i % 2 else {"text": d} for i, d in enumerate(DOCS)]}
    for path in ("/v1/rerank", "/rerank"):
        got = client.post(path, json=body).json()
        assert set(got) == {"id", "model", "results", "usage", "meta"}
        assert got["model"] == "rerank-bert"
        assert [(x["index"], x["relevance_score"], x["document"]["text"])
                for x in got["results"]] == [(w.index, w.score, DOCS[w.index]) for w in want]
        assert got["usage"]["total_tokens"] == sum(r.count_tokens([(QUERY, d) for d in DOCS]))
    plain = client.post("/v1/rerank", json={"query": QUERY, "documents": DOCS}).json()
    assert len(plain["results"]) == len(DOCS) and "document" not in plain["results"][0]
    missing = client.post("/v1/rerank", json={"model": "nope", "query": QUERY,
                                               "documents": DOCS})
    assert missing.status_code == 404
    assert "the reranker 'nope' is not served here" in missing.json()["error"]["message"]
    assert "with several rerankers a request names one" in missing.json()["error"]["message"]
    nli = client.post("/v1/rerank", json={"model": "rerank-bert-3labels-legacy",
                                           "query": QUERY, "documents": DOCS})
    assert nli.status_code == 422 and "ranking needs a one-label" in \
        nli.json()["error"]["message"]


def test_rerank_bad_bodies(client: Any) -> None:
    cases = [
        ({"query": QUERY}, 422, "texts: Field required"),
        ({"query": QUERY, "documents": []}, 400, "'documents' is an empty list"),  # TEI's "empty"
        ({"query": QUERY, "documents": DOCS, "top_n": 0}, 422, "top_n"),
        ({"query": QUERY, "documents": ["d"] * 17}, 413, "over the limit of 16"),
        ({"query": QUERY, "texts": ["d"], "extra": 1}, 422, "extra"),
    ]
    for body, status, text in cases:
        got = client.post("/rerank", json=body)
        assert got.status_code == status, body
        assert text in got.json()["error"], got.json()
    bad = client.post("/rerank", content=b"{", headers={"content-type": "application/json"})
    assert bad.status_code == 400
    assert client.post("/rerank", content=b"{}").status_code == 415


def test_predict(loaded: Any, client: Any) -> None:
    nli: Reranker = models(loaded)["rerank-bert"]
    pair = ["a man is eating", "a person eats"]
    one = client.post("/predict", json={"inputs": pair}).json()
    want = 1.0 / (1.0 + np.exp(-np.float32(nli.score(tuple(pair), raw=True))))
    assert one == [{"score": pytest.approx(float(want), abs=1e-6), "label": "LABEL_0"}]
    batch = client.post("/predict", json={"inputs": [pair, "a single text"],
                                          "raw_scores": True}).json()
    assert len(batch) == 2 and batch[0][0]["score"] == pytest.approx(
        float(nli.score(tuple(pair), raw=True)), abs=1e-6)
    # a single text is read as [CLS] text [SEP], as a sequence classifier reads one
    assert batch[1][0]["score"] == pytest.approx(float(nli.logits(["a single text"])[0, 0]),
                                                 abs=1e-6)
    bad = client.post("/predict", json={"inputs": [["a", "b", "c"]]})
    assert bad.status_code == 422 and "an input is a text or a pair" in bad.json()["error"]


def test_predict_softmax_over_labels(loaded: Any) -> None:
    """TEI's /predict scores several labels by softmax, sorted best first (a server whose
    first reranker has three labels)."""
    three: Reranker = models(loaded)["rerank-bert-3labels-legacy"]
    app = create_app(loaded[0], ServeSettings(latency_target_ms=1000))
    install_heads(app, [ServedHead(three)])  # a head of its own: this server runs its batcher
    pair = ("a man is eating", "a person eats")
    logits = three.score(pair, raw=True).astype(np.float64)
    soft = np.exp(logits - logits.max())
    soft /= soft.sum()
    with BackgroundServer(app) as s, httpx.Client(base_url=s.url, timeout=60) as c:
        got = c.post("/predict", json={"inputs": list(pair)}).json()
    order = np.argsort(-soft, kind="stable")
    assert [g["label"] for g in got] == [three.labels[j] for j in order]
    assert [g["score"] for g in got] == pytest.approx([float(soft[j]) for j in order], abs=1e-6)


def test_one_reranker_answers_any_model_name(loaded: Any) -> None:
    """Like TEI (and the embedding routes): a server with one reranker answers whatever model
    a Cohere or Jina client names (their clients send their own defaults);
    --strict-model-name restores the 404."""
    r: Reranker = models(loaded)["rerank-bert"]
    want = [(w.index, w.score) for w in r.rerank(QUERY, DOCS, top_n=2)]
    for strict, status in ((False, 200), (True, 404)):
        app = create_app(loaded[0], ServeSettings(latency_target_ms=1000,
                                                  strict_model_name=strict))
        install_heads(app, [ServedHead(r)])
        with BackgroundServer(app) as s, httpx.Client(base_url=s.url, timeout=60) as c:
            got = c.post("/v1/rerank", json={"model": "rerank-english-v3.0", "query": QUERY,
                                             "documents": DOCS, "top_n": 2})
            named = c.post("/v1/rerank", json={"model": "rerank-bert", "query": QUERY,
                                               "documents": DOCS, "top_n": 2})
        assert got.status_code == status, got.text
        assert named.status_code == 200
        assert [(x["index"], x["relevance_score"]) for x in named.json()["results"]] == want
        if status == 200:
            assert got.json()["model"] == "rerank-bert"
            assert [(x["index"], x["relevance_score"]) for x in got.json()["results"]] == want
        else:
            assert "the reranker 'rerank-english-v3.0' is not served here" in \
                got.json()["error"]["message"]


def test_embed_sparse(loaded: Any, client: Any) -> None:
    e: Embedder = models(loaded)["splade-bert"]
    got = client.post("/embed_sparse", json={"inputs": DOCS}).json()
    assert len(got) == len(DOCS)
    for g, v in zip(got, e.embed_sparse(DOCS), strict=True):
        assert [x["index"] for x in g] == v.indices.tolist()
        np.testing.assert_allclose([x["value"] for x in g], v.values, rtol=1e-6)
    one = client.post("/embed_sparse", json={"inputs": "hello world"}).json()
    assert len(one) == 1
    bad = client.post("/embed_sparse", json={"inputs": "x", "prompt_name": "nope"})
    assert bad.status_code == 422 and "not one of this model's prompts" in bad.json()["error"]


def test_the_embedding_model_still_serves(loaded: Any, client: Any) -> None:
    e: Embedder = models(loaded)["bert-h48-mean"]
    got = np.array(client.post("/embed", json={"inputs": DOCS}).json(), np.float32)
    np.testing.assert_allclose(got, e.embed(DOCS), atol=2e-6)
    metrics = client.get("/metrics").text
    for prefix in ("edgembed_batcher", "edgembed_rerank_batcher", "edgembed_rerank2_batcher",
                   "edgembed_sparse_batcher"):
        assert f"# TYPE {prefix}_requests_total counter" in metrics


class _Gated:
    """The real reranker, whose batches wait at a gate: a rerank batch that takes as long as
    the test wants."""

    def __init__(self, reranker: Reranker) -> None:
        self._r = reranker
        self.entered = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._r, name)

    def rerank(self, *a: Any, **kw: Any) -> Any:
        return self._r.rerank(*a, **kw)

    def logits(self, items: Any, **kw: Any) -> Any:
        self.entered.set()
        assert self.release.wait(60)
        return self._r.logits(items, **kw)


def test_an_embedding_request_never_waits_for_a_rerank_batch(loaded: Any) -> None:
    """A rerank batch is held at a gate; an embedding request sent meanwhile is answered, and
    only then is the rerank batch let go (it still answers correctly)."""
    r: Reranker = models(loaded)["rerank-bert"]
    gated = _Gated(r)
    app = create_app(loaded[0], ServeSettings(latency_target_ms=1000))
    install_heads(app, [ServedHead(gated)])
    results: dict[str, Any] = {}
    with BackgroundServer(app) as s, httpx.Client(base_url=s.url, timeout=60) as c:
        def rerank() -> None:
            results["rerank"] = c.post("/rerank", json={"query": QUERY, "texts": DOCS}).json()

        t = threading.Thread(target=rerank)
        t.start()
        assert gated.entered.wait(30)
        embedded = c.post("/embed", json={"inputs": ["while the reranker is busy"]})
        assert embedded.status_code == 200 and "rerank" not in results
        gated.release.set()
        t.join(60)
    want = r.rerank(QUERY, DOCS)
    assert [(g["index"], g["score"]) for g in results["rerank"]] == [(w.index, w.score)
                                                                     for w in want]


def test_a_rerank_request_never_waits_for_an_embedding_batch(loaded: Any) -> None:
    """The other way round: an embedding batch is held at a gate; a rerank and a sparse
    request sent meanwhile are answered, each by its model's own batcher."""
    main: ServedModel = loaded[0]
    entered, release = threading.Event(), threading.Event()

    def gated(texts: list[str]) -> Any:
        entered.set()
        assert release.wait(60)
        return main.embed(texts)

    held = ServedModel(name=main.name, dim=main.dim, max_length=main.max_length,
                       embed_raw=gated, count_tokens=lambda t, trunc: main.tokens(
                           t, truncate=trunc), max_batch_tokens=main.max_batch_tokens)
    app = create_app(held, ServeSettings(latency_target_ms=1000))
    install_heads(app, [ServedHead(h.model) for h in loaded[1]])
    results: dict[str, Any] = {}
    with BackgroundServer(app) as s, httpx.Client(base_url=s.url, timeout=60) as c:
        def embed() -> None:
            results["embed"] = c.post("/embed", json={"inputs": DOCS})

        t = threading.Thread(target=embed)
        t.start()
        assert entered.wait(30)
        ranked = c.post("/rerank", json={"query": QUERY, "texts": DOCS})
        sparse = c.post("/embed_sparse", json={"inputs": DOCS})
        assert ranked.status_code == 200 and sparse.status_code == 200
        assert "embed" not in results
        release.set()
        t.join(60)
    assert results["embed"].status_code == 200
    r: Reranker = models(loaded)["rerank-bert"]
    assert [g["index"] for g in ranked.json()] == [w.index for w in r.rerank(QUERY, DOCS)]


def test_pairs_and_sparse_texts_cost_their_tokens(loaded: Any) -> None:
    """Each model's batcher counts what its encoder reads: a pair costs the tokens of the
    query and the document together (special tokens included), a sparse text its tokens; the
    embedding model's batcher sees none of it."""
    main = loaded[0]
    heads = [ServedHead(h.model) for h in loaded[1]]
    r: Reranker = models(loaded)["rerank-bert"]
    splade: Embedder = models(loaded)["splade-bert"]
    app = create_app(main, ServeSettings(latency_target_ms=1000))
    install_heads(app, heads)
    with BackgroundServer(app) as s, httpx.Client(base_url=s.url, timeout=60) as c:
        assert c.post("/rerank", json={"query": QUERY, "texts": DOCS}).status_code == 200
        assert c.post("/embed_sparse", json={"inputs": DOCS}).status_code == 200
        by_task = {h.task: h for h in heads if h.name in ("rerank-bert", "splade-bert")}
        rerank = by_task["rerank"].batcher
        sparse = by_task["sparse"].batcher
        dense = app.state.edgembed.batcher
        assert rerank is not None and sparse is not None and dense is not None
        pair_tokens = r.count_tokens([(QUERY, d) for d in DOCS])
        ids, types = r.tokenize([(QUERY, d) for d in DOCS])
        assert pair_tokens == [len(x) for x in ids]
        # [CLS] query [SEP] (type 0) is the same in every pair; the document's part follows
        assert len({t.count(0) for t in types}) == 1 and min(t.count(1) for t in types) >= 1
        assert rerank.stats().batch_tokens_histogram["sum"] == sum(pair_tokens)
        assert sparse.stats().batch_tokens_histogram["sum"] == sum(splade.count_tokens(DOCS))
        assert dense.stats().batches == 0


def test_a_server_of_a_reranker_alone(loaded: Any) -> None:
    main, heads, _ = load_models([RERANK], [], variant="fp32", backend="onnx")
    assert main.name == "rerank-bert" and [h.name for h in heads] == ["rerank-bert"]
    app = create_app(main, ServeSettings(latency_target_ms=1000))
    install_heads(app, heads)
    with BackgroundServer(app) as s, httpx.Client(base_url=s.url, timeout=60) as c:
        assert c.post("/rerank", json={"query": QUERY, "texts": DOCS}).status_code == 200
        refused = c.post("/v1/embeddings", json={"input": "x"})
        assert refused.status_code == 422
        assert refused.json()["error"]["message"] == (
            "rerank-bert is a cross-encoder; this server embeds no dense vectors with it: use "
            "POST /rerank or /v1/rerank")
        assert c.post("/embed_sparse", json={"inputs": "x"}).status_code == 404


def test_what_one_server_refuses(home: Path) -> None:
    with pytest.raises(InputError, match="one server serves one embedding model"):
        load_models([DENSE, str(model_dir("bert-h40-cls-gelu-new"))], [], variant="fp32",
                    backend="onnx")
    with pytest.raises(InputError, match="rerank-bert is given twice"):
        load_models([RERANK], [RERANK], variant="fp32", backend="onnx")
    with pytest.raises(InputError, match="is an embedding model, not a cross-encoder"):
        load_models([], [DENSE], variant="fp32", backend="onnx")


def test_embed_serve_with_a_reranker_beside_the_model(home: Path) -> None:
    """`embed serve -m MODEL --reranker MODEL` as installed, in its own process."""
    import os
    import re
    import signal
    import subprocess
    import sys

    from test_serve_shutdown import EXITED_BY_SIGTERM, Lines, wait_ready

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "EDGEMBED_HOME": str(home)}
    env.pop("EDGEMBED_API_KEYS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgembed.cli", "serve", "--port", "0", "-m", DENSE,
         "--reranker", RERANK, "-m", SPLADE, "--variant", "fp32", "--backend", "onnx",
         "--log-level", "warning", "--no-access-log"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        err = Lines(proc.stderr)
        line = err.wait_for("edgembed: serving", 120)
        assert re.search(r"serving bert-h48-mean \(fp32 on onnx\), sparse splade-bert \(fp32 "
                         r"on onnx\), reranker rerank-bert \(fp32 on onnx\) at ", line), line
        url = line.split(" at ", 1)[1].split(";", 1)[0]
        wait_ready(url)
        with httpx.Client(base_url=url, timeout=30) as c:
            got = c.post("/v1/rerank", json={"query": QUERY, "documents": DOCS}).json()
            assert len(got["results"]) == len(DOCS)
            assert c.post("/embed_sparse", json={"inputs": "x"}).status_code == 200
            assert c.post("/embed", json={"inputs": "x"}).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) in EXITED_BY_SIGTERM
        assert "Traceback" not in err.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
