"""Measure how long the real embedder takes per batch, and store it as the simulator's fixture.

    python benchmarks/measure_service_time.py                 # all-minilm-l6-v2, int8
    python benchmarks/measure_service_time.py --repeats 7 --max-batch-tokens 8192

Times ``Embedder.embed`` on batches over a grid of text lengths and batch sizes (uniform
batches, and mixed ones of short and long texts to expose the cost of padding), fits the batch
cost model ``fixed_ms + ms_per_ktoken * tokens/1000 + ms_per_kpadding * padding/1000`` by least
squares, keeps every sample's ratio to the fit as the noise sequence, and writes
``tests/fixtures/batching/service_time_minilm_int8.json``. ``benchmarks/batching.py`` and the
simulator (``load_service_fixture``) replay batches with it. Run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "fixtures" / "batching" / "service_time_minilm_int8.json"
LENGTHS = (8, 16, 32, 64, 128, 256)
SIZES = (1, 2, 4, 8, 16, 32, 64)
WORDS = [
    "time",
    "people",
    "year",
    "way",
    "day",
    "thing",
    "world",
    "life",
    "hand",
    "part",
    "child",
    "eye",
    "woman",
    "place",
    "work",
    "week",
    "case",
    "point",
    "number",
    "group",
    "problem",
    "fact",
    "river",
    "music",
    "letter",
    "garden",
]


def text_of(n_tokens: int, count: Any, salt: int) -> str:
    """A text of ``n_tokens`` tokens (with [CLS] and [SEP]) by the embedder's own count."""
    words = [WORDS[(salt + i) % len(WORDS)] for i in range(max(1, n_tokens - 2))]
    text = " ".join(words)
    for _ in range(8):  # common words are one token each; adjust if not
        got = count([text])[0]
        if got == n_tokens:
            break
        if got > n_tokens:
            words = words[: max(1, len(words) - (got - n_tokens))]
        else:
            words = words + [
                WORDS[(salt + len(words) + i) % len(WORDS)] for i in range(n_tokens - got)
            ]
        text = " ".join(words)
    return text


def compositions(max_tokens: int) -> list[list[int]]:
    """Token lengths of each batch to time: uniform batches, then short+long mixes."""
    out = [[length] * n for length in LENGTHS for n in SIZES if length * n <= max_tokens]
    for n in (4, 16, 32):
        for long in (128, 256):
            batch = [16] * (n - n // 4) + [long] * (n // 4)
            if sum(batch) <= max_tokens:
                out.append(batch)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--variant", default="int8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-batch-tokens", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    from edgembed import Embedder

    e = Embedder.load(args.model, variant=args.variant)
    count = getattr(e, "count_tokens", None)
    if count is None:

        def count(texts: list[str]) -> list[int]:
            return [len(t.split()) + 2 for t in texts]

    batches = [
        [text_of(n, count, salt=i * 7 + j) for j, n in enumerate(lengths)]
        for i, lengths in enumerate(compositions(args.max_batch_tokens))
    ]
    for texts in batches[:: max(1, len(batches) // 6)]:  # warm up caches and thread pools
        e.embed(texts)

    samples: list[dict[str, Any]] = []
    started = time.time()
    for texts in batches:
        lengths = count(texts)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            e.embed(texts)
            times.append((time.perf_counter() - t0) * 1000.0)
        tokens = int(sum(lengths))
        samples.append(
            {
                "n_texts": len(texts),
                "max_len": int(max(lengths)),
                "tokens": tokens,
                "padding": int(len(texts) * max(lengths) - tokens),
                "service_ms": [round(t, 4) for t in times],
            }
        )
        print(
            f"{len(texts):3d} texts, {tokens:5d} tokens: median "
            f"{sorted(times)[len(times) // 2]:8.2f} ms",
            file=sys.stderr,
        )

    x = np.array(
        [
            [1.0, s["tokens"] / 1000.0, s["padding"] / 1000.0]
            for s in samples
            for _ in s["service_ms"]
        ]
    )
    y = np.array([t for s in samples for t in s["service_ms"]])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    coef = np.maximum(coef, 0.0)
    ratios = (y / np.maximum(x @ coef, 1e-3)).tolist()
    doc = {
        "format": "edgembed-service-time",
        "version": 1,
        "model": args.model,
        "variant": args.variant,
        "backend": str(getattr(e, "backend", "")),
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.processor()}",
        "python": platform.python_version(),
        "repeats": args.repeats,
        "seconds": round(time.time() - started, 1),
        "generator": "benchmarks/measure_service_time.py",
        "units": "service_ms in milliseconds; tokens and padding in tokens",
        "fit": {
            "fixed_ms": float(coef[0]),
            "ms_per_ktoken": float(coef[1]),
            "ms_per_kpadding": float(coef[2]),
        },
        "noise": [round(r, 4) for r in ratios],
        "samples": samples,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    fit = doc["fit"]
    print(
        f"wrote {args.out}: {fit['fixed_ms']:.2f} ms + {fit['ms_per_ktoken']:.1f} ms/1k tokens "
        f"+ {fit['ms_per_kpadding']:.1f} ms/1k padding",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
