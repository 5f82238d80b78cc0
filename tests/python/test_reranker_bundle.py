"""The Reranker over an engine bundle alone (Pyodide's path), checked in CPython under wasmtime.

Each tiny cross-encoder of tests/fixtures/models (BERT with token types, three labels, only-second
truncation, XLM-RoBERTa, ModernBERT) is written as an engine bundle from its directory alone and
loaded with ``Reranker.from_bundle``: no ``tokenizers``, the engine tokenizes the pairs. Its ids,
token types, counts and refusals are compared with ``HFPairTokenizer`` (Hugging Face
``tokenizers`` on the model's tokenizer.json, which test_export_heads.py checks against
sentence-transformers' own), on the reference pairs and on pairs past max_length on either side;
its logits are the bits of the same engine build run on the ids ``tokenizers`` gives; and without
numpy (as in Pyodide) its rows hold the numpy path's logits bit for bit and its scores within one
float32 step of them.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgembed import Embedder, Reranker, env
from edgembed._tokenize import HFPairTokenizer
from edgembed.errors import BackendUnavailable, InputError, InputTooLong
from edgembed.export.bundle import write_bundle
from edgembed.model_dir import read_model_dir
from edgembed.reranker import score_activation
from tiny_models import head_reference, model_dir, names, texts

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("wasmtime", reason="pip install wasmtime")
if not (ROOT / "build" / "wasm" / "edgembed.wasm").is_file():  # pragma: no cover
    pytest.skip("build/wasm not built (./build.sh wasm)", allow_module_level=True)

LONG = "a long passage about tokenizers, truncation and pairs " * 80  # ~800 tokens


def pairs_of(name: str) -> list[tuple[str, str]]:
    """The reference pairs, then pairs past max_length: a long document, a long query, both."""
    t = texts()
    ref = [(t[q], t[d]) for q, d in head_reference(name).pairs]
    return [*ref, (t[0], LONG), (LONG, t[1]), (LONG, LONG + "again"), ("", t[2]), (t[3], "")]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    root = tmp_path_factory.mktemp("rerank-bundles")

    def get(name: str) -> Path:
        path = root / f"{name}.emb"
        if not path.is_file():
            write_bundle(model_dir(name), path)
        return path

    return get


@pytest.fixture(scope="module")
def rerankers(bundle: Callable[[str], Path]) -> Iterator[dict[str, Reranker]]:
    loaded: dict[str, Reranker] = {}
    yield loaded
    for r in loaded.values():
        r._backend.close()  # type: ignore[attr-defined]


@pytest.fixture()
def reranker(rerankers: dict[str, Reranker], bundle: Callable[[str], Path],
             request: pytest.FixtureRequest) -> Reranker:
    name = request.param
    if name not in rerankers:
        rerankers[name] = Reranker.from_bundle(bundle(name), wasm_build="simd128")
    return rerankers[name]


def outcome(call: Callable[[], Any]) -> Any:
    """What a call returns, or the type of what it raises."""
    try:
        return call()
    except InputTooLong as exc:
        return type(exc)


@pytest.mark.parametrize("reranker", names("rerank"), indirect=True)
def test_pairs_tokenize_as_tokenizers_does(reranker: Reranker,
                                          request: pytest.FixtureRequest) -> None:
    name = request.node.callspec.params["reranker"]
    desc = read_model_dir(model_dir(name))
    hf = HFPairTokenizer(desc.source_dir, desc.max_seq_length)
    assert reranker.truncation == hf.strategy and reranker.max_length == hf.max_length
    assert reranker.model_name and reranker.num_labels == desc.head.num_labels
    refused = 0
    for pair in pairs_of(name):
        for cut in (True, False):
            want = outcome(partial(hf.encode, [pair], truncate=cut))
            got = outcome(partial(reranker.tokenize, [pair], truncate=cut))
            assert got == (want if want is InputTooLong else want[:2]), (pair[0][:40],
                                                                        pair[1][:40], cut)
            refused += want is InputTooLong
            assert outcome(partial(reranker.count_tokens, [pair], truncate=cut)) == outcome(
                partial(hf.count, [pair], cut))
    # every model refuses the too-long pairs without truncation; only-second also the long query
    assert refused >= 3


@pytest.mark.parametrize("reranker", names("rerank"), indirect=True)
def test_scores_are_the_engines_bits(reranker: Reranker, request: pytest.FixtureRequest,
                                     bundle: Callable[[str], Path]) -> None:
    from edgembed.backends.wasm import WasmBackend

    name = request.node.callspec.params["reranker"]
    pairs = [p for p in pairs_of(name) if p[0] is not LONG]  # what every strategy can cut
    desc = read_model_dir(model_dir(name))
    ids, types, _ = HFPairTokenizer(desc.source_dir, desc.max_seq_length).encode(pairs)
    engine = WasmBackend(bundle(name), variant="simd128")
    with_types = engine.type_vocab_size > 1
    want = np.concatenate([engine.scores([s], type_ids=[t] if with_types else None)
                           for s, t in zip(ids, types, strict=True)])
    engine.close()
    logits = reranker.score(pairs, raw=True)
    assert logits.reshape(want.shape).tobytes() == want.tobytes()
    scores = reranker.score(pairs)
    activated = score_activation(reranker.activation, want)
    assert scores.tobytes() == (activated[:, 0] if reranker.num_labels == 1
                                else activated).tobytes()
    if reranker.num_labels == 1:
        ranked = reranker.rerank(pairs[0][0], [d for _, d in pairs[:6]], top_n=3)
        best = sorted(range(6), key=lambda i: (-float(reranker.score([(pairs[0][0],
                                                                       pairs[i][1])])[0]), i))
        assert [r.index for r in ranked] == best[:3]


@pytest.mark.parametrize("reranker", names("rerank"), indirect=True)
def test_rows_without_numpy(reranker: Reranker, request: pytest.FixtureRequest,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """As in Pyodide: ``array('f')`` rows, the numpy path's logits bit for bit; the activation
    in float64 rounded to float32, within one float32 step of numpy's float32 arithmetic."""
    name = request.node.callspec.params["reranker"]
    pairs = pairs_of(name)[:12]
    logits = reranker.score(pairs, raw=True)
    scores = reranker.score(pairs)
    docs = [d for _, d in pairs]
    against_first = reranker.score([(pairs[0][0], d) for d in docs]) if (
        reranker.num_labels == 1) else None
    monkeypatch.setattr(env, "HOST", dataclasses.replace(env.HOST, numpy=False))
    raw_rows = reranker.score(pairs, raw=True)
    rows = reranker.score(pairs)
    if reranker.num_labels == 1:
        assert isinstance(raw_rows, array) and raw_rows.typecode == "f"
        assert np.asarray(raw_rows, np.float32).tobytes() == logits.tobytes()
        got = np.asarray(rows, np.float32)
        assert isinstance(reranker.score(pairs[0]), float)
        top = reranker.rerank(pairs[0][0], docs, top_n=2)
        assert against_first is not None
        assert [r.index for r in top] == sorted(range(len(docs)),
                                                key=lambda i: (-float(against_first[i]), i))[:2]
        assert [r.score for r in top] == [float(against_first[r.index]) for r in top] or all(
            abs(r.score - float(against_first[r.index])) <= float(np.spacing(
                np.float32(against_first[r.index]))) for r in top)
    else:
        assert all(isinstance(r, array) and len(r) == reranker.num_labels for r in raw_rows)
        assert np.asarray(raw_rows, np.float32).tobytes() == logits.tobytes()
        got = np.asarray(rows, np.float32)
    step = np.spacing(np.abs(scores)).astype(np.float32)
    assert np.all(np.abs(got - scores) <= step), float(np.max(np.abs(got - scores)))


def test_a_bundle_loads_where_it_belongs(bundle: Callable[[str], Path]) -> None:
    rerank, embed = bundle("rerank-bert"), bundle("bert-h48-mean")
    r = Reranker.load(rerank)  # a .emb path: the wasm engine, tokenizing by itself
    assert r.backend == "wasm" and r.variant == "int8"
    r2 = Reranker.load(rerank.read_bytes())
    pair = ("what is a cat", "a small domesticated feline")
    assert r.score(pair) == r2.score(pair)
    with pytest.raises(InputError, match="not a cross-encoder"):
        Reranker.from_bundle(embed)
    with pytest.raises(InputError, match=r"Reranker\.load"):
        Embedder.from_bundle(rerank)
    with pytest.raises(BackendUnavailable, match="backend='wasm'"):
        Reranker.load(rerank, backend="onnx")
    with pytest.raises(InputError, match="int8"):
        Reranker.load(rerank, variant="fp32")
