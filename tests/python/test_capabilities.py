"""What this build can run: the sets in edgembed.capabilities checked against the code that
implements them, what `embed models` and export say about a model that waits, and a model
whose tokenizer only the onnx backend runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from edgembed import (
    BackendUnavailable,
    Embedder,
    InvalidModelDir,
    UnsupportedArchitecture,
    catalog,
)
from edgembed.capabilities import (
    ENGINE_FAMILIES,
    ENGINE_TOKENIZERS,
    EXPORT_FAMILIES,
    export_gaps,
    gaps,
)
from edgembed.catalog import Family, Pooling, TokenizerKind, get_spec
from edgembed.export import export_model
from edgembed.export.tokenizer_tables import tokenizer_tables
from edgembed.model_dir import SUPPORTED_MODEL_TYPES, read_model_dir
from edgembed.sources import check_catalog_entry, pull, spec_from_hf_dir
from tiny_model import write_tiny_bert


def _tokenizer_json(kind: TokenizerKind) -> str:
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE, Unigram, WordPiece

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    if kind is TokenizerKind.WORDPIECE:
        tok = Tokenizer(WordPiece({w: i for i, w in enumerate([*specials, "a", "##b"])},
                                  unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer()
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    elif kind is TokenizerKind.UNIGRAM:
        tok = Tokenizer(Unigram([(w, 0.0) for w in [*specials, "▁a", "b"]], unk_id=1))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
    else:
        tok = Tokenizer(BPE({w: i for i, w in enumerate([*specials, "a", "b", "ab"])},
                            [("a", "b")], unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return str(tok.to_str())


@pytest.mark.parametrize("kind", list(TokenizerKind))
def test_engine_tokenizers_are_what_the_bundle_writer_accepts(
    kind: TokenizerKind, tmp_path: Path,
) -> None:
    (tmp_path / "tokenizer.json").write_text(_tokenizer_json(kind), encoding="utf-8")
    if kind.value in ENGINE_TOKENIZERS:
        meta, _, _ = tokenizer_tables(tmp_path)
        assert meta["tokenizer"] == kind.value
    else:
        with pytest.raises(UnsupportedArchitecture):
            tokenizer_tables(tmp_path)


def test_export_families_are_what_the_reader_reads(tmp_path: Path) -> None:
    assert {Family(t).value for t in SUPPORTED_MODEL_TYPES} == EXPORT_FAMILIES
    d = write_tiny_bert(tmp_path / "m")
    config = json.loads((d / "config.json").read_text())
    config.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedArchitecture, match="supported: bert, distilbert, mpnet"):
        spec_from_hf_dir(d)


def test_engine_families_are_what_the_bundle_writer_accepts(
    tmp_path: Path, mpnet_hf_dir: Path,
) -> None:
    from edgembed.export.bundle import bundle_config, write_bundle
    from edgembed.model_dir import Family

    # the writer maps every family the reader reads to the engine's features
    assert {f.value for f in Family} == ENGINE_FAMILIES
    info = write_bundle(write_tiny_bert(tmp_path / "m"), tmp_path / "m.emb", max_length=32)
    assert info["size"] > 0
    mpnet = bundle_config(read_model_dir(mpnet_hf_dir))  # what the writer checks first
    assert (mpnet.family, mpnet.relative_buckets, mpnet.position_pad_id) == ("mpnet", 32, 1)


def test_catalog_entries_agree_with_the_real_files(hf_model_dir: Path,
                                                   mpnet_hf_dir: Path) -> None:
    for name, d in (("all-minilm-l6-v2", hf_model_dir), ("all-mpnet-base-v2", mpnet_hf_dir)):
        check_catalog_entry(get_spec(name), read_model_dir(d, name))
    wrong = dataclasses.replace(get_spec("all-mpnet-base-v2"), max_seq_length=512,
                                pooling=Pooling.CLS)
    with pytest.raises(InvalidModelDir) as err:
        check_catalog_entry(wrong, read_model_dir(mpnet_hf_dir, "all-mpnet-base-v2"))
    assert str(err.value) == (
        "the catalog entry of all-mpnet-base-v2 disagrees with its model files (pooling: "
        "catalog 'cls', files 'mean'; max_seq_length: catalog 512, files 384); fix "
        "models/catalog/all-mpnet-base-v2.json")


def test_what_catalog_models_wait_for() -> None:
    assert gaps(get_spec("all-minilm-l6-v2")) == ()
    assert gaps(get_spec("bge-small-en-v1.5")) == ()
    assert gaps(get_spec("paraphrase-multilingual-minilm-l12-v2")) == ()  # BERT + Unigram
    assert gaps(get_spec("multilingual-e5-small")) == ()  # XLM-RoBERTa + Unigram
    assert export_gaps(get_spec("all-mpnet-base-v2")) == ()
    # rerank and sparse models run everywhere: the engine has both heads
    for name in ("ms-marco-minilm-l6-v2", "bge-reranker-base", "splade-tiny"):
        assert gaps(get_spec(name)) == (), name


def test_a_catalog_task_the_files_contradict_is_refused(
    fresh_home: Path, temp_catalog: Path, tmp_path: Path,
) -> None:
    """A catalog entry that says rerank over an embedding model's files (no
    sequence-classification head): the files decide what runs, so the entry is refused."""
    d = write_tiny_bert(tmp_path / "m")
    entry = json.loads((temp_catalog / "all-minilm-l6-v2.json").read_text())
    entry.update(name="not-a-reranker", task="rerank", files={},
                 sources=[{"kind": "hub", "repo_id": "x/y", "revision": "0" * 40}])
    (temp_catalog / "not-a-reranker.json").write_text(json.dumps(entry))
    catalog.catalog.cache_clear()
    with pytest.raises(InvalidModelDir, match=r"disagrees with its model files \(task: catalog "
                                              r"'rerank', files 'embedding'"):
        pull("not-a-reranker", from_dir=d)
        export_model("not-a-reranker", variants="fp32")


def test_what_only_the_engine_lacks_runs_on_onnx_and_stops_on_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A BERT with a Dense module whose activation is a sigmoid (one the exporter builds and
    the engine does not): onnxruntime runs it, the native backend says it cannot and what to
    use, auto picks onnx."""
    from safetensors.numpy import save_file

    from edgembed.backends.native import native_available

    monkeypatch.setenv("EDGEMBED_HOME", str(tmp_path / "home"))
    d = write_tiny_bert(tmp_path / "sigmoid-dense-bert")
    modules = json.loads((d / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense",
                       "type": "sentence_transformers.models.Dense"})
    modules[3].update(idx=3, name="3")
    (d / "modules.json").write_text(json.dumps(modules))
    (d / "2_Dense").mkdir()
    (d / "2_Dense" / "config.json").write_text(json.dumps(
        {"in_features": 32, "out_features": 16, "bias": True,
         "activation_function": "torch.nn.modules.activation.Sigmoid"}))
    rng = np.random.default_rng(5)
    save_file({"linear.weight": rng.normal(0, 0.2, (16, 32)).astype(np.float32),
               "linear.bias": rng.normal(0, 0.1, 16).astype(np.float32)},
              str(d / "2_Dense" / "model.safetensors"))
    onnx = Embedder.load(str(d), backend="onnx")
    vectors = onnx.embed(["the quick brown fox", "hello world"])
    assert vectors.shape == (2, 16)
    if native_available()[0]:
        with pytest.raises(BackendUnavailable) as err:
            Embedder.load(str(d), backend="native")
        text = str(err.value)
        assert text.startswith("backend 'native' runs the edgembed engine, which cannot run "
                               "sigmoid-dense-bert: ") and "not module 0 (sigmoid)" in text
        assert text.endswith("backend='onnx'")
        auto = Embedder.load(str(d))
        assert auto.backend == "onnx" and "not module 0 (sigmoid)" in auto.backend_reason
        np.testing.assert_array_equal(auto.embed(["hello world"]), onnx.embed(["hello world"]))


def test_embed_models_says_what_each_entry_waits_for(
    fresh_home: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from edgembed.cli import main

    assert main(["models"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:] if line}
    assert lines["all-minilm-l6-v2"].endswith("wheel+hub   ready")
    assert lines["multilingual-e5-small"].endswith("ready; needs the hub")
    assert lines["ms-marco-minilm-l6-v2"].endswith("ready; needs the hub")
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    e5 = rows["multilingual-e5-small"]
    assert e5["needs_hub"] and e5["runs_on"] == ["onnx", "native", "wasm"]
    assert e5["blocked_by"] == []
    assert e5["hub_repo"] == "intfloat/multilingual-e5-small" and not e5["pulled"]
    assert e5["prompts"] == {"query": "query: ", "document": "passage: "}
    assert rows["splade-tiny"]["runs_on"] == ["onnx", "native", "wasm"]
    assert not rows["splade-tiny"]["needs_hub"]
