"""Server benchmark: `embed serve` vs the FastAPI endpoint users write around sentence-transformers.

Both servers answer `POST /v1/embeddings` (OpenAI shape) on 127.0.0.1, each in its own process.
The peer is what users otherwise write: a FastAPI route that calls
`SentenceTransformer.encode(inputs)` for every request (torch CPU, same model files). edgembed runs
the int8 model behind its adaptive batcher with the given latency target.

For each request rate, an async client sends requests with Poisson arrivals for `--seconds`
(1–4 short texts per request, the same seeded sequence for both servers) and records each
request's latency; requests still unanswered 10 s after the phase ends count as timeouts.
Before every phase both servers must be idle: a server still working through a previous phase's
backlog (the peer keeps encoding requests whose clients gave up) would take CPU from the other;
one that stays busy for a minute is restarted.
Printed: throughput (answered requests/s), p50 and p99 latency, share within the target,
429s and timeouts, and edgembed/peer ratios.

With ``--bulk`` it measures something else: one big request must not starve everyone. A bulk
client keeps sending large requests (``--bulk-texts`` long texts each, back to back, two at a
time) while an interactive client sends one short text at a time with Poisson arrivals at the
first of ``--rates``; printed are the small requests' p50/p99 and 429s and the bulk texts/s,
for edgembed as it runs (large requests in slices, docs/server.md) and with slicing off
(``--slice-tokens`` past any request: each request one batch, as before slicing). No peer:
``--st-python`` is not needed::

    .venv/bin/python benchmarks/server.py --bulk --rates 10 --seconds 20 --rounds 3

(``--rounds``: sliced and unsliced alternate, one server at a time, and each row gives the
load average before and after its phase, since the machine may be shared.)

The peer needs an interpreter with torch, sentence-transformers, fastapi and uvicorn, kept out
of the project's venv, e.g.::

    python3 -m venv /tmp/benchvenv
    /tmp/benchvenv/bin/pip install torch==2.13.0     # the CPU build on this machine's disk
    /tmp/benchvenv/bin/pip install sentence-transformers fastapi uvicorn
    .venv/bin/python benchmarks/server.py --st-python /tmp/benchvenv/bin/python
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx2 as httpx

WORDS = ("edge", "model", "vector", "batch", "latency", "server", "token", "query", "the", "a",
         "document", "search", "quantized", "portable", "runtime", "browser", "worker", "of")

PEER = textwrap.dedent('''
    import sys
    import uvicorn
    from fastapi import FastAPI
    from pydantic import BaseModel
    from sentence_transformers import SentenceTransformer
    import torch

    torch.set_num_threads(int(sys.argv[3]))
    model = SentenceTransformer(sys.argv[1], device="cpu")
    app = FastAPI()

    class Req(BaseModel):
        input: str | list[str]
        model: str = "all-minilm-l6-v2"

    @app.post("/v1/embeddings")
    def embeddings(req: Req):
        texts = [req.input] if isinstance(req.input, str) else req.input
        vecs = model.encode(texts, normalize_embeddings=True)
        return {"object": "list", "model": req.model,
                "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                         for i, v in enumerate(vecs)]}

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            r = httpx.post(f"http://127.0.0.1:{port}/v1/embeddings",
                           json={"input": "warm up", "model": "all-minilm-l6-v2"}, timeout=10)
            if r.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"server on port {port} did not become ready")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def wait_idle(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> bool:
    """Wait until ``proc`` uses under 5 % of a core over half a second; False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_seconds(proc.pid)
        time.sleep(0.5)
        if cpu_seconds(proc.pid) - before < 0.025:
            return True
    return False


def requests_for(rate: float, seconds: float, seed: int) -> list[tuple[float, list[str]]]:
    rng = random.Random(seed)
    t = 0.0
    out: list[tuple[float, list[str]]] = []
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return out
        out.append((t, [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 30)))
                        for _ in range(rng.randint(1, 4))]))


