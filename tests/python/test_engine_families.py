"""The C engine on every tiny model of tests/fixtures/models, against sentence-transformers.

Each model (BERT of odd sizes and activations, SiLU among them, DistilBERT, MPNet, RoBERTa,
XLM-RoBERTa, CamemBERT, ModernBERT with local and global layers; every pooling mode, prompts
left out of the pooling, Dense, Normalize) is written as an engine bundle from its directory alone
(``export.bundle.write_bundle``) and run by the native engine and, under wasmtime, by the
wasm engine. The references are sentence-transformers' own fp32 vectors (committed:
tests/fixtures/reference/tiny/, see tests/fixtures/models/README.md).

The engine's weights and activations are int8 (docs/quantization.md), so its vectors are held
to the int8 bounds measured here (the table in tests/fixtures/models/README.md) and, tighter,
to the ONNX int8 variant: the same quantization scheme computed by another implementation
(onnxruntime). For the XLM-RoBERTa and ModernBERT models the real `embed` script's chain
(pull a directory, export, bundle) writes the same bundle, byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from edgembed._tokenize import load_tokenizer, prompt_length
from edgembed.backends.native import NativeBackend
from edgembed.export.bundle import write_bundle
from edgembed.model_dir import ModelDescription, read_model_dir
from tiny_builds import by_name, need_native, prompt_of
from tiny_models import cosines, model_dir, names, reference, texts

ROOT = Path(__file__).resolve().parents[2]

# Measured with this engine (every kernel set and wasm build gives the same bits): min / mean
# cosine to sentence-transformers over every text of a model's reference sets, rounded down.
# Random weights drawn wide on tiny hidden sizes are far more sensitive to int8 rounding than
# trained models (ModernBERT with biases the most); the bar for real models is checked on
# all-mpnet-base-v2 in test_engine_mpnet.py.
MEASURED = {
    "bert-h30-max-relu-dense": (0.99958, 0.99991),
    "bert-h36-silu-dense": (0.99946, 0.99991),
    "bert-h40-cls-gelu-new": (0.99518, 0.99940),
    "bert-h48-mean": (0.99975, 0.99992),
    "bert-prompts-cls-mean-default": (0.99922, 0.99983),
    "bert-prompts-cls-noprompt": (0.99785, 0.99978),
    "bert-prompts-lasttoken": (0.99862, 0.99978),
    "bert-prompts-lasttoken-noprompt": (0.99862, 0.99978),
    "bert-prompts-max-noprompt": (0.99929, 0.99989),
    "bert-prompts-mean-noprompt": (0.99963, 0.99990),
    "bert-prompts-sqrt-len": (0.99963, 0.99991),
    "bert-prompts-weightedmean": (0.99955, 0.99990),
    "bert-prompts-weightedmean-noprompt": (0.99955, 0.99990),
    "camembert-cls": (0.99891, 0.99987),
    "distilbert-mean": (0.99932, 0.99982),
    "modernbert-bias-cls": (0.93970, 0.99746),
    "modernbert-mean": (0.99442, 0.99899),
    "mpnet-mean": (0.99887, 0.99984),
    "roberta-mean": (0.99957, 0.99995),
    "xlm-roberta-mean-prompts": (0.99883, 0.99978),
}
ONNX_INT8_MIN_COSINE = 0.9999  # engine vs the ONNX int8 variant (measured ≥ 0.99996)


class Bundled:
    """One tiny model as an engine bundle, its description and Hugging Face tokenizer."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.desc: ModelDescription = read_model_dir(model_dir(name))
        self.path = root / f"{name}.emb"
        self.info = write_bundle(model_dir(name), self.path)
        self.tok = load_tokenizer(self.desc.source_dir, self.desc.max_seq_length,
                                  lowercase=self.desc.do_lower_case)

    def prompt(self, set_name: str) -> str:
        return prompt_of(self.desc, set_name)

    def skip(self, prompt: str) -> int:
        """Leading prompt tokens the pooling leaves out (sentence-transformers' count)."""
        pooled_alone = self.desc.pooling is not None and not self.desc.pooling.include_prompt
        return prompt_length(self.tok, prompt) if prompt and pooled_alone else 0

    def encode(self, backend: object, ids: list[list[int]], skip: int = 0, batch: int = 1
               ) -> npt.NDArray[np.float32]:
        """Outputs as sentence-transformers returns them (L2 only by a Normalize module)."""
        encode = backend.encode  # type: ignore[attr-defined]
        out = np.concatenate([encode(ids[i:i + batch], prompt_lengths=[skip] * len(
            ids[i:i + batch])) for i in range(0, len(ids), batch)])
        if self.desc.normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return np.asarray(out, dtype=np.float32)


