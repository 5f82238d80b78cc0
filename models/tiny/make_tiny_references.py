"""Write sentence-transformers' reference vectors for the tiny test models and for real weights.

For each model this writes one JSON fixture that every test reads: the vectors
sentence-transformers computes (torch, CPU, float32) for the shared corpus
(``tests/fixtures/reference/corpus.json``) plus texts longer than any model's window or
maximum length (``tests/fixtures/reference/long_texts.json``, made from the corpus by
``extra_texts``), each text encoded alone:

- ``default``: ``model.encode(texts)`` (the model's default prompt, if it has one, applies);
- ``query`` / ``document``: the first ``PROMPT_TEXTS`` corpus texts encoded with the prompt
  ``encode_query`` / ``encode_document`` document to use: "query", and the first of
  "document", "passage", "corpus", among the prompts the model's
  ``config_sentence_transformers.json`` saves (none: no prompt; the name is recorded). It is
  passed as ``prompt=``: sentence-transformers 6.2 adds an empty "document" placeholder when it
  loads a model, so its own ``encode_document`` never reaches an e5-style "passage" prompt.

Vectors are what sentence-transformers returns (normalized only by a Normalize module), stored
as little-endian float32, base64. The corpus texts are also encoded in batches of
``BATCH_SIZE``; the script checks that sentence-transformers' own batched vectors agree with
the lone ones (cosine >= 0.99999) and records the minimum. It also checks that
sentence-transformers' token ids equal those of Hugging Face ``tokenizers`` configured as
edgembed configures it (no padding, truncation at max_seq_length, the Lowercase normalizer of
``do_lower_case`` placed first), and records their sha256.

Run from the repository root in the throwaway reference environment (torch 2.13 CPU,
transformers 5.24, sentence-transformers 6.2; nothing is downloaded):

    /work/refvenv/bin/python models/tiny/make_tiny_references.py            # every tiny model
    /work/refvenv/bin/python models/tiny/make_tiny_references.py \\
        --model DIR --name all-mpnet-base-v2 --sha256 78c0197b...            # real weights

Tiny models are read from ``tests/fixtures/models/<name>/`` and written to
``tests/fixtures/reference/tiny/<name>.json``; real ones to
``tests/fixtures/reference/<name>.json``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer
from tokenizers import Tokenizer, normalizers

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "fixtures" / "models"
CORPUS = REPO / "tests" / "fixtures" / "reference" / "corpus.json"
LONG_TEXTS = REPO / "tests" / "fixtures" / "reference" / "long_texts.json"
TINY_OUT = REPO / "tests" / "fixtures" / "reference" / "tiny"
REAL_OUT = REPO / "tests" / "fixtures" / "reference"
BATCH_SIZE = 32
PROMPT_TEXTS = 64
MIN_COSINE_ALONE_VS_BATCHED = 0.99999
SEED = 0


def extra_texts(corpus: list[str]) -> list[str]:
    """Texts longer than every window and maximum length: the corpus' long texts joined
    (thousands of tokens), and that four times over (past ModernBERT's 8,192 positions).
    Written to ``long_texts.json`` beside the corpus for the tests."""
    joined = " ".join(t for t in corpus if len(t) > 300)
    texts = [joined, " ".join([joined] * 4)]
    LONG_TEXTS.write_text(json.dumps(texts, ensure_ascii=False, indent=1) + "\n",
                          encoding="utf-8")
    return texts


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def b64(vectors: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(vectors, dtype="<f4").tobytes()).decode()


def edgembed_tokenizer(model: SentenceTransformer, model_dir: Path) -> Tokenizer:
    """tokenizer.json as edgembed's Python host configures it (python/edgembed/_tokenize.py)."""
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(model.max_seq_length)
    if model[0].do_lower_case:
        current = tok.normalizer
        parts = list(current) if isinstance(current, normalizers.Sequence) else (
            [current] if current is not None else [])
        if not any(isinstance(n, normalizers.Lowercase) for n in parts):
            tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), *parts])
    return tok


def saved_prompts(model_dir: Path) -> dict[str, str]:
    """The prompts config_sentence_transformers.json holds (sentence-transformers 6.2 adds
    empty "query" and "document" placeholders to them when it loads a model)."""
    path = model_dir / "config_sentence_transformers.json"
    if not path.is_file():
        return {}
    return dict(json.loads(path.read_text(encoding="utf-8")).get("prompts") or {})


def st_ids(model: SentenceTransformer, text: str) -> list[int]:
    features = model.preprocess([text])
    ids, mask = features["input_ids"][0].tolist(), features["attention_mask"][0].tolist()
    return [int(i) for i, m in zip(ids, mask, strict=True) if m]


