"""The Embedder and the CLI follow the model: normalization, prompts, pooling without the prompt.

End to end on tiny models of tests/fixtures/models (pulled from their directories and exported
by edgembed, run by onnxruntime), against sentence-transformers' vectors for the same texts
and prompts (tests/fixtures/reference/tiny/, see tests/fixtures/models/README.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgembed import Embedder
from edgembed.cli import main
from edgembed.errors import InputError
from tiny_models import cosines, model_dir, reference, texts

MIN_COSINE = 0.99999


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One EDGEMBED_HOME for the module, so each tiny model is exported once."""
    path = tmp_path_factory.mktemp("edgembed-home")
    old = os.environ.get("EDGEMBED_HOME")
    os.environ["EDGEMBED_HOME"] = str(path)
    yield path
    if old is None:
        os.environ.pop("EDGEMBED_HOME", None)
    else:
        os.environ["EDGEMBED_HOME"] = old


def load(name: str) -> Embedder:
    return Embedder.load(str(model_dir(name)), backend="onnx", variant="fp32")


def close(got: np.ndarray, want: np.ndarray) -> None:
    cos = cosines(got, want)
    assert cos.min() >= MIN_COSINE, (int(cos.argmin()), cos.min())
    ratio = np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert np.abs(ratio - 1).max() <= 1e-4, (ratio.min(), ratio.max())


def test_normalization_follows_the_model(home: Path) -> None:
    """No Normalize module: vectors as sentence-transformers returns them; normalize=True
    still L2-normalizes on request."""
    emb = load("bert-h40-cls-gelu-new")
    assert not emb.manifest.normalize
    corpus = texts()[:40]
    raw = emb.embed(corpus)
    close(raw, reference("bert-h40-cls-gelu-new").sets["default"][:40])
    assert np.abs(np.linalg.norm(raw, axis=1) - 1).max() > 0.1
    unit = emb.embed(corpus, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1, atol=1e-6)
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True),
                               atol=1e-6)
    normalized = load("bert-h30-max-relu-dense")
    assert normalized.manifest.normalize and normalized.dim == 20
    out = normalized.embed(corpus)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1, atol=1e-6)
    assert not np.allclose(np.linalg.norm(normalized.embed(corpus, normalize=False), axis=1), 1)


def test_query_and_document_prompts(home: Path) -> None:
    """e5-style prompts: embed_query / embed_document, prompt_name= and prefix= agree with
    sentence-transformers' vectors for the same prompts."""
    emb = load("xlm-roberta-mean-prompts")
    ref = reference("xlm-roberta-mean-prompts")
    assert emb.prompts == {"query": "query: ", "passage": "passage: "}
    n = len(ref.sets["query"])
    sub = texts()[:n]
    close(emb.embed_query(sub), ref.sets["query"])
    close(emb.embed_document(sub), ref.sets["document"])
    np.testing.assert_array_equal(emb.embed(sub, prompt_name="query"), emb.embed_query(sub))
    np.testing.assert_array_equal(emb.embed(sub, prefix="passage: "), emb.embed_document(sub))
    np.testing.assert_array_equal(emb.embed_query(sub, prompt_name="passage"),
                                  emb.embed_document(sub))
    close(emb.embed(texts()), ref.sets["default"])  # no default prompt: none applied
    chunks = list(emb.embed_iter(sub, chunk_size=7, prompt_name="query"))
    np.testing.assert_allclose(np.concatenate(chunks), emb.embed_query(sub), atol=1e-6)
    plain, prompted = emb.count_tokens(["hello"]), emb.count_tokens(["hello"],
                                                                    prompt_name="query")
    assert prompted[0] > plain[0]
    assert emb.tokenize("hello", prompt_name="query") == emb.tokenize("query: hello")
    with pytest.raises(InputError, match=r"no prompt named 'doc' \(its prompts: passage, "
                                         r"query\)"):
        emb.embed("x", prompt_name="doc")
    with pytest.raises(InputError, match="prefix or prompt_name, not both"):
        emb.embed("x", prefix="a", prompt_name="query")