bundled = by_name(Bundled, "tiny-emb")


def test_every_model_has_a_measured_bound() -> None:
    assert sorted(MEASURED) == names()


@pytest.mark.parametrize("name", names())
def test_engine_matches_sentence_transformers(bundled: Callable[[str], Bundled],
                                              name: str) -> None:
    """The engine's own tokenizer gives sentence-transformers' ids (prompts included, long
    texts truncated at max_seq_length), and its int8 vectors are within the measured bound of
    sentence-transformers' fp32 ones for every reference set (plain, query and document
    prompts, pooled with or without the prompt)."""
    need_native()
    m = bundled(name)
    ref = reference(name)
    be = NativeBackend(m.path, threads=2)
    assert be.dim == ref.dim and be.max_length == ref.max_seq_length
    cos_all = []
    for set_name, want in ref.sets.items():
        prompt = m.prompt(set_name)
        items = [prompt + t for t in texts()[: len(want)]]
        ids = be.tokenize(items)
        assert ids == [e.ids for e in m.tok.encode_batch(items)], set_name
        if not prompt:
            assert [len(i) for i in ids] == ref.token_counts
        got = m.encode(be, ids, m.skip(prompt), batch=16)
        cos_all.append(cosines(got, want))
    cos = np.concatenate(cos_all)
    lo, mean = MEASURED[name]
    assert cos.min() >= lo and cos.mean() >= mean, (cos.min(), cos.mean())
    be.close()


@pytest.mark.parametrize("name", names())
def test_engine_agrees_with_the_onnx_int8_variant(bundled: Callable[[str], Bundled],
                                                  name: str, tmp_path: Path) -> None:
    """The same int8 scheme (block-32 weights and activations, short last blocks) computed by
    onnxruntime on the exporter's int8 graph: the two implementations agree far closer than
    either does with fp32."""
    need_native()
    onnx = pytest.importorskip("onnx")
    from edgembed.backends.onnx import OnnxBackend
    from edgembed.export.variants import Variant, build_variant
    from edgembed.model_dir import load_weights

    m = bundled(name)
    path = tmp_path / f"{name}.int8.onnx"
    onnx.save(build_variant(Variant.INT8, m.desc, load_weights(m.desc)), str(path))
    ob = OnnxBackend(path, threads=1)
    be = NativeBackend(m.path, threads=1)
    prompt = m.prompt("query") if "query" in reference(name).sets else ""
    ids = be.tokenize([prompt + t for t in texts()[:-2]])
    skip = m.skip(prompt)
    ours = m.encode(be, ids, skip, batch=32)
    theirs = np.concatenate([ob.encode([s], [skip]) for s in ids])
    if m.desc.normalize:
        theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    assert cosines(ours, theirs).min() >= ONNX_INT8_MIN_COSINE
    be.close()


@pytest.mark.parametrize("name", names())
def test_same_bits_alone_batched_and_in_wasm(bundled: Callable[[str], Bundled],
                                             name: str) -> None:
    """A text's vector has the same bits alone or in any batch, on any kernel set, natively
    and in both wasm builds (wasmtime), long texts (ModernBERT to 8,192 tokens) included."""
    need_native()
    m = bundled(name)
    be = NativeBackend(m.path, threads=2)
    prompt = m.prompt("query") if "query" in reference(name).sets else ""
    ids = be.tokenize([prompt + t for t in texts()])
    skip = m.skip(prompt)
    alone = m.encode(be, ids, skip)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batched = np.zeros_like(alone)
    for j in range(0, len(order), 24):
        idx = order[j:j + 24]
        batched[idx] = m.encode(be, [ids[i] for i in idx], skip, batch=24)
    assert batched.tobytes() == alone.tobytes()
    ref_kernels = NativeBackend(m.path, threads=1, kernels="reference")
    assert m.encode(ref_kernels, ids[:40], skip, batch=8).tobytes() == alone[:40].tobytes()
    ref_kernels.close()
    be.close()
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    if not (ROOT / "build" / "wasm" / "edgembed.wasm").is_file():
        pytest.skip("build/wasm not built (./build.sh wasm)")
    from edgembed.backends.wasm import WasmBackend

    for variant in ("simd128", "relaxed"):
        wasm = WasmBackend(m.path, variant=variant)
        assert wasm.tokenize([prompt + t for t in texts()]) == ids
        assert m.encode(wasm, ids, skip, batch=8).tobytes() == alone.tobytes(), variant
        wasm.close()


