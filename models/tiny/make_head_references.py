"""Write sentence-transformers' references for the models with a head: cross-encoder scores and
SPLADE vectors, for the tiny models of ``make_tiny_heads.py`` and for real weights.

**Rerank** (``CrossEncoder``): the pairs of ``PAIRS`` below — (query, document) indices into the
shared texts (``tests/fixtures/reference/corpus.json``, then ``long_texts.json``), sampled from
the corpus with a fixed seed, then pairs with the long texts on either side and both (so that
truncation cuts the query, the document, or both) and an empty document. For each pair, each
scored alone (``batch_size=1``): the raw logits (``activation_fn=Identity``) and the scores
``predict`` returns with the model's own activation. A model whose tokenizer.json truncates
``OnlySecond`` is scored with ``processing_kwargs={"text": {"truncation": "only_second"}}``
(sentence-transformers otherwise always truncates longest-first) and only on the pairs whose
query fits. The script checks that sentence-transformers' token ids (and token types, where the
model has them) are those of Hugging Face ``tokenizers`` encoding the pair as edgembed does
(tokenizer.json's truncation strategy, else longest-first, at max_seq_length), and that its
batched scores (batches of ``BATCH_SIZE``) agree with the lone ones (to 1e-5 of the largest).

**Sparse** (``SparseEncoder``): every text encoded alone; each vector is stored as its nonzero
entries (indices ascending, int32, and float32 values, base64), with the same checks: token ids
against ``tokenizers``, batched against alone. A bare ``*ForMaskedLM`` checkpoint (no
sentence-transformers files, as SPLADE-tiny) is loaded as ``SparseEncoder`` loads one: max
pooling of log(1 + relu).

Run from the repository root in the throwaway reference environment (torch 2.13 CPU,
transformers 5.24, sentence-transformers 6.2; nothing is downloaded):

    /work/refvenv/bin/python models/tiny/make_head_references.py             # every tiny one
    /work/refvenv/bin/python models/tiny/make_head_references.py \\
        --model DIR --name splade-tiny --sha256 96e1dd8d...                  # real weights

Tiny models are read from ``tests/fixtures/models/<name>/`` (those whose
``edgembed_fixture.json`` says task rerank or sparse) and written to
``tests/fixtures/reference/tiny/<name>.json``; real ones to ``tests/fixtures/reference/``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import platform
import random
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
from sentence_transformers import CrossEncoder, SparseEncoder
from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "fixtures" / "models"
CORPUS = REPO / "tests" / "fixtures" / "reference" / "corpus.json"
LONG_TEXTS = REPO / "tests" / "fixtures" / "reference" / "long_texts.json"
TINY_OUT = REPO / "tests" / "fixtures" / "reference" / "tiny"
REAL_OUT = REPO / "tests" / "fixtures" / "reference"
BATCH_SIZE = 16
SEED = 0
N_SAMPLED = 120
AGREEMENT = 1e-5  # |alone - batched| per logit / value, relative to the largest value


def texts() -> list[str]:
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))
    long = json.loads(LONG_TEXTS.read_text(encoding="utf-8"))
    return [str(t) for t in corpus + long]


def pairs_of(all_texts: list[str]) -> list[tuple[int, int]]:
    """(query, document) indices: sampled corpus pairs, then the long texts on either side,
    then an empty document."""
    n_corpus = len(all_texts) - 2
    rng = random.Random(20261201)
    sampled = [(rng.randrange(n_corpus), rng.randrange(n_corpus)) for _ in range(N_SAMPLED)]
    long0, long1 = n_corpus, n_corpus + 1
    short = [i for i in range(n_corpus) if 10 < len(all_texts[i]) < 60][:4]
    edges = [(short[0], long0), (short[1], long1), (long0, short[2]), (long0, long1),
             (short[3], 0)]  # corpus text 0 is the empty string
    return sampled + edges


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def b64(a: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=dtype).tobytes()).decode()


def tokenizer_of(model_dir: Path, max_len: int) -> tuple[Tokenizer, str]:
    """tokenizer.json as edgembed configures it for pairs (python/edgembed/_tokenize.py)."""
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    saved = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    strategy = {"LongestFirst": "longest_first", "OnlyFirst": "only_first",
                "OnlySecond": "only_second"}[
        (saved.get("truncation") or {}).get("strategy", "LongestFirst")]
    tok.no_padding()
    tok.enable_truncation(max_len, strategy=strategy)
    return tok, strategy


def st_features(model: Any, inputs: list[Any], **kw: Any) -> list[tuple[list[int], list[int]]]:
    out = []
    for item in inputs:
        f = model.preprocess([item], **kw)
        mask = f["attention_mask"][0].tolist()
        ids = [int(i) for i, m in zip(f["input_ids"][0].tolist(), mask, strict=True) if m]
        types = ([int(t) for t, m in zip(f["token_type_ids"][0].tolist(), mask, strict=True)
                  if m] if "token_type_ids" in f else [])
        out.append((ids, types))
    return out


def produced_by(command: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {"command": command, "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__, "seed": SEED,
            "batch_size": BATCH_SIZE, **extra}


def rerank_reference(model_dir: Path, name: str, command: str) -> dict[str, Any]:
    all_texts = texts()
    model = CrossEncoder(str(model_dir), device="cpu", local_files_only=True)
    model.eval()
    tok, strategy = tokenizer_of(model_dir, model.max_seq_length)
    kw: dict[str, Any] = {}
    pairs = pairs_of(all_texts)
    if strategy == "only_second":
        kw["processing_kwargs"] = {"text": {"truncation": "only_second"}}
        limit = model.max_seq_length - 3  # room for the document's first token
        plain = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        plain.no_truncation()
        pairs = [(q, d) for q, d in pairs
                 if len(plain.encode(all_texts[q], add_special_tokens=False).ids) < limit]
    items = [(all_texts[q], all_texts[d]) for q, d in pairs]

    encs = tok.encode_batch(items)
    ours = [(e.ids, e.type_ids) for e in encs]
    theirs = st_features(model, items, **kw)
    uses_types = bool(theirs and theirs[0][1])
    for i, ((ids, types), (st_ids, st_types)) in enumerate(zip(ours, theirs, strict=True)):
        if ids != st_ids or (uses_types and types != st_types):
            sys.exit(f"{name}: pair {i} {pairs[i]} tokenizes differently from "
                     "sentence-transformers")

    identity = torch.nn.Identity()
    torch.manual_seed(SEED)
    with torch.inference_mode():
        logits = np.stack([np.atleast_1d(np.asarray(
            model.predict([p], batch_size=1, activation_fn=identity, **kw)[0], np.float32))
            for p in items])
        scores = np.stack([np.atleast_1d(np.asarray(model.predict([p], batch_size=1, **kw)[0],
                                                    np.float32)) for p in items])
        batched = np.asarray(model.predict(items, batch_size=BATCH_SIZE,
                                           activation_fn=identity, **kw), np.float32)
    worst = float(np.max(np.abs(batched.reshape(logits.shape) - logits))
                  / max(float(np.max(np.abs(logits))), 1.0))
    if worst > AGREEMENT:
        sys.exit(f"{name}: alone vs batched logits differ by {worst}")
    return {
        "model": name,
        "task": "rerank",
        "produced_by": produced_by(command, {"alone_vs_batched_max_rel": worst}),
        "model_sha256": sha256_of(model_dir / "model.safetensors"),
        "max_seq_length": model.max_seq_length,
        "num_labels": int(model.num_labels),
        "activation_fn": f"{type(model.activation_fn).__module__}."
                         f"{type(model.activation_fn).__name__}",
        "truncation": strategy,
        "texts": "tests/fixtures/reference/corpus.json, then tests/fixtures/reference/"
                 "long_texts.json",
        "pairs": [list(p) for p in pairs],
        "token_counts": [len(ids) for ids, _ in ours],
        "token_ids_sha256": hashlib.sha256(json.dumps(ours, separators=(",", ":")).encode())
        .hexdigest(),
        "logits": b64(logits, "<f4"),
        "scores": b64(scores, "<f4"),
        "values": "little-endian float32, base64, (pairs, num_labels), each pair scored alone",
    }


def sparse_reference(model_dir: Path, name: str, command: str) -> dict[str, Any]:
    all_texts = texts()
    model = SparseEncoder(str(model_dir), device="cpu", local_files_only=True)
    model.eval()
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(model.max_seq_length)
    ours = [e.ids for e in tok.encode_batch(all_texts)]
    theirs = [ids for ids, _ in st_features(model, all_texts)]
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    if bad:
        sys.exit(f"{name}: sentence-transformers tokenizes texts {bad[:10]} differently")

    def dense(batch: list[str], size: int) -> np.ndarray:
        out = model.encode(batch, batch_size=size, convert_to_tensor=True,
                           convert_to_sparse_tensor=False)
        return np.asarray(out.to_dense().cpu().numpy(), np.float32)

    torch.manual_seed(SEED)
    with torch.inference_mode():
        alone = np.concatenate([dense([t], 1) for t in all_texts])
        batched = dense(all_texts, BATCH_SIZE)
    worst = float(np.max(np.abs(batched - alone)) / max(float(np.max(alone)), 1.0))
    if worst > AGREEMENT:
        sys.exit(f"{name}: alone vs batched vectors differ by {worst}")
    indices, values, counts = [], [], []
    for row in alone:
        nz = np.flatnonzero(row)
        indices.append(nz.astype(np.int32))
        values.append(row[nz])
        counts.append(len(nz))
    pool = model[1]
    return {
        "model": name,
        "task": "sparse",
        "produced_by": produced_by(command, {"alone_vs_batched_max_rel": worst}),
        "model_sha256": sha256_of(model_dir / "model.safetensors"),
        "max_seq_length": model.max_seq_length,
        "dim": int(alone.shape[1]),
        "pooling_strategy": pool.pooling_strategy,
        "activation_function": pool.activation_function,
        "texts": "tests/fixtures/reference/corpus.json, then tests/fixtures/reference/"
                 "long_texts.json",
        "token_counts": [len(i) for i in ours],
        "token_ids_sha256": hashlib.sha256(json.dumps(ours, separators=(",", ":")).encode())
        .hexdigest(),
        "nonzeros": counts,
        "indices": b64(np.concatenate(indices), "<i4"),
        "values": b64(np.concatenate(values), "<f4"),
        "vectors": "each text encoded alone; its nonzero entries in order: nonzeros[i] indices "
                   "(little-endian int32, ascending) and values (float32), base64, "
                   "concatenated over the texts",
    }


def task_of(model_dir: Path) -> str:
    about = model_dir / "edgembed_fixture.json"
    return str(json.loads(about.read_text()).get("task", "embedding")) if about.is_file() else ""


def write(fixture: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size} bytes; "
          f"alone vs batched {fixture['produced_by']['alone_vs_batched_max_rel']:.3g})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, help="a real model directory (default: the tiny ones)")
    ap.add_argument("--name", help="its name (the fixture's file name)")
    ap.add_argument("--task", choices=("rerank", "sparse"), help="with --model")
    ap.add_argument("--sha256", help="the sha256 its model.safetensors must have")
    ap.add_argument("only", nargs="*", help="tiny model names (default: all with a head)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    script = Path(__file__).resolve().relative_to(REPO)
    make = {"rerank": rerank_reference, "sparse": sparse_reference}
    if args.model:
        if not (args.name and args.sha256 and args.task):
            ap.error("--model needs --name, --task and --sha256")
        got = sha256_of(args.model / "model.safetensors")
        if got != args.sha256:
            sys.exit(f"{args.model}/model.safetensors has sha256 {got}, expected {args.sha256}")
        command = shlex.join(["python", str(script), "--model", "DIR", "--name", args.name,
                              "--task", args.task, "--sha256", args.sha256])
        write(make[args.task](args.model, args.name, command), REAL_OUT / f"{args.name}.json")
        return 0
    for model_dir in sorted(p for p in MODELS.iterdir() if task_of(p) in make):
        if args.only and model_dir.name not in args.only:
            continue
        command = shlex.join(["python", str(script), model_dir.name])
        write(make[task_of(model_dir)](model_dir, model_dir.name, command),
              TINY_OUT / f"{model_dir.name}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
