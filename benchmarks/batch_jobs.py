"""Durable batch jobs: ``embed batch`` against a hand-written sentence-transformers loop, and
``--engine ray`` with 2 actors against one process.

On one generated corpus (``--n`` texts, seeded, mixed lengths: 70 % of 6–20 words, 25 % of
20–60, 5 % of 60–200), each contender runs as a user would run it, in its own process, and is
timed from process start to a complete output file (model load, reading, writing included):

- ``embed batch corpus.jsonl -o out.npy`` (int8, the local engine with the default backend — the
  native C engine when it is built — checkpointing every chunk);
- a hand-written loop over sentence-transformers ``encode`` (torch CPU fp32, batch size 32,
  chunks of 1,024 lines, vectors saved with ``np.save``), run by another Python that has torch
  and sentence-transformers (``--st-python``; they are never edgembed dependencies), skipped
  with a note when there is none;
- ``embed batch corpus.parquet -o out.parquet`` with the local engine (one process, all cores)
  and with ``--engine ray --actors 2 --cpus-per-actor 1`` (a local Ray instance; its start-up
  is included), when Ray is installed.

Quality: min and mean cosine between edgembed's and sentence-transformers' vectors.

    .venv/bin/python benchmarks/batch_jobs.py --n 100000 --st-python /tmp/benchvenv/bin/python

with /tmp/benchvenv made by ``python3 -m venv /tmp/benchvenv && /tmp/benchvenv/bin/pip install
torch==2.13.0 sentence-transformers``. Results go in docs/benchmarks.md ("Batch jobs").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ST_CHILD = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer

src, model_dir, out, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
model = SentenceTransformer(model_dir, device="cpu")
parts = []
chunk = []
with open(src, encoding="utf-8") as f:
    for line in f:
        chunk.append(json.loads(line)["text"])
        if len(chunk) == 1024:
            parts.append(model.encode(chunk, batch_size=32, normalize_embeddings=True))
            chunk = []
if chunk:
    parts.append(model.encode(chunk, batch_size=32, normalize_embeddings=True))
np.save(out, np.concatenate(parts).astype(np.float32))
print(json.dumps({"seconds": time.perf_counter() - start, "threads": torch.get_num_threads(),
                  "torch": torch.__version__, "st": sentence_transformers.__version__}))
"""

_VOCABULARY = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no what "
    "time people year way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government "
    "number night point home water room mother area money story fact month lot right study book "
    "eye job word business issue side kind head house service friend father power hour game line "
    "embedding vector model quantized browser server batch tokenizer search index query document "
    "résumé naïve café 東京 données über straße"
)
WORDS = tuple(_VOCABULARY.split())


def corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r = rng.random()
        lo, hi = (6, 20) if r < 0.70 else (20, 60) if r < 0.95 else (60, 200)
        words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
        out.append(" ".join(words).capitalize() + f". ({i})")
    return out


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} … failed:\n{done.stderr[-3000:]}")
    return seconds, done.stdout


BACKEND = "auto"  # what a user gets: the native engine when it is built, else onnxruntime


