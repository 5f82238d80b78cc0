"""ONNX export of every family and feature, against sentence-transformers' own vectors.

Each tiny model of tests/fixtures/models (BERT of odd sizes and activations, DistilBERT, MPNet,
RoBERTa, XLM-RoBERTa, CamemBERT, ModernBERT with local and global layers; every pooling mode,
include_prompt false, Dense, Normalize, prompts) is exported here from its directory alone and
run with onnxruntime; the references were computed by sentence-transformers (torch) and are
committed (tests/fixtures/reference/tiny/, see tests/fixtures/models/README.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from onnx import TensorProto, helper

from edgembed._tokenize import load_tokenizer, prompt_length
from edgembed.errors import UnsupportedArchitecture
from edgembed.export.graph import GraphBuilder, build_encoder_graph, emit_activation
from edgembed.export.variants import Variant
from edgembed.model_dir import Activation, ModelDescription, read_model_dir
from tiny_builds import ExportedModel, by_name, prompt_of
from tiny_models import cosines, model_dir, names, reference, texts

# Measured on these random-weight models (tests/fixtures/models/README.md has the table): they
# are far more sensitive to rounding than trained ones (attention close to one-hot, tiny hidden
# sizes), so these bounds are looser than the bar for real models (docs/quantization.md).
BOUNDS = {  # variant: (min cosine, mean cosine) against the fp32 export, over the corpus
    Variant.INT8: (0.93, 0.997),
    Variant.FP16: (0.9998, 0.99999),
    Variant.INT4: (0.2, 0.89),
}
FP32_MIN_COSINE = 0.99999
NORM_TOLERANCE = 1e-4  # |‖ours‖ / ‖sentence-transformers‖ - 1|
INVARIANCE_MIN_COSINE = 0.999999  # a text alone vs inside length-sorted batches of 16


class Exported(ExportedModel):
    """One model's description, tokenizer and exported variants (built once per module)."""

    def __init__(self, name: str, root: Path) -> None:
        super().__init__(name, root)
        self.tok = load_tokenizer(self.desc.source_dir, self.desc.max_seq_length,
                                  lowercase=self.desc.do_lower_case)

    def prompt(self, set_name: str) -> str:
        return prompt_of(self.desc, set_name)

    def encode(self, variant: Variant, items: list[str], *, prompt: str = "",
               batch: int = 1) -> npt.NDArray[np.float32]:
        """Model outputs as sentence-transformers returns them (normalized only by the model's
        Normalize module), each text alone (``batch=1``) or in length-sorted batches."""
        pooled_alone = self.desc.pooling is not None and not self.desc.pooling.include_prompt
        skip = prompt_length(self.tok, prompt) if pooled_alone else 0
        ids = [e.ids for e in self.tok.encode_batch([prompt + t for t in items])]
        be = self.backend(variant)
        out = np.zeros((len(ids), be.dim), np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for j in range(0, len(order), batch):
            idx = order[j:j + batch]
            out[idx] = be.encode([ids[i] for i in idx], [skip] * len(idx))
        if self.desc.normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


exported = by_name(Exported, "tiny-onnx")


@pytest.mark.parametrize("name", names())
def test_fp32_matches_sentence_transformers(exported: Callable[[str], Exported],
                                            name: str) -> None:
    m = exported(name)
    ref = reference(name)
    assert m.desc.output_dim == ref.dim and m.desc.max_seq_length == ref.max_seq_length
    ids = [e.ids for e in m.tok.encode_batch(texts())]
    assert [len(i) for i in ids] == ref.token_counts  # the lengths sentence-transformers saw
    for set_name, want in ref.sets.items():
        got = m.encode(Variant.FP32, texts()[: len(want)], prompt=m.prompt(set_name))
        cos = cosines(got, want)
        assert cos.min() >= FP32_MIN_COSINE, (set_name, int(cos.argmin()), cos.min())
        ratio = np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        assert np.abs(ratio - 1).max() <= NORM_TOLERANCE, (set_name, ratio.min(), ratio.max())


@pytest.mark.parametrize("name", names())
def test_fp32_batched_equals_alone(exported: Callable[[str], Exported], name: str) -> None:
    m = exported(name)
    corpus = texts()[:-2]
    prompt = m.prompt("query") if "query" in reference(name).sets else ""
    alone = m.encode(Variant.FP32, corpus, prompt=prompt)
    batched = m.encode(Variant.FP32, corpus, prompt=prompt, batch=16)
    assert cosines(alone, batched).min() >= INVARIANCE_MIN_COSINE


@pytest.mark.parametrize("variant", [Variant.INT8, Variant.FP16, Variant.INT4])
@pytest.mark.parametrize("name", names())
def test_variants_within_measured_bounds(exported: Callable[[str], Exported], name: str,
                                         variant: Variant) -> None:
    """Every variant of every family: quality against the fp32 export, and batch invariance
    (a text's vector does not depend on its batch-mates)."""
    m = exported(name)
    corpus = texts()[:-2]
    fp32 = m.encode(Variant.FP32, corpus)
    alone = m.encode(variant, corpus)
    cos = cosines(alone, fp32)
    lo, mean = BOUNDS[variant]
    assert cos.min() >= lo and cos.mean() >= mean, (cos.min(), cos.mean())
    batched = m.encode(variant, corpus, batch=16)
    assert cosines(alone, batched).min() >= INVARIANCE_MIN_COSINE


def test_fixtures_reach_every_length_limit() -> None:
    """The references cover truncation at each model's max_seq_length, positions past 512
    (ModernBERT to 8,192) and texts longer than ModernBERT's sliding window."""
    for name in names():
        ref = reference(name)
        assert max(ref.token_counts) == ref.max_seq_length, name
    mb = read_model_dir(model_dir("modernbert-mean")).encoder
    assert reference("modernbert-mean").max_seq_length == 8192 == mb.max_positions
    assert sorted(reference("modernbert-mean").token_counts)[-2] > 512 > mb.local_window


def _run_activation(act: Activation, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    g = GraphBuilder()
    made: dict[float, str] = {}

    def num(v: float) -> str:
        if v not in made:
            made[v] = g.const(f"c{len(made)}", np.asarray(v, np.float32))
        return made[v]

    y = emit_activation(g, "x", act, num)
    g.nodes.append(helper.make_node("Identity", [y], ["y"]))
    graph = helper.make_graph(g.nodes, "act", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [len(x)])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [len(x)])], initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"x": x})[0])


