"""A bounded load test on loopback: Poisson arrivals against the int8 model.

The server runs as ``python -m edgembed.serve`` in its own process (so the load generator does
not compete with it for one interpreter). Two phases, about six seconds in all: a steady rate
the machine can serve, then a burst far over capacity. Every request must get an answer (no
lost requests, no client timeouts); the overload must produce 429s rather than waiting; the
queue and the server's memory stay bounded.
SLO attainment and latency percentiles are printed (``pytest -s``) and sanity-checked only, as
a shared CI machine's speed varies.
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")
httpx = pytest.importorskip("httpx2")

MAX_QUEUE = 64
WORDS = ("edge", "model", "vector", "batch", "latency", "server", "token", "query", "the", "a",
         "document", "search", "quantized", "portable", "runtime", "browser", "worker")


@dataclass
class Outcome:
    status: int | None
    seconds: float
    error: str = ""


@dataclass
class Server:
    url: str
    pid: int


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    env = {k: v for k, v in os.environ.items() if k != "EDGEMBED_API_KEYS"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgembed.serve", "--port", "0", "--latency-target", "100ms",
         "--max-queue", str(MAX_QUEUE), "--log-level", "warning", "--no-access-log"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )
    assert proc.stderr is not None
    try:
        url = ""
        for _ in range(50):  # the banner is among the first lines
            line = proc.stderr.readline()
            if not line or "edgembed: serving" in line:
                url = line.split(" at ", 1)[-1].split(";", 1)[0] if line else ""
                break
        assert url.startswith("http://127.0.0.1:"), "the server did not start"
        yield Server(url, proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 40)))


async def poisson_run(url: str, rate: float, seconds: float, texts_per_request: int,
                      seed: int) -> tuple[list[Outcome], int]:
    """Open-loop Poisson arrivals at ``rate`` per second for ``seconds``; peak queue depth."""
    rng = random.Random(seed)
    outcomes: list[Outcome] = []
    peak_queue = 0

    async def one(client: Any, body: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        try:
            r = await client.post("/embed", json=body)
            outcomes.append(Outcome(r.status_code, time.perf_counter() - t0))
        except Exception as exc:  # a lost request: recorded, then asserted on
            outcomes.append(Outcome(None, time.perf_counter() - t0, repr(exc)))

    async def watch(client: Any, stop: asyncio.Event) -> None:
        nonlocal peak_queue
        while not stop.is_set():
            text = (await client.get("/metrics")).text
            for line in text.splitlines():
                if line.startswith("edgembed_batcher_queue_depth "):
                    peak_queue = max(peak_queue, int(float(line.split()[1])))
            await asyncio.sleep(0.1)

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=20, limits=limits) as client:
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch(client, stop))
        tasks = []
        end = time.perf_counter() + seconds
        next_at = time.perf_counter()
        while next_at < end:
            await asyncio.sleep(max(next_at - time.perf_counter(), 0.0))
            body = {"inputs": [sentence(rng) for _ in range(texts_per_request)]}
            tasks.append(asyncio.create_task(one(client, body)))
            next_at += rng.expovariate(rate)
        await asyncio.gather(*tasks)
        stop.set()
        await watcher
    return outcomes, peak_queue


def metric(url: str, name: str) -> float:
    with httpx.Client(base_url=url, timeout=10) as c:
        for line in c.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def report(label: str, outcomes: list[Outcome]) -> dict[str, float]:
    ok = [o.seconds * 1000 for o in outcomes if o.status == 200]
    stats = {
        "requests": len(outcomes),
        "ok": len(ok),
        "429": sum(o.status == 429 for o in outcomes),
        "p50_ms": float(np.percentile(ok, 50)) if ok else 0.0,
        "p99_ms": float(np.percentile(ok, 99)) if ok else 0.0,
    }
    print(f"{label}: " + ", ".join(f"{k}={v:.0f}" for k, v in stats.items()))
    return stats


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def test_poisson_load_then_overload(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as c:  # warm up: first calls are slow
        for _ in range(3):
            c.post("/embed", json={"inputs": ["warm up"] * 8}).raise_for_status()
    rss_before = rss_mib(server.pid)

    steady, steady_peak = asyncio.run(poisson_run(server.url, 20.0, 3.0, 2, seed=1))
    s = report("steady 20 req/s x 2 texts", steady)
    attainment = metric(server.url, "edgembed_batcher_slo_attainment_ratio")
    print(f"SLO attainment (p99 within 100 ms), recent window: {attainment:.3f}")
    assert all(o.error == "" for o in steady), [o.error for o in steady if o.error][:3]
    assert s["ok"] + s["429"] == s["requests"]  # every request answered, none lost
    assert s["ok"] > 0 and 0.0 <= attainment <= 1.0

    burst, burst_peak = asyncio.run(poisson_run(server.url, 150.0, 2.0, 16, seed=2))
    b = report("overload 150 req/s x 16 texts", burst)
    assert all(o.error == "" for o in burst), [o.error for o in burst if o.error][:3]
    assert b["ok"] + b["429"] == b["requests"]  # every request answered, none lost
    assert b["429"] > 0  # overload is refused ...
    refused = [o.seconds for o in burst if o.status == 429]
    print(f"429 answered in p50 {np.percentile(refused, 50) * 1000:.0f} ms, "
          f"p99 {np.percentile(refused, 99) * 1000:.0f} ms")
    served = [o.seconds for o in burst if o.status == 200] or [float("inf")]
    # ... at once, not after waiting in the queue: faster than the requests that were served
    # (absolute times depend on the machine; on an idle 2-core one the median is ~40 ms).
    assert float(np.median(refused)) < float(np.median(served))
    assert max(o.seconds for o in burst) < 10  # and nothing waits until a client timeout

    assert max(steady_peak, burst_peak) <= MAX_QUEUE
    assert metric(server.url, "edgembed_batcher_queue_depth") == 0
    assert rss_mib(server.pid) - rss_before < 300  # memory stays bounded under overload
