"""The Reranker, end to end on the tiny cross-encoders of tests/fixtures/models: pulled from their
directories, exported, loaded, and scored against sentence-transformers' CrossEncoder
(references by models/tiny/make_head_references.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgembed import (
    Embedder,
    InputError,
    InputTooLong,
    Reranker,
    RerankResult,
)
from tiny_models import head_reference, model_dir, texts

FP32_ABS = 2e-5


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rerank-home")


@pytest.fixture()
def rr_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGEMBED_HOME", str(home))
    monkeypatch.setattr("edgembed.reranker.cuda_state", lambda _r: (False, "no GPU in tests"))
    return home


def pairs_of(name: str) -> list[tuple[str, str]]:
    t = texts()
    return [(t[q], t[d]) for q, d in head_reference(name).pairs]


@pytest.mark.parametrize("name", ["rerank-bert", "rerank-bert-3labels-legacy",
                                  "rerank-bert-only-second", "rerank-modernbert-mean",
                                  "rerank-xlm-roberta"])
def test_scores_are_cross_encoder_predict(name: str, rr_home: Path) -> None:
    r = Reranker.load(model_dir(name), variant="fp32", backend="onnx")
    ref = head_reference(name)
    assert ref.scores is not None and ref.logits is not None
    pairs = pairs_of(name)
    scores = r.score(pairs)
    logits = r.score(pairs, raw=True)
    want = ref.scores[:, 0] if r.num_labels == 1 else ref.scores
    assert scores.shape == want.shape and scores.dtype == np.float32
    assert np.max(np.abs(scores - want)) <= FP32_ABS
    assert np.max(np.abs(logits.reshape(ref.logits.shape) - ref.logits)) <= FP32_ABS * max(
        1.0, float(np.abs(ref.logits).max()))
    assert r.count_tokens(pairs) == ref.token_counts
    assert r.truncation == ref.raw["truncation"]
    assert r.max_length == ref.max_seq_length


def test_a_pair_alone_scores_as_in_any_batch(rr_home: Path) -> None:
    for variant in ("fp32", "int8"):
        r = Reranker.load(model_dir("rerank-bert"), variant=variant, backend="onnx")
        pairs = pairs_of("rerank-bert")[:40]
        together = r.score(pairs)
        alone = np.array([r.score(p) for p in pairs], np.float32)
        small = r.score(pairs, max_batch_tokens=64)  # many small batches
        assert np.max(np.abs(together - alone)) <= 1e-6
        assert np.max(np.abs(together - small)) <= 1e-6


def test_rerank_orders_documents(rr_home: Path) -> None:
    r = Reranker.load(model_dir("rerank-bert"), variant="fp32", backend="onnx")
    query = "how do I reset my password"
    docs = [texts()[i] for i in range(3, 40)]
    scores = r.score([(query, d) for d in docs])
    results = r.rerank(query, docs)
    assert [x.index for x in results] == sorted(range(len(docs)),
                                                key=lambda i: (-float(scores[i]), i))
    assert all(isinstance(x, RerankResult) and x.document is None for x in results)
    top = r.rerank(query, docs, top_n=3, return_documents=True)
    assert [(x.index, x.document) for x in top] == [(x.index, docs[x.index])
                                                   for x in results[:3]]
    assert top[0].score == pytest.approx(float(scores[top[0].index]), abs=1e-7)
    raw = r.rerank(query, docs, raw=True, top_n=1)
    assert raw[0].index == results[0].index
    assert raw[0].score == pytest.approx(float(np.log(scores[raw[0].index]
                                                      / (1 - scores[raw[0].index]))), abs=1e-4)
    assert r.rerank(query, []) == []
    # equal documents tie; the earlier one comes first
    tied = r.rerank(query, ["same text", "other", "same text"])
    same = [x.index for x in tied if x.index in (0, 2)]
    assert same == [0, 2]


def test_labels_and_a_single_pair(rr_home: Path) -> None:
    nli = Reranker.load(model_dir("rerank-bert-3labels-legacy"), variant="fp32", backend="onnx")
    assert (nli.num_labels, nli.labels, nli.activation) == (
        3, ["contradiction", "entailment", "neutral"], "identity")
    one = nli.score(("a man is eating", "a person eats"))
    assert one.shape == (3,)
    with pytest.raises(InputError, match=r"has 3 labels .* rerank needs a one-label model"):
        nli.rerank("q", ["d"])
    r = Reranker.load(model_dir("rerank-bert"), variant="fp32", backend="onnx")
    assert isinstance(r.score(["a query", "a document"]), float)
    assert r.activation == "sigmoid" and 0.0 < r.score(("q", "d")) < 1.0


def test_truncation(rr_home: Path) -> None:
    long = texts()[-1]
    r = Reranker.load(model_dir("rerank-bert"), variant="fp32", backend="onnx")
    assert r.count_tokens([("q", long)]) == [128]
    assert r.count_tokens([("q", long)], truncate=False)[0] > 128
    with pytest.raises(InputTooLong, match=r"pairs\[1\] has \d+ tokens, over the model's max "
                                           r"length 128"):
        r.score([("q", "d"), ("q", long)], truncate=False)
    only = Reranker.load(model_dir("rerank-bert-only-second"), variant="fp32", backend="onnx")
    ids, types = only.tokenize([("a short query", long)])
    assert len(ids[0]) == 128 and types[0].count(0) == len(only.tokenize(
        [("a short query", "")])[0][0]) - 1
    with pytest.raises(InputTooLong, match=r"pairs\[0\]: the query alone leaves no room .* "
                                           r"\(only_second\); shorten the query"):
        only.score([(long, "a document")])


def test_bad_input(rr_home: Path) -> None:
    r = Reranker.load(model_dir("rerank-bert"), variant="fp32", backend="onnx")
    with pytest.raises(TypeError, match="pairs must be"):
        r.score("one string")
    with pytest.raises(TypeError, match=r"pairs\[1\] should be a \(query, document\) pair"):
        r.score([("q", "d"), ("q",)])
    with pytest.raises(TypeError, match=r"documents\[1\] is int"):
        r.rerank("q", ["d", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="documents must be a list"):
        r.rerank("q", "d")
    with pytest.raises(InputError, match="top_n must be a positive integer, not 0"):
        r.rerank("q", ["d"], top_n=0)
    with pytest.raises(InputError, match="max_batch_tokens must be a positive integer"):
        r.score([("q", "d")], max_batch_tokens=0)


def test_tasks_load_only_where_they_belong(rr_home: Path) -> None:
    with pytest.raises(InputError, match=r"rerank-bert is a cross-encoder .* Reranker\.load"):
        Embedder.load(model_dir("rerank-bert"), variant="fp32", backend="onnx")
    with pytest.raises(InputError, match="splade-bert is a sparse model, not a cross-encoder"):
        Reranker.load(model_dir("splade-bert"), variant="fp32", backend="onnx")
    with pytest.raises(InputError, match="bert-h48-mean is an embedding model, not a "
                                         "cross-encoder"):
        Reranker.load(model_dir("bert-h48-mean"), variant="fp32", backend="onnx")


def test_auto_takes_onnx_and_the_engine_runs_when_named(rr_home: Path) -> None:
    """``auto`` runs cross-encoders on onnxruntime; the engine backends run them when named
    (test_engine_rerank_sparse.py checks their scores)."""
    from edgembed.backends.native import native_available

    auto = Reranker.load(model_dir("rerank-bert"))
    assert (auto.backend, auto.variant) == ("onnx", "int8")
    if native_available()[0]:
        engine = Reranker.load(model_dir("rerank-bert"), backend="native")
        assert (engine.backend, engine.variant) == ("native", "int8")
        assert engine.score(("a query", "a document")) == pytest.approx(
            auto.score(("a query", "a document")), abs=0.02)
