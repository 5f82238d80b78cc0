"""Write the fuzzers' seed inputs into tests/fixtures/fuzz/{bundle,tokenizer}/.

The bundle seeds are real bundles written by edgembed's writer, small enough for a fuzzer to
mutate: ``tiny.emb`` from a tiny random BERT directory (C=32, 2 heads, F=64, 1 layer, 40-token
vocabulary), and from random canonical weights ``tiny-mpnet.emb`` (relative buckets, positions
skipping padding, no token types, a ragged hidden size of 36, max pooling) and
``tiny-modernbert.emb`` (rotary positions, pre-norm, GLU, no biases, a local layer, a final norm,
Dense modules, prompts left out of the pooling), ``tiny-reranker.emb`` (a classification head:
BERT's pooler and three labels) and ``tiny-splade.emb`` (a masked-LM head, SPLADE sum pooling,
no decoder bias), and ``nan-weights.emb`` (the MPNet seed with NaN and infinity among its
weights). The checksum-skipping fuzz target reaches the
configuration checks and the encoder of each. Run from the repository root:

    .venv/bin/python runtime/tools/fuzz_seeds.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from edgembed.export.bundle import BundleConfig, write_bundle, write_bundle_parts
from edgembed.export.tokenizer_tables import tokenizer_tables

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "tests" / "fixtures" / "fuzz"
VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "quick",
    "brown",
    "fox",
    "##es",
    "##s",
    "a",
    "b",
    "c",
    "##a",
    "##b",
    ".",
    ",",
    "!",
    "?",
    "hello",
    "world",
    "un",
    "##aff",
    "##able",
    "caf",
    "##e",
    "\u4e2d",
    "\u6587",
    "-",
    "'",
    "x",
    "y",
    "z",
    "##x",
    "##y",
    "##z",
    "1",
    "2",
    "3",
]


def tiny_hf_dir(d: Path, seed: int = 0) -> Path:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    c, f, v, p = 32, 64, len(VOCAB), 16
    cfg = {
        "model_type": "bert",
        "hidden_size": c,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": f,
        "vocab_size": v,
        "max_position_embeddings": p,
        "type_vocab_size": 2,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    from tokenizers import BertWordPieceTokenizer

    BertWordPieceTokenizer(str(d / "vocab.txt"), lowercase=True).save(str(d / "tokenizer.json"))

    def n(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.2, size=shape).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": n(v, c),
        "embeddings.position_embeddings.weight": n(p, c),
        "embeddings.token_type_embeddings.weight": n(2, c),
        "embeddings.LayerNorm.weight": 1 + n(c),
        "embeddings.LayerNorm.bias": n(c),
    }
    pre = "encoder.layer.0."
    for name, shape in (
        ("attention.self.query", (c, c)),
        ("attention.self.key", (c, c)),
        ("attention.self.value", (c, c)),
        ("attention.output.dense", (c, c)),
        ("intermediate.dense", (f, c)),
        ("output.dense", (c, f)),
    ):
        w[pre + name + ".weight"] = n(*shape)
        w[pre + name + ".bias"] = n(shape[0])
    for name in ("attention.output.LayerNorm", "output.LayerNorm"):
        w[pre + name + ".weight"] = 1 + n(c)
        w[pre + name + ".bias"] = n(c)
    save_file(w, str(d / "model.safetensors"))
    return d


def canonical_weights(cfg: BundleConfig, dense: tuple[int, ...], seed: int) -> dict:
    """Random weights under the canonical names (docs/architectures.md) for ``cfg``."""
    rng = np.random.default_rng(seed)
    c, f = cfg.dim, cfg.ffn_dim

    def n(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.2, size=shape).astype(np.float32)

    w = {"embeddings.word": n(cfg.vocab_size, c), "embeddings.norm.weight": 1 + n(c),
         "embeddings.norm.bias": n(c)}
    if cfg.position == "absolute":
        w["embeddings.position"] = n(cfg.max_positions, c)
    if cfg.relative_buckets:
        w["encoder.relative_bias"] = n(cfg.relative_buckets, cfg.n_heads)
    if cfg.type_vocab_size:
        w["embeddings.token_type"] = n(cfg.type_vocab_size, c)
    up = 2 * f if cfg.ffn == "glu" else f
    for layer in range(cfg.n_layers):
        p = f"layers.{layer}."
        for name, shape in (("attention.q", (c, c)), ("attention.k", (c, c)),
                            ("attention.v", (c, c)), ("attention.o", (c, c)),
                            ("ffn.up", (up, c)), ("ffn.down", (c, f))):
            w[p + name + ".weight"], w[p + name + ".bias"] = n(*shape), n(shape[0])
        for name in ("attention.norm", "ffn.norm"):
            if not (cfg.norm == "pre" and layer == 0 and name == "attention.norm"):
                w[p + name + ".weight"], w[p + name + ".bias"] = 1 + n(c), n(c)
    if cfg.final_norm:
        w["final_norm.weight"], w["final_norm.bias"] = 1 + n(c), n(c)
    k = c
    for i, e in enumerate(dense):
        w[f"dense.{i}.weight"], w[f"dense.{i}.bias"] = n(e, k), n(e)
        k = e
    if cfg.head == "classifier":
        w["pooler.dense.weight"], w["pooler.dense.bias"] = n(c, c), n(c)
        w["classifier.out.weight"], w["classifier.out.bias"] = n(cfg.n_labels, c), n(cfg.n_labels)
    if cfg.head == "mlm":
        w["mlm.transform.weight"], w["mlm.transform.bias"] = n(c, c), n(c)
        w["mlm.norm.weight"], w["mlm.norm.bias"] = 1 + n(c), n(c)
        w["mlm.decoder.weight"] = n(cfg.vocab_size, c)
    return w


FEATURE_SEEDS = {
    "tiny-mpnet.emb": (BundleConfig(
        name="tiny-mpnet", family="mpnet", dim=36, n_layers=1, n_heads=3, ffn_dim=40,
        vocab_size=len(VOCAB), max_length=16, max_positions=18, position_offset=2,
        position_pad_id=1, relative_buckets=32, type_vocab_size=0, activation="gelu_tanh",
        pooling="max"), ()),
    "tiny-modernbert.emb": (BundleConfig(
        name="tiny-modernbert", family="modernbert", dim=32, n_layers=2, n_heads=2, ffn_dim=40,
        vocab_size=len(VOCAB), max_length=16, position="rotary", type_vocab_size=0,
        norm="pre", norm_bias=False, attention_bias=False, ffn_bias=False, final_norm=True,
        ffn="glu", layer_attention="gl", local_window=3, pooling="mean", include_prompt=False,
        dense_activations=("tanh", "identity"), normalize=True), (24, 8)),
    "tiny-reranker.emb": (BundleConfig(
        name="tiny-reranker", family="bert", dim=32, n_layers=1, n_heads=2, ffn_dim=40,
        vocab_size=len(VOCAB), max_length=16, max_positions=16, pooling="cls",
        head="classifier", n_labels=3, classifier_activation="tanh",
        score_activation="sigmoid"), ()),
    "tiny-splade.emb": (BundleConfig(
        name="tiny-splade", family="bert", dim=36, n_layers=1, n_heads=3, ffn_dim=40,
        vocab_size=len(VOCAB), max_length=16, max_positions=16, pooling="cls", head="mlm",
        mlm_activation="gelu_tanh", sparse_pooling="sum", sparse_activation="log1p_relu"), ()),
}


def main() -> None:
    (FUZZ / "bundle").mkdir(parents=True, exist_ok=True)
    (FUZZ / "tokenizer").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        hf = tiny_hf_dir(Path(tmp))
        write_bundle(hf, FUZZ / "bundle" / "tiny.emb", max_length=16, name="tiny")
        tok_meta, tok_tensors, _ = tokenizer_tables(hf)
        for file, (cfg, dense) in FEATURE_SEEDS.items():
            write_bundle_parts(FUZZ / "bundle" / file, cfg, canonical_weights(cfg, dense, 1),
                               (tok_meta, tok_tensors))
        # NaN and infinity among the weights (the case of crash-650254ae…, a format-1 file):
        # every step must stay defined behaviour, whatever the values
        cfg, dense = FEATURE_SEEDS["tiny-mpnet.emb"]
        w = canonical_weights(cfg, dense, 2)
        w["embeddings.position"][3, :5] = np.nan
        w["layers.0.ffn.up.bias"][:3] = [np.inf, -np.inf, np.nan]
        w["encoder.relative_bias"][0, 0] = np.nan
        write_bundle_parts(FUZZ / "bundle" / "nan-weights.emb", cfg, w, (tok_meta, tok_tensors))
    texts = [
        "\x07The quick brown foxes!",
        "\x0fcaf\u00e9 \u4e2d\u6587 unaffable",
        "\xffhello\x00world\u200b",
        "\x01" + "a" * 150,
        "\x3fx-y'z 1,2,3 ?!",
        "\x8f\U0001f600 e\u0301 \u0130stanbul",
    ]
    for i, t in enumerate(texts):
        (FUZZ / "tokenizer" / f"seed{i}.txt").write_bytes(t.encode("utf-8", errors="surrogatepass"))
    (FUZZ / "tokenizer" / "invalid_utf8.bin").write_bytes(
        b"\x07\xc3\x28\xe2\x82\xf0\x9f\x98 \xed\xa0\x80 \xff"
    )


if __name__ == "__main__":
    main()