def embed_batch(args: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    seconds, out = timed([sys.executable, "-m", "edgembed.jobs", *args, "--json", "-q",
                          "--variant", "int8", "--backend", BACKEND], env)
    return seconds, json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="texts (default: %(default)s)")
    ap.add_argument("--ray-n", type=int, help="texts for the Ray comparison (default: --n)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--st-python", help="a Python with torch and sentence-transformers")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads for the single-process runs (default: all cores)")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--repeat", type=int, default=1,
                    help="interleaved runs of the Ray comparison; the best counts")
    args = ap.parse_args()

    from edgembed.embedder import Embedder

    model_dir = Embedder.load("all-minilm-l6-v2", variant="int8", backend="onnx").model_dir
    print(f"edgembed backend: {Embedder.load('all-minilm-l6-v2', variant='int8').backend} "
          f"(--backend {BACKEND}: the default CPU choice)")
    env = {**os.environ, "RAY_ADDRESS": ""}
    rows: list[tuple[str, int, float, str]] = []
    notes: list[str] = []
    texts = corpus(args.n, args.seed)
    with tempfile.TemporaryDirectory(prefix="edgembed-bench-") as tmp:
        d = Path(tmp)
        src = d / "corpus.jsonl"
        src.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n"
                               for t in texts), encoding="utf-8")
        print(f"corpus: {args.n:,} texts, {src.stat().st_size / 1e6:.1f} MB", file=sys.stderr)

        seconds, summary = embed_batch([str(src), "-o", str(d / "edgembed.npy"),
                                        "--threads", str(args.threads)], env)
        rows.append(("`embed batch` (int8, local engine)", args.n, seconds,
                     f"job's own rate {summary['texts_per_second']:,.0f}/s"))
        print(f"embed batch: {seconds:.1f} s", file=sys.stderr)

        if args.st_python:
            seconds, out = timed([args.st_python, "-c", ST_CHILD, str(src),
                                  str(model_dir / "source"), str(d / "st.npy"),
                                  str(args.threads)], env)
            info = json.loads(out.strip().splitlines()[-1])
            rows.append(("sentence-transformers `encode` loop (torch CPU fp32)", args.n,
                         seconds, f"torch {info['torch']}, {info['threads']} threads"))
            a, b = np.load(d / "edgembed.npy"), np.load(d / "st.npy")
            cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
            notes.append(f"edgembed int8 vs sentence-transformers: min cosine {cos.min():.4f}, "
                         f"mean {cos.mean():.5f} over {len(cos):,} texts; sentence-transformers "
                         f"{info['st']}, torch {info['torch']}")
            print(f"sentence-transformers: {seconds:.1f} s", file=sys.stderr)
        else:
            notes.append("sentence-transformers: skipped (no --st-python)")

        if args.skip_ray or importlib.util.find_spec("ray") is None:
            notes.append("Ray: skipped (--skip-ray, or `pip install 'edgembed[ray]'` missing)")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            n_ray = args.ray_n or args.n
            pq.write_table(pa.table({"text": texts[:n_ray]}), d / "corpus.parquet",
                           row_group_size=8192)
            local: list[float] = []
            ray: list[float] = []
            for _ in range(args.repeat):  # interleaved, so drifting load hits both alike
                seconds, _ = embed_batch([str(d / "corpus.parquet"), "-o",
                                          str(d / "local.parquet"), "--threads",
                                          str(args.threads)], env)
                local.append(seconds)
                seconds, _ = embed_batch([str(d / "corpus.parquet"), "-o",
                                          str(d / "ray.parquet"), "--engine", "ray",
                                          "--actors", "2", "--cpus-per-actor", "1"], env)
                ray.append(seconds)
                print(f"local parquet: {local[-1]:.1f} s, ray: {ray[-1]:.1f} s", file=sys.stderr)
            def runs(times: list[float]) -> str:
                return f"best of {len(times)}: " + ", ".join(f"{x:.1f} s" for x in times)

            rows.append((f"parquet, local engine (1 process, {args.threads} threads)", n_ray,
                         min(local), runs(local)))
            rows.append(("parquet, `--engine ray` (2 actors × 1 thread)", n_ray, min(ray),
                         runs(ray) + "; Ray start-up included"))
            same = np.array_equal(
                np.array(pq.read_table(d / "local.parquet").column("embedding").to_pylist()),
                np.array(pq.read_table(d / "ray.parquet").column("embedding").to_pylist()))
            notes.append(f"Ray output identical to the local engine's: {same}")

    print(f"\n`benchmarks/batch_jobs.py --n {args.n}` — {time.strftime('%Y-%m-%d')}, "
          f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}\n")
    print("| run | texts | seconds | texts/s | note |")
    print("|---|---|---|---|---|")
    for name, n, seconds, note in rows:
        print(f"| {name} | {n:,} | {seconds:.1f} | {n / seconds:,.0f} | {note} |")
    print()
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
