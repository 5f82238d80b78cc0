"""Write the fuzzers' seed inputs into tests/fixtures/fuzz/{bundle,tokenizer}/.

The bundle seed is a real bundle written by edgembed's writer from a tiny random BERT
(C=32, 2 heads, F=64, 1 layer, 40-token vocabulary): small enough for a fuzzer to mutate.
Run from the repository root:  python runtime/tools/fuzz_seeds.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from edgembed.export.bundle import write_bundle

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


def main() -> None:
    (FUZZ / "bundle").mkdir(parents=True, exist_ok=True)
    (FUZZ / "tokenizer").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        write_bundle(
            tiny_hf_dir(Path(tmp)), FUZZ / "bundle" / "tiny.emb", max_length=16, name="tiny"
        )
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