async def drive(
    port: int, plan: list[tuple[float, list[str]]], seconds: float
) -> tuple[dict[str, float], list[float]]:
    lat: list[float] = []
    codes: dict[str, int] = {"429": 0, "timeout": 0, "other": 0}
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits,
                                 timeout=seconds + 10) as client:
        start = time.perf_counter()

        async def one(at: float, texts: list[str]) -> None:
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - start)))
            t0 = time.perf_counter()
            try:
                r = await client.post("/v1/embeddings",
                                      json={"input": texts, "model": "all-minilm-l6-v2"})
            except httpx.TimeoutException:
                codes["timeout"] += 1
                return
            if r.status_code == 200:
                lat.append(time.perf_counter() - t0)
            elif r.status_code == 429:
                codes["429"] += 1
            else:
                codes["other"] += 1

        await asyncio.gather(*(one(at, texts) for at, texts in plan))
        wall = time.perf_counter() - start
    lat.sort()

    def q(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return ({"answered_per_s": len(lat) / wall, "p50_ms": q(0.50), "p99_ms": q(0.99),
             "sent": len(plan), **{k: float(v) for k, v in codes.items()}}, lat)


LONG = ("a long document about batching, fairness and latency targets on small machines, "
        "written out so that it fills the model's whole window of tokens ") * 10


async def drive_bulk(port: int, rate: float, seconds: float, bulk_texts: int
                     ) -> dict[str, float]:
    """Small requests at ``rate`` while two bulk clients send ``bulk_texts`` long texts each."""
    plan = requests_for(rate, seconds, seed=7)
    lat: list[float] = []
    refused = failed = bulk_done = 0
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits,
                                 timeout=600) as client:
        start = time.perf_counter()
        stop = start + seconds

        async def bulk(worker: int) -> None:
            nonlocal bulk_done
            n = 0
            while time.perf_counter() < stop:
                texts = [f"{worker}.{n}.{i} {LONG}" for i in range(bulk_texts)]
                r = await client.post("/v1/embeddings", json={"input": texts},
                                      headers={"Authorization": "Bearer bulk-key"})
                if r.status_code == 200 and time.perf_counter() < stop + 60:
                    bulk_done += len(texts)
                n += 1

        async def small(at: float, texts: list[str]) -> None:
            nonlocal refused, failed
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - start)))
            t0 = time.perf_counter()
            r = await client.post("/v1/embeddings", json={"input": texts[:1]},
                                  headers={"Authorization": "Bearer small-key"})
            if r.status_code == 200:
                lat.append(time.perf_counter() - t0)
            elif r.status_code == 429:
                refused += 1
            else:
                failed += 1

        await asyncio.gather(bulk(0), bulk(1), *(small(at, t) for at, t in plan))
        wall = time.perf_counter() - start
    lat.sort()

    def q(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {"sent": len(plan), "answered": len(lat), "p50_ms": q(0.5), "p99_ms": q(0.99),
            "max_ms": lat[-1] * 1000 if lat else float("nan"), "429": refused,
            "other": failed, "bulk_texts_per_s": bulk_done / wall}


def bulk_main(args: argparse.Namespace) -> int:
    rate = float(args.rates.split(",")[0])
    rows: list[tuple[int, str, dict[str, float], float, float]] = []
    load = os.getloadavg()
    for round_ in range(1, args.rounds + 1):
        # Sliced and unsliced alternate, one server at a time, so that both see the same load.
        for name, extra in (("sliced (default)", []), ("slicing off", ["--slice-tokens",
                                                                       "100000000"])):
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, "-m", "edgembed.serve", "--port", str(port), "--threads",
                 str(args.threads), "--no-access-log", "--latency-target",
                 f"{args.latency_target_ms:g}ms", "--api-key", "bulk-key", "--api-key",
                 "small-key", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_ready_keyed(port, proc)
                before = os.getloadavg()[0]
                result = asyncio.run(drive_bulk(port, rate, args.seconds, args.bulk_texts))
                rows.append((round_, name, result, before, os.getloadavg()[0]))
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    print(f"# server benchmark, bulk — {time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, "
          f"{os.cpu_count()} cores, load average {load[0]:.2f} at start, {args.threads} model "
          f"threads, {args.seconds:g} s per phase, {args.rounds} round(s), latency target "
          f"{args.latency_target_ms:g} ms; small requests (1 short text) at {rate:g}/s while 2 "
          f"clients send {args.bulk_texts} texts of 256 tokens each, back to back")
    print("| round | server | load (1 min) | small sent | answered | p50 ms | p99 ms | max ms "
          "| 429 | bulk texts/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for round_, name, r, before, after in rows:
        print(f"| {round_} | {name} | {before:.1f}–{after:.1f} | {r['sent']:.0f} | "
              f"{r['answered']:.0f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | "
              f"{r['max_ms']:.0f} | {r['429']:.0f} | {r['bulk_texts_per_s']:.1f} |")
    return 0


def wait_ready_keyed(port: int, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"server on port {port} did not become ready")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--st-python", help="interpreter with torch + "
                    "sentence-transformers + fastapi + uvicorn (needed without --bulk)")
    ap.add_argument("--bulk", action="store_true",
                    help="small requests' latency while a bulk client sends large requests")
    ap.add_argument("--bulk-texts", type=int, default=128, help="texts per bulk request")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --bulk: rounds of (sliced, unsliced), alternating")
    ap.add_argument("--rates", default="10,25,50,100", help="requests/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--latency-target-ms", type=float, default=100.0)
    args = ap.parse_args()
    if args.bulk:
        return bulk_main(args)
    if not args.st_python:
        ap.error("--st-python is required (or --bulk)")

    from edgembed.sources import pull

    model_dir = pull("all-minilm-l6-v2").source_dir
    with tempfile.TemporaryDirectory() as tmp:
        peer_py = Path(tmp) / "peer.py"
        peer_py.write_text(PEER, encoding="utf-8")
        ports = {"edgembed": free_port(), "sentence-transformers": free_port()}
        commands = {
            "edgembed": [sys.executable, "-m", "edgembed.serve", "--port", str(ports["edgembed"]),
                         "--threads", str(args.threads), "--no-access-log",
                         "--latency-target", f"{args.latency_target_ms:g}ms"],
            "sentence-transformers": [args.st_python, str(peer_py), str(model_dir),
                                      str(ports["sentence-transformers"]), str(args.threads)],
        }

        def start(name: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen(commands[name], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)

        procs = {name: start(name) for name in commands}
        try:
            for name, port in ports.items():
                wait_ready(port, procs[name])
            results: dict[tuple[str, float], tuple[dict[str, float], list[float]]] = {}
            for rate in (float(r) for r in args.rates.split(",")):
                plan = requests_for(rate, args.seconds, seed=int(rate))
                for name, port in ports.items():  # one server at a time, same plan
                    for other, proc in procs.items():  # both idle before the phase starts
                        if not wait_idle(proc):
                            print(f"{other} still busy after a minute: restarting it",
                                  file=sys.stderr)
                            proc.kill()
                            proc.wait()
                            procs[other] = start(other)
                            wait_ready(ports[other], procs[other])
                    results[(name, rate)] = asyncio.run(drive(port, plan, args.seconds))
        finally:
            for p in procs.values():
                p.send_signal(signal.SIGTERM)
            for p in procs.values():
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()

    target = args.latency_target_ms / 1000
    print(f"# server benchmark — {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
          f"{os.cpu_count()} cores, {args.threads} model threads per server, "
          f"{args.seconds:g} s per rate, latency target {args.latency_target_ms:g} ms")
    print("| rate (req/s) | server | answered/s | p50 ms | p99 ms | within target | 429 | "
          "timeouts |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, rate), (r, lat) in results.items():
        within = sum(1 for x in lat if x <= target) / max(1, int(r["sent"]))
        print(f"| {rate:g} | {name} | {r['answered_per_s']:.1f} | {r['p50_ms']:.0f} | "
              f"{r['p99_ms']:.0f} | {within:.0%} | {int(r['429'])} | {int(r['timeout'])} |")
    print("\nedgembed / sentence-transformers:")
    for rate in sorted({rate for _, rate in results}):
        e, s = results[("edgembed", rate)][0], results[("sentence-transformers", rate)][0]
        print(f"  {rate:g} req/s: throughput {e['answered_per_s'] / s['answered_per_s']:.2f}×, "
              f"p99 {s['p99_ms'] / e['p99_ms']:.2f}× lower")
    return 0


if __name__ == "__main__":
    sys.exit(main())