@pytest.mark.parametrize("name", ["bert-prompts-mean-noprompt", "xlm-roberta-mean-prompts"])
def test_embedder_on_the_engine(name: str, fresh_home: Path) -> None:
    """``Embedder`` with backend 'native' on a model that pools without its prompt (and one
    that pools with it): embed_query / embed_document give sentence-transformers' vectors."""
    need_native()
    from edgembed import Embedder

    ref = reference(name)
    lo, mean = MEASURED[name]
    e = Embedder.load(str(model_dir(name)), backend="native")
    # the bundle written on this first use is in the loaded manifest as in the saved one
    from edgembed.manifest import Manifest
    saved = Manifest.load(e.model_dir).bundles
    assert saved["int8"]["sha256"] and e.manifest.bundles == saved
    for set_name, embed in (("query", e.embed_query), ("document", e.embed_document)):
        want = ref.sets[set_name]
        cos = cosines(np.asarray(embed(texts()[: len(want)])), want)
        assert cos.min() >= lo and cos.mean() >= mean - 1e-4, set_name


def test_a_bundle_alone_pools_without_its_prompt(bundled: Callable[[str], Bundled]) -> None:
    """``Embedder.from_bundle`` (the wasm engine and its own tokenizer, as in Pyodide): the
    bundle says include_prompt false, and the prompt's tokens are counted by the engine's
    tokenizer as sentence-transformers counts them."""
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    if not (ROOT / "build" / "wasm" / "edgembed.wasm").is_file():
        pytest.skip("build/wasm not built (./build.sh wasm)")
    from edgembed import Embedder

    name = "bert-prompts-mean-noprompt"
    m = bundled(name)
    e = Embedder.from_bundle(m.path)
    prompt = m.prompt("query")
    assert e._tokenizer.prompt_length(prompt) == m.skip(prompt) > 1
    want = reference(name).sets["query"]
    cos = cosines(np.asarray(e.embed(texts()[: len(want)], prefix=prompt)), want)
    assert cos.min() >= MEASURED[name][0]
    ids = [e.ids for e in m.tok.encode_batch([prompt + t for t in texts()[:8]])]
    with_prompt = m.encode(e._backend, ids, 0)  # the prompt pooled too: other vectors
    assert cosines(with_prompt, want[:8]).min() < 0.999


@pytest.mark.parametrize("name", ["xlm-roberta-mean-prompts", "modernbert-mean"])
def test_the_command_line_chain_writes_the_same_bundle(
    bundled: Callable[[str], Bundled], tmp_path: Path, name: str
) -> None:
    """The real `embed` script, as a user runs it on a local model directory: `embed pull DIR`,
    `embed export NAME` (the ONNX variants and their quality), `embed bundle NAME -o FILE`. The
    bundle is byte for byte the one write_bundle writes from the directory (the SentencePiece
    Unigram and byte-level BPE tokenizers' tables included), and so is the cache's own copy."""
    embed = Path(sys.executable).with_name("embed")
    home = tmp_path / "home"
    env = {**os.environ, "EDGEMBED_HOME": str(home)}

    def run(*args: str) -> str:
        done = subprocess.run([str(embed), *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=600)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        return done.stdout

    cached = home / "models" / name
    assert run("pull", "-q", str(model_dir(name))).strip() == str(cached)
    report = run("export", name)
    assert all(f"  {v} " in report for v in ("fp32", "int8")), report
    assert (cached / "model.int8.onnx").is_file()
    out = tmp_path / f"{name}.emb"
    assert f"{out.name}\t" in run("bundle", name, "-o", str(out))
    want = bundled(name).path.read_bytes()
    assert out.read_bytes() == want
    assert (cached / f"{name}.int8.emb").read_bytes() == want