def encode_alone(fn: Any, texts: list[str]) -> np.ndarray:
    return np.stack([np.asarray(fn([t], batch_size=1, convert_to_numpy=True)[0], np.float32)
                     for t in texts])


def reference(model_dir: Path, name: str, command: str) -> dict[str, Any]:
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    corpus = [str(t) for t in json.loads(CORPUS.read_text(encoding="utf-8"))]
    extra = extra_texts(corpus)
    texts = corpus + extra
    model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    model.eval()

    tok = edgembed_tokenizer(model, model_dir)
    ours = [e.ids for e in tok.encode_batch(texts)]
    theirs = [st_ids(model, t) for t in texts]
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    if bad:
        sys.exit(f"{name}: sentence-transformers tokenizes texts {bad[:10]} differently")

    with torch.inference_mode():
        default = encode_alone(model.encode, texts)
        batched = np.asarray(model.encode(corpus, batch_size=BATCH_SIZE), np.float32)
        sets: dict[str, Any] = {"default": {"texts": len(texts), "vectors": b64(default)}}
        saved = saved_prompts(model_dir)
        if any(saved.values()):
            sub = corpus[:PROMPT_TEXTS]
            for set_name, candidates in (("query", ("query",)),
                                         ("document", ("document", "passage", "corpus"))):
                prompt_name = next((n for n in candidates if n in saved), None)
                prompt = saved[prompt_name] if prompt_name else ""

                def encode(batch: list[str], prompt: str = prompt, **kw: Any) -> Any:
                    return model.encode(batch, prompt=prompt, **kw)

                sets[set_name] = {"texts": len(sub), "prompt_name": prompt_name,
                                  "vectors": b64(encode_alone(encode, sub))}
    a, b = default[: len(corpus)].astype(np.float64), batched.astype(np.float64)
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    if cos.min() < MIN_COSINE_ALONE_VS_BATCHED:
        sys.exit(f"{name}: text {int(cos.argmin())} alone vs batched: cosine {cos.min()}")
    ids_digest = hashlib.sha256(json.dumps(ours, separators=(",", ":")).encode()).hexdigest()
    return {
        "model": name,
        "produced_by": {
            "command": command,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "numpy": np.__version__,
            "seed": SEED,
            "batch_size": BATCH_SIZE,
            "alone_vs_batched_min_cosine": float(cos.min()),
        },
        "model_sha256": sha256_of(model_dir / "model.safetensors"),
        "max_seq_length": model.max_seq_length,
        "dim": int(default.shape[1]),
        "prompts": saved_prompts(model_dir),
        "default_prompt_name": model.default_prompt_name,
        "texts": "tests/fixtures/reference/corpus.json, then tests/fixtures/reference/"
                 "long_texts.json",
        "token_counts": [len(i) for i in ours],
        "token_ids_sha256": ids_digest,
        "vectors": "little-endian float32, base64, one row per text, each text encoded alone",
        "sets": sets,
    }


def write(fixture: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size} bytes; dim {fixture['dim']}, "
          f"alone vs batched {fixture['produced_by']['alone_vs_batched_min_cosine']:.9f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, help="a real model directory (default: the tiny ones)")
    ap.add_argument("--name", help="its name (the fixture's file name)")
    ap.add_argument("--sha256", help="the sha256 its model.safetensors must have")
    ap.add_argument("only", nargs="*", help="tiny model names (default: all)")
    args = ap.parse_args()
    script = Path(__file__).resolve().relative_to(REPO)
    if args.model:
        if not (args.name and args.sha256):
            ap.error("--model needs --name and --sha256")
        got = sha256_of(args.model / "model.safetensors")
        if got != args.sha256:
            sys.exit(f"{args.model}/model.safetensors has sha256 {got}, expected {args.sha256}")
        command = shlex.join(["python", str(script), "--model", "DIR", "--name", args.name,
                              "--sha256", args.sha256])
        write(reference(args.model, args.name, command), REAL_OUT / f"{args.name}.json")
        return 0
    for model_dir in sorted(p for p in MODELS.iterdir() if (p / "config.json").is_file()):
        about = json.loads((model_dir / "edgembed_fixture.json").read_text())
        if about.get("task", "embedding") != "embedding":
            continue  # cross-encoders and SPLADE models: make_head_references.py
        if args.only and model_dir.name not in args.only:
            continue
        command = shlex.join(["python", str(script), model_dir.name])
        write(reference(model_dir, model_dir.name, command), TINY_OUT / f"{model_dir.name}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