def test_activations_match_transformers_formulas() -> None:
    """The graph's activations are transformers' (ACT2FN) formulas, written in float64 here:
    GELUActivation (erf), NewGELUActivation / PytorchGELUTanh (tanh), ReLU, SiLU, and the
    Dense modules' Tanh, Sigmoid, Identity. Whole tiny models barely tell the two GELUs apart
    (cosine 0.9999998), so their difference is checked here."""
    x = np.linspace(-6, 6, 2401, dtype=np.float32)
    xd = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    want = {
        Activation.GELU: 0.5 * xd * (1 + erf(xd / math.sqrt(2))),
        Activation.GELU_TANH: 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                       * (xd + 0.044715 * xd ** 3))),
        Activation.RELU: np.maximum(xd, 0),
        Activation.SILU: xd / (1 + np.exp(-xd)),
        Activation.TANH: np.tanh(xd),
        Activation.SIGMOID: 1 / (1 + np.exp(-xd)),
        Activation.IDENTITY: xd,
    }
    for act, expect in want.items():
        got = _run_activation(act, x)
        assert np.abs(got - expect).max() <= 2e-6 * max(1.0, np.abs(expect).max()), act
    gap = np.abs(_run_activation(Activation.GELU, x) - _run_activation(Activation.GELU_TANH, x))
    assert gap.max() > 1e-4


def test_exporter_refuses_an_embedding_model_without_pooling(tmp_path: Path) -> None:
    """(Cross-encoders and SPLADE models end in their heads: test_export_heads.py.)"""
    import dataclasses

    desc: ModelDescription = read_model_dir(model_dir("bert-h48-mean"))
    with pytest.raises(UnsupportedArchitecture, match="an embedding model needs a pooling "
                                                      "configuration"):
        build_encoder_graph(dataclasses.replace(desc, pooling=None), {})


def test_graph_inputs_follow_include_prompt(exported: Callable[[str], Exported]) -> None:
    """Only a model that pools without its prompt takes ``prompt_length``; without it the
    backend feeds zeros (no prompt)."""
    with_prompt = exported("bert-prompts-mean-noprompt").backend(Variant.FP32)
    plain = exported("bert-h48-mean").backend(Variant.FP32)
    assert with_prompt.takes_prompt_length and not plain.takes_prompt_length
    ids = [[2, 10, 11, 12, 3]]
    np.testing.assert_array_equal(with_prompt.encode(ids), with_prompt.encode(ids, [0]))
    assert not np.array_equal(with_prompt.encode(ids, [0]), with_prompt.encode(ids, [2]))


def test_export_model_of_a_tiny_directory(fresh_home: Path) -> None:
    """``embed export`` of a local directory: the manifest follows the model's description."""
    from edgembed.export import export_model

    manifest, out = export_model(str(model_dir("xlm-roberta-mean-prompts")),
                                 variants="fp32,int8")
    assert (manifest.family, manifest.dim, manifest.pooling, manifest.normalize) == (
        "xlm-roberta", 24, "mean", True)
    assert manifest.prompts == {"query": "query: ", "passage": "passage: "}  # no "document"
    assert (manifest.query_prefix, manifest.document_prefix) == ("query: ", "passage: ")
    assert manifest.variants["int8"].quality is not None
    saved = json.loads((out / "edgembed.json").read_text(encoding="utf-8"))
    assert saved["include_prompt"] is True and saved["similarity_fn_name"] == "cosine"
    manifest, _ = export_model(str(model_dir("bert-h30-max-relu-dense")), variants="fp32")
    assert (manifest.dim, manifest.pooling, manifest.family) == (20, "max", "bert")