def test_pooling_without_the_prompt(home: Path) -> None:
    """include_prompt false: the prompt is read by the encoder but left out of pooling."""
    for name in ("bert-prompts-mean-noprompt", "bert-prompts-cls-noprompt",
                 "bert-prompts-weightedmean-noprompt"):
        emb = load(name)
        ref = reference(name)
        assert not emb.manifest.include_prompt and emb.manifest.do_lower_case
        sub = texts()[: len(ref.sets["query"])]
        close(emb.embed_query(sub), ref.sets["query"])
        close(emb.embed_document(sub), ref.sets["document"])
        close(emb.embed(texts()), ref.sets["default"])


def test_default_prompt_applies_unless_another_is_given(home: Path) -> None:
    emb = load("bert-prompts-cls-mean-default")
    ref = reference("bert-prompts-cls-mean-default")
    assert emb.manifest.default_prompt_name == "query" and emb.dim == 64
    close(emb.embed(texts()), ref.sets["default"])  # sentence-transformers applied "query: "
    sub = texts()[:20]
    np.testing.assert_array_equal(emb.embed(sub), emb.embed(sub, prompt_name="query"))
    assert not np.allclose(emb.embed(sub, prefix=""), emb.embed(sub))  # prefix="" : no prompt
    close(emb.embed_document(texts()[: len(ref.sets["document"])]), ref.sets["document"])


def test_cli_prompt_name_and_normalize(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emb = load("xlm-roberta-mean-prompts")
    directory = str(model_dir("xlm-roberta-mean-prompts"))
    common = ["--model", directory, "--backend", "onnx", "--variant", "fp32"]
    assert main([*common, "--prompt-name", "passage", "a short text"]) == 0
    got = np.array(json.loads(capsys.readouterr().out.splitlines()[0]), np.float32)
    np.testing.assert_allclose(got, emb.embed_document("a short text")[0], atol=1e-6)
    assert main([*common, "--document", "a short text"]) == 0
    again = np.array(json.loads(capsys.readouterr().out.splitlines()[0]), np.float32)
    np.testing.assert_allclose(again, got, atol=1e-6)
    assert main([*common, "--query", "--prompt-name", "query", "x"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert main([*common, "--prompt-name", "nope", "x"]) == 1
    assert "no prompt named 'nope'" in capsys.readouterr().err

    plain = str(model_dir("bert-h40-cls-gelu-new"))
    flags = ["--model", plain, "--backend", "onnx", "--variant", "fp32"]
    assert main([*flags, "hello"]) == 0
    raw = np.array(json.loads(capsys.readouterr().out.splitlines()[0]))
    assert abs(np.linalg.norm(raw) - 1) > 0.1  # the model does not normalize
    assert main([*flags, "--normalize", "hello"]) == 0
    unit = np.array(json.loads(capsys.readouterr().out.splitlines()[0]))
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw), atol=1e-6)


def test_info_lists_prompts(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emb = load("bert-prompts-cls-mean-default")
    assert main(["info", str(emb.model_dir)]) == 0
    out = capsys.readouterr().out
    assert "prompts:     document 'passage: ', query 'query: ' (default: query)" in out
    assert "family:      bert" in out and "pooling:     cls+mean" in out


def test_engine_bundles_record_pooling_without_the_prompt(tmp_path: Path) -> None:
    """The bundle says include_prompt false and the engine reads it (its vectors without the
    prompt are checked against sentence-transformers in test_engine_families.py)."""
    from conftest import link_model
    from edgembed.export.bundle import read_bundle_header, write_bundle

    d = link_model(model_dir("bert-h48-mean"), tmp_path / "m", skip=("1_Pooling/config.json",))
    (d / "1_Pooling").mkdir(exist_ok=True)
    (d / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode": "mean", "include_prompt": False}))
    info = write_bundle(d, tmp_path / "m.emb")
    assert info["include_prompt"] == "false"
    assert read_bundle_header(tmp_path / "m.emb").metadata["include_prompt"] == "false"
