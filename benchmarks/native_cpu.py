"""Native CPU backend: the engine's int8 kernels against onnxruntime and sentence-transformers.

One run, the same texts, 1 and 2 threads for every engine:

- native int8: ``edgembed.backends.native`` (libedgembed.so, this CPU's kernel set);
- onnxruntime fp32: edgembed's fp32 export;
- onnxruntime MatMulNBits 8-bit: edgembed's int8 export (block 32, ``accuracy_level=4``: the
  same block-wise int8 scheme as the engine);
- onnxruntime ``quantize_dynamic`` int8 (per-channel weights, per-tensor dynamic activations)
  of the fp32 export, made as benchmarks/quantization.py makes it;
- sentence-transformers on torch (fp32) in another Python (``--st-python``, default
  /tmp/refvenv/bin/python when it exists; torch is never a dependency of edgembed).

End to end means texts in, normalized vectors out, through the Embedder's pipeline for every
edgembed engine: Hugging Face ``tokenizers`` (truncation at 256), longest first, token-budget
batches (``edgembed.embedder.plan_batches``, 2,048 padded tokens, at most 128 texts), encode, L2
normalization. sentence-transformers runs its own ``encode(batch_size=32)``.

The corpus is the mixed-length reference corpus (262 texts, 2 to 256 tokens). Every engine runs once
to warm up; then ``--rounds`` rounds run every (engine, threads) in turn, with a short pause between
runs (onnxruntime's threads spin for a while after each run), so that a busy moment on a shared
machine hits all alike; the median counts. Round r rotates the list of (engine, threads) entries of
the corpus loop left by r places (it starts with the (r mod N)-th of the N entries), and likewise
the engines timed on each grid cell and on each workload; the cells and the workloads themselves run
in a fixed order. So no engine is always the one timed first after the pause, and the output says
so; every ratio printed compares medians of the same run. Columns: tokens/s ([CLS] and [SEP]
included), speed against onnxruntime fp32 at the same thread count, G-MAC/s (10.6 M
multiply-accumulates per token in the linear layers + 4,608·n² per text of n tokens) and its share
of the CPU's int8 peak, min/mean cosine against the sentence-transformers fixture, and the min
cosine between texts embedded alone and in their batches (1.0: batch-invariant).

The int8 peak is measured in the same run: ``benchmarks/int8_peak.c`` (built here with ``cc``
into build/bench/) runs twelve independent ``vpdpbusd`` chains (zmm with AVX-512 VNNI, ymm with
AVX-VNNI only) on as many threads as the row, 0.3 s at the start of every round of the corpus
and of the workloads; a share is against the median of that thread count's measurements, per
core × threads. On a shared VM the peak moves with the machine (on the VM of docs/benchmarks.md
it read 168 G-MAC/s one morning and 368–458 that afternoon), so a constant measured once would
make the share say as much about the moment as about the engine. ``--peak G`` uses G G-MAC/s
per core instead (no measuring); without VNNI and without ``--peak`` the share columns print
"–". On a CPU with AMX the line that prints the peak also gives ``tdpbssd``'s, at K = 32 (the
engine's block) and 64, measured once, for reference: the shares stay against the VNNI peak.

``--model`` takes any catalog model the engine runs (all-mpnet-base-v2: 768 dimensions, 12
layers, truncation at 384): the multiply-accumulates follow from its config.json, the texts are
the same corpus, and for a model without a committed fixture the quality columns compare with
sentence-transformers' vectors of this run (so they need ``--st-python``).

Two native rows: the bundle as exported (fp32 attention, the default) and the same model
written with ``attention="int8"`` (QKᵀ and P·V as int8 products, docs/quantization.md).
``--workloads`` adds a table for the native rows and onnxruntime fp32 on three workloads:
*mixed* (the corpus as above), *256 tokens* (32 texts of exactly 256 tokens, cut from the
corpus' ids laid end to end, in calls of 8) and *batch 1* (the corpus' first 64 texts one at a
time). ``--quick`` leaves out sentence-transformers, the two int8 onnxruntime models and the
scaling grid.

CTranslate2 int8 (PyPI ``ctranslate2``, never an edgembed dependency) is one more engine when it
is importable here (``.venv/bin/pip install ctranslate2``; the row is skipped with a message
otherwise): ``ctranslate2.Encoder(compute_type="int8", intra_threads=threads, inter_threads=1)``
gets the same token ids as the native engine (token types 0), and its last hidden state is
mean-pooled over each text's tokens and normalized like every other engine's. Its model is
converted once from the model's local source directory (the one ``edgembed.sources.pull``
returns; nothing is downloaded) into ``<EDGEMBED_HOME>/bench/ctranslate2/<model>-int8``
(``--ct2-dir``), by CTranslate2's converter in a throwaway environment that has torch and
transformers (``--ct2-converter``, default: ``ct2-transformers-converter`` beside
``--st-python``). The script runs it when the directory is missing; by hand it is

    /work/refvenv/bin/pip install ctranslate2    # into the throwaway environment, once
    /work/refvenv/bin/ct2-transformers-converter --quantization int8 \
        --model ~/.cache/edgembed/models/all-minilm-l6-v2/source \
        --output_dir ~/.cache/edgembed/bench/ctranslate2/all-minilm-l6-v2-int8

CTranslate2 4.8 has no converter for MPNet (``MPNetConfig``), so with ``--model
all-mpnet-base-v2`` its rows are skipped with the converter's message.

After the corpus table, a scaling grid (``--grid-batches`` × ``--grid-lengths``, default 1, 8,
32, 128 texts × 16, 64, 256 tokens, lengths capped at the model's maximum) times the native engine
and CTranslate2 (when it runs) on equal-length sequences cut from the corpus's token ids ([CLS]
… [SEP], no padding), each cell at least ``--grid-tokens`` tokens per timing (8,192: repeated
calls of the cell's batch), interleaved in the same rounds as the corpus; it prints tokens/s,
the share of the int8 peak and native/CTranslate2 per cell and thread count. The native engine
takes a batch as it does in the Embedder: calls of at most 2,048 tokens (``max_tokens``).

    .venv/bin/python benchmarks/native_cpu.py [--model NAME] [--rounds 5] [--st-python PY]
                                              [--peak G] [--ct2-dir DIR] [--ct2-converter EXE]
                                              [--grid-batches 1,8,32,128] [--grid-lengths 16,64,256]
                                              [--grid-tokens 8192] [--no-grid] [--no-onnx]
                                              [--workloads] [--quick] [--baseline-lib SO]
                                              [--baseline-kernels NAME]

``--baseline-lib`` times another build of the engine (``NativeBackend(library=...)``, e.g. the
previous commit's ``build/native/libedgembed.so``) on the same bundle as one more native row, in
the corpus, the grid and the workloads, and prints the corpus ratio: on a shared machine, a
change is measured against what it replaces under the same load. ``--baseline-kernels NAME``
runs that row with another kernel set (``NativeBackend(kernels=NAME)``; with or without
``--baseline-lib``), e.g. ``avx512-vnni`` against ``amx`` on a CPU with AMX.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from st_child import SentenceTransformersChild

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "fixtures" / "reference" / "all-minilm-l6-v2.json"


def mac_counts(config: dict[str, int]) -> tuple[int, int]:
    """Multiply-accumulates of a BERT-shaped encoder: per token in the linear layers
    (L × (QKV + out + FFN up + down)), and per text × n² in attention (scores, weighted sum)."""
    c, f, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    return layers * (4 * c * c + 2 * c * f), layers * 2 * c

Vectors = npt.NDArray[np.float32]
CT2 = "CTranslate2 int8"
BASELINE = "native int8, baseline"
ROTATION = ("engine order rotates each round: round r starts with the (r mod N)-th engine "
            "of N, so none is always timed first; every ratio compares medians of this run")
T = TypeVar("T")


def pipeline(encode: Callable[[list[list[int]]], Vectors],
             tokenize: Callable[[], list[list[int]]], dim: int) -> Vectors:
    """The Embedder's path: tokenize, longest first in token-budget batches, encode, normalize."""
    from edgembed.backends.choice import CPU_BATCH_TOKENS
    from edgembed.embedder import plan_batches

    ids = tokenize()
    out = np.zeros((len(ids), dim), dtype=np.float32)
    for batch in plan_batches([len(s) for s in ids], CPU_BATCH_TOKENS, 128):
        out[batch] = encode([ids[i] for i in batch])
    normalized: Vectors = out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True),
                                           np.float32(1e-12))
    return normalized


def cosines(a: Vectors, b: Vectors) -> npt.NDArray[np.float64]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cos: npt.NDArray[np.float64] = (a64 * b64).sum(1) / np.linalg.norm(a64, axis=1) \
        / np.linalg.norm(b64, axis=1)
    return cos


def alone_vs_batch(encode: Callable[[list[list[int]]], Vectors], ids: list[list[int]]) -> float:
    """Min cosine between texts embedded alone and inside one length-sorted batch."""
    picks = sorted(ids[:48], key=len, reverse=True)
    together = encode(picks)
    alone = np.concatenate([encode([s]) for s in picks])
    return float(cosines(alone, together).min())


def ct2_encoder(model_dir: Path, threads: int) -> Callable[[list[list[int]]], Vectors]:
    """CTranslate2's encoder on token ids, int8, ``threads`` intra-op threads; mean pooling."""
    ctranslate2: Any = importlib.import_module("ctranslate2")
    enc = ctranslate2.Encoder(str(model_dir), device="cpu", compute_type="int8",
                              inter_threads=1, intra_threads=threads)

    def encode(batch: list[list[int]]) -> Vectors:
        hidden = np.asarray(enc.forward_batch(batch).last_hidden_state, dtype=np.float32)
        lengths = np.array([len(s) for s in batch], dtype=np.float32)
        mask = np.arange(hidden.shape[1])[None, :] < lengths[:, None]
        pooled: Vectors = (hidden * mask[..., None]).sum(1) / lengths[:, None]
        return pooled

    return encode


def ct2_model(name: str, source: Path, pooling: str, target: Path | None,
              converter: Path | None) -> tuple[Path | None, str]:
    """The converted CTranslate2 model (converting it once), or None and why not."""
    try:
        ctranslate2: Any = importlib.import_module("ctranslate2")
    except ImportError:
        return None, ("ctranslate2 is not installed in this Python (it is not an edgembed "
                      f"dependency): {sys.executable} -m pip install ctranslate2")
    if pooling != "mean":
        return None, f"{name} pools with {pooling!r}; the CTranslate2 rows mean-pool only"
    from edgembed.sources import home

    out = target or home() / "bench" / "ctranslate2" / f"{name}-int8"
    if (out / "model.bin").exists():
        return out, f"ctranslate2 {ctranslate2.__version__}, {out}"
    if converter is None or not converter.exists():
        return None, (f"no converted model in {out} and no converter: install ctranslate2 into "
                      "a Python with torch and transformers and run `ct2-transformers-converter "
                      f"--quantization int8 --model {source} --output_dir {out}` (or give "
                      "--ct2-converter)")
    print(f"# converting {source} for CTranslate2 into {out} …", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(converter), "--quantization", "int8", "--model", str(source),
                           "--output_dir", str(out)], capture_output=True, text=True)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        return None, f"{converter.name} failed: {lines[-1] if lines else done.returncode}"
    return out, f"ctranslate2 {ctranslate2.__version__}, converted now into {out}"


def grid_batches(ids: list[list[int]], batch: int, length: int,
                 tokens: int) -> list[list[list[int]]]:
    """Calls of ``batch`` sequences of exactly ``length`` tokens ([CLS] … [SEP]) cut from the
    corpus's token ids, enough calls for at least ``tokens`` tokens."""
    cls, sep = ids[0][0], ids[0][-1]
    stream = [t for s in ids for t in s[1:-1]]
    calls, at = [], 0
    for _ in range(max(1, math.ceil(tokens / (batch * length)))):
        call = []
        for _ in range(batch):
            if at + length - 2 > len(stream):
                at = 0
            call.append([cls, *stream[at:at + length - 2], sep])
            at += length - 2
        calls.append(call)
    return calls


class Peak:
    """This CPU's int8 peak per core, measured in the run (``benchmarks/int8_peak.c``), or the
    ``--peak`` constant. ``share(gmacs, threads)`` is the fraction of ``threads`` cores' peak."""

    def __init__(self, fixed: float | None, threads: list[int]) -> None:
        self.fixed, self.threads = fixed, threads
        self.samples: dict[int, list[float]] = {t: [] for t in threads}
        self.exe: Path | None = None
        self.kind = self.amx = ""
        self.said = f"--peak {fixed} G-MAC/s per core" if fixed else ""
        if fixed:
            return
        out = REPO / "build" / "bench" / "int8_peak"
        out.parent.mkdir(parents=True, exist_ok=True)
        built = subprocess.run([os.environ.get("CC", "cc"), "-O2", "-pthread", "-o", str(out),
                                str(REPO / "benchmarks" / "int8_peak.c")],
                               capture_output=True, text=True)
        which = (subprocess.run([str(out), "which"], capture_output=True, text=True)
                 if built.returncode == 0 else None)
        if which is None or which.returncode != 0:
            why = built.stderr.strip().splitlines()[-1:] if which is None else ["no VNNI"]
            self.said = f"not measured ({why[0] if why else 'cc failed'}); give --peak"
            return
        self.exe, self.kind = out, which.stdout.strip()
        amx = [self.run(kind, 1, 0.3) for kind in ("amx32", "amx64")]
        self.amx = "" if None in amx else (f"; AMX tdpbssd {amx[0]:,.0f} G-MAC/s at K = 32, "
                                           f"{amx[1]:,.0f} at K = 64 (1 thread, once)")

    def run(self, kind: str, threads: int, seconds: float) -> float | None:
        assert self.exe is not None
        done = subprocess.run([str(self.exe), kind, str(threads), str(seconds)],
                              capture_output=True, text=True)
        return float(done.stdout.split()[-1]) if done.returncode == 0 else None

    def measure(self) -> None:
        """One sample per thread count (0.3 s each): called at the start of every round."""
        if self.exe is None:
            return
        for t in self.threads:
            g = self.run("vnni", t, 0.3)
            if g is not None:
                self.samples[t].append(g)

    def per_core(self, threads: int) -> float | None:
        if self.fixed:
            return self.fixed
        got = self.samples.get(threads)
        return statistics.median(got) if got else None

    def share(self, gmacs: float, threads: int) -> str:
        p = self.per_core(threads)
        return "–" if p is None else f"{gmacs / (p * threads):.0%}"

    def describe(self) -> str:
        if self.exe is None:
            return f"int8 peak: {self.said}"
        per = ", ".join(
            f"{statistics.median(v):.0f} G-MAC/s per core on {t} thread{'s' if t > 1 else ''} "
            f"({min(v):.0f}–{max(v):.0f}, {len(v)} samples)"
            for t, v in self.samples.items() if v)
        return f"int8 peak, measured in the run ({self.kind} vpdpbusd): {per}{self.amx}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--st-python", default="/tmp/refvenv/bin/python" if Path(
        "/tmp/refvenv/bin/python").exists() else "", help="a Python with sentence-transformers")
    ap.add_argument("--peak", type=float, default=None,
                    help="int8 G-MAC/s of one core for the share columns (default: measured "
                         "in every round by benchmarks/int8_peak.c)")
    ap.add_argument("--ct2-dir", type=Path, default=None,
                    help="the converted CTranslate2 model (default "
                         "<EDGEMBED_HOME>/bench/ctranslate2/<model>-int8)")
    ap.add_argument("--ct2-converter", type=Path, default=None,
                    help="ct2-transformers-converter to make it when it is missing (default: "
                         "the one beside --st-python)")
    ap.add_argument("--grid-batches", default="1,8,32,128", help="texts per call in the grid")
    ap.add_argument("--grid-lengths", default="16,64,256", help="tokens per text in the grid")
    ap.add_argument("--grid-tokens", type=int, default=8192,
                    help="at least this many tokens per grid cell and timing")
    ap.add_argument("--no-grid", action="store_true", help="the corpus table only")
    ap.add_argument("--no-onnx", action="store_true",
                    help="leave out the onnxruntime engines (the native/CTranslate2 comparison "
                         "in less time; the ratio column is then against the native engine)")
    ap.add_argument("--workloads", action="store_true",
                    help="also time the native engines on mixed, 256-token and batch-1 workloads")
    ap.add_argument("--baseline-lib", type=Path, default=None,
                    help="another libedgembed.so (say, a build of the previous commit) timed as "
                         "one more native row on the same bundle, in the same rounds: a change "
                         "measured against what it replaces under the same load")
    ap.add_argument("--baseline-kernels", default=None, metavar="NAME",
                    help="the baseline row's kernel set (e.g. avx512-vnni against amx), with "
                         "this library unless --baseline-lib gives another")
    ap.add_argument("--quick", action="store_true",
                    help="native engines and onnxruntime fp32 only (no sentence-transformers, no "
                         "grid)")
    args = ap.parse_args()
    if args.quick:
        args.st_python, args.no_grid = "", True
    thread_counts = [int(t) for t in args.threads.split(",")]
    baseline = ", ".join(
        ([f"library {args.baseline_lib}"] if args.baseline_lib is not None else [])
        + ([f"{args.baseline_kernels} kernels"] if args.baseline_kernels else []))

    from onnxruntime.quantization import QuantType, quantize_dynamic

    from edgembed._tokenize import load_tokenizer
    from edgembed.backends.native import NativeBackend
    from edgembed.backends.onnx import OnnxBackend
    from edgembed.export import export_bundle, export_model
    from edgembed.export.bundle import write_bundle
    from edgembed.sources import pull

    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    texts: list[str] = reference["texts"]
    manifest, model_dir = export_model(args.model, variants="fp32,int8")
    _, bundle = export_bundle(args.model)
    pulled = pull(args.model)
    config = json.loads((pulled.source_dir / "config.json").read_text(encoding="utf-8"))
    linear_macs, attention_macs = mac_counts(config)
    tok = load_tokenizer(pulled.source_dir, manifest.max_length, truncate=True)
    ids = [e.ids for e in tok.encode_batch(texts)]
    own_fixture = args.model == reference["model"]
    if own_fixture:
        assert ids == reference["token_ids"], "tokenizer ids differ from the fixture"
    elif not args.st_python and not args.quick:
        ap.error(f"{args.model} has no committed fixture: give --st-python for its reference")
    n_tokens = sum(len(s) for s in ids)
    macs = n_tokens * linear_macs + attention_macs * sum(len(s) ** 2 for s in ids)

    tmp = Path(tempfile.mkdtemp(prefix="edgembed-native-bench-"))
    qd = tmp / "quantize_dynamic.onnx"
    if not args.no_onnx and not args.quick:
        quantize_dynamic(str(model_dir / manifest.variants["fp32"].file), str(qd),
                         per_channel=True, weight_type=QuantType.QInt8)
    onnx_files = {
        "onnxruntime fp32": model_dir / manifest.variants["fp32"].file,
        "onnxruntime MatMulNBits 8-bit": model_dir / manifest.variants["int8"].file,
        "onnxruntime quantize_dynamic int8": qd,
    }
    if args.quick:
        onnx_files = {"onnxruntime fp32": onnx_files["onnxruntime fp32"]}
    int8_attention = tmp / "int8-attention.emb"
    write_bundle(pulled.source_dir, int8_attention, max_length=manifest.max_length,
                 name=args.model, attention="int8")
    bundles = {"native int8": bundle, "native int8, int8 attention": int8_attention}

    def tokenize() -> list[list[int]]:
        return [e.ids for e in tok.encode_batch(texts)]

    converter = args.ct2_converter or (Path(args.st_python).parent / "ct2-transformers-converter"
                                       if args.st_python else None)
    ct2_dir, ct2_said = ct2_model(args.model, pulled.source_dir, str(manifest.pooling),
                                  args.ct2_dir, converter)
    if ct2_dir is None:
        print(f"# CTranslate2 skipped: {ct2_said}", file=sys.stderr)

    engines: dict[tuple[str, int], Callable[[list[list[int]]], Vectors]] = {}
    described = ""
    for threads in thread_counts:
        for name, path in bundles.items():
            native = NativeBackend(path, threads=threads)
            described = native.describe()
            engines[(name, threads)] = native.encode
        if baseline:
            engines[(BASELINE, threads)] = NativeBackend(bundle, threads=threads,
                                                         library=args.baseline_lib,
                                                         kernels=args.baseline_kernels).encode
        for name, path in ({} if args.no_onnx else onnx_files).items():
            engines[(name, threads)] = OnnxBackend(path, threads=threads).encode
        if ct2_dir is not None:
            engines[(CT2, threads)] = ct2_encoder(ct2_dir, threads)

    # the scaling grid: (engine, threads, batch, length) → seconds per round
    grid_engines = [k for k in engines if k[0] in (*bundles, BASELINE, CT2)]
    grid: dict[tuple[int, int], list[list[list[int]]]] = {}
    if not args.no_grid:
        for b in (int(x) for x in args.grid_batches.split(",")):
            for n in sorted({min(int(x), manifest.max_length)
                             for x in args.grid_lengths.split(",")}):
                grid[(b, n)] = grid_batches(ids, b, n, args.grid_tokens)
    grid_times: dict[tuple[str, int, int, int], list[float]] = {
        (e, t, b, n): [] for (b, n) in grid for (e, t) in grid_engines}

    st = None
    if args.st_python:
        try:
            st = SentenceTransformersChild(args.st_python, pulled.source_dir, texts,
                                           manifest.max_length)
        except (OSError, RuntimeError) as exc:
            if not own_fixture:
                raise
            print(f"# sentence-transformers skipped: {exc}", file=sys.stderr)

    times: dict[tuple[str, int], list[float]] = {k: [] for k in engines}
    vectors: dict[tuple[str, int], Vectors] = {}
    for key, enc in engines.items():  # warm-up, and the vectors for the quality columns
        vectors[key] = pipeline(enc, tokenize, manifest.dim)
    if st is not None:
        for threads in thread_counts:
            times[("sentence-transformers fp32", threads)] = []
            _, vectors[("sentence-transformers fp32", threads)] = st.run(threads)
    # the quality columns: the committed fixture, else sentence-transformers of this run
    want = (np.asarray(reference["embeddings"], dtype=np.float32) if own_fixture
            else vectors[("sentence-transformers fp32", thread_counts[0])])
    peak = Peak(args.peak, thread_counts)
    load_before = os.getloadavg()[0]
    for r in range(args.rounds):
        peak.measure()
        for key in rotated(list(times), r):
            time.sleep(0.2)  # the previous engine's idle threads (onnxruntime spins) go to sleep
            name, threads = key
            if name.startswith("sentence-transformers"):
                assert st is not None
                seconds, _ = st.run(threads)
            else:
                t0 = time.perf_counter()
                pipeline(engines[key], tokenize, manifest.dim)
                seconds = time.perf_counter() - t0
            times[key].append(seconds)
        for (b, n), calls in grid.items():  # every engine on a cell back to back: same load
            for e, t in rotated(grid_engines, r):
                time.sleep(0.2)
                t0 = time.perf_counter()
                for call in calls:
                    engines[(e, t)](call)
                grid_times[(e, t, b, n)].append(time.perf_counter() - t0)
    load_after = os.getloadavg()[0]
    invariance = {key: alone_vs_batch(enc, ids) for key, enc in engines.items() if key[1] == 1}
    if st is not None:
        st.close()

    import onnxruntime

    print(f"# native CPU benchmark, {args.model} ({manifest.dim} dims, "
          f"{config['num_hidden_layers']} layers, max {manifest.max_length} tokens) — "
          f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, "
          f"{os.cpu_count()} cores, onnxruntime {onnxruntime.__version__}"
          + (f", torch {st.info['torch']}, sentence-transformers {st.info['st']}" if st else ""))
    print(f"# {described}")
    print(f"# CTranslate2: {ct2_said}" if ct2_dir else f"# CTranslate2 skipped: {ct2_said}")
    print(f"# load average (1 min) {load_before:.1f} before the timed rounds, "
          f"{load_after:.1f} after: other work on a shared machine slows every engine")
    against = "the fixture" if own_fixture else "sentence-transformers of this run"
    print(f"# corpus: {len(texts)} texts, {n_tokens} tokens, {macs / 1e9:.1f} G-MAC; "
          f"min/mean cos against {against}; median of {args.rounds} interleaved rounds")
    print(f"# {peak.describe()}")
    print(f"# {ROTATION}")
    base_name = "native int8" if args.no_onnx else "onnxruntime fp32"
    print(f"| engine | threads | tokens/s | vs {base_name} | G-MAC/s | of int8 peak | "
          "min cos vs ST | mean cos | alone vs batch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for threads in thread_counts:
        base = statistics.median(times[(base_name, threads)])
        for key in (k for k in times if k[1] == threads):
            med = statistics.median(times[key])
            cos = cosines(vectors[key], want)
            inv = invariance.get((key[0], 1))
            print(f"| {key[0]} | {threads} | {n_tokens / med:,.0f} | {base / med:.2f}× | "
                  f"{macs / med / 1e9:.1f} | {peak.share(macs / med / 1e9, threads)} | "
                  f"{cos.min():.4f} | {cos.mean():.5f} | "
                  f"{'—' if inv is None else f'{inv:.6f}'} |")
    if ct2_dir is not None:
        med_of = {k: statistics.median(v) for k, v in times.items()}
        print("# native int8 / CTranslate2 int8 on the corpus: " + ", ".join(
            f"{med_of[(CT2, t)] / med_of[('native int8', t)]:.2f}× at {t} thread"
            + ("s" if t > 1 else "") for t in thread_counts))
    if baseline:
        med_of = {k: statistics.median(v) for k, v in times.items()}
        print(f"# native int8 / the baseline ({baseline}) on the corpus: "
              + ", ".join(f"{med_of[(BASELINE, t)] / med_of[('native int8', t)]:.2f}× at {t} "
                          "thread" + ("s" if t > 1 else "") for t in thread_counts))
    if grid:
        print(f"\n# scaling grid: texts per call × tokens per text (no padding), at least "
              f"{args.grid_tokens} tokens per timing, median of {args.rounds} rounds")
        heads = [f"{e} {t}T" for e, t in grid_engines]
        ratio_heads = [f"native/CT2 {t}T" for t in thread_counts] if ct2_dir else []
        print("| texts × tokens | " + " | ".join(f"{h} tokens/s | of peak" for h in heads)
              + "".join(f" | {h}" for h in ratio_heads) + " |")
        print("|---|" + "---|---|" * len(heads) + "---|" * len(ratio_heads))
        for (b, n), calls in grid.items():
            count = sum(len(c) for c in calls)
            cell_macs = count * n * linear_macs + count * attention_macs * n * n
            row = [f"{b} × {n}"]
            for e, t in grid_engines:
                med = statistics.median(grid_times[(e, t, b, n)])
                row += [f"{count * n / med:,.0f}", peak.share(cell_macs / med / 1e9, t)]
            for t in (thread_counts if ct2_dir else []):
                ct2_s = statistics.median(grid_times[(CT2, t, b, n)])
                native_s = statistics.median(grid_times[("native int8", t, b, n)])
                row.append(f"{ct2_s / native_s:.2f}×")
            print("| " + " | ".join(row) + " |")
    if args.workloads:
        timed = [k for k in engines if k[0] in (*bundles, BASELINE, "onnxruntime fp32")]
        print_workloads(workloads(ids), {k: engines[k] for k in timed}, linear_macs,
                        attention_macs, args.rounds, peak)
    return 0


def rotated(items: list[T], r: int) -> list[T]:
    """``items`` in round ``r``'s order: rotated left by ``r`` places, so that each engine
    runs first, second, … in turn and none is always timed right after the pause."""
    k = r % len(items) if items else 0
    return items[k:] + items[:k]


def workloads(ids: list[list[int]]) -> dict[str, list[list[list[int]]]]:
    """Each workload as its encoder calls: mixed (the Embedder's batches of the corpus), 256
    tokens (32 texts of 256 tokens from the corpus' ids end to end, 8 per call), batch 1."""
    from edgembed.backends.choice import CPU_BATCH_TOKENS
    from edgembed.embedder import plan_batches

    plan = plan_batches([len(s) for s in ids], CPU_BATCH_TOKENS, 128)
    mixed = [[ids[i] for i in b] for b in plan]
    stream = [t for s in ids for t in s[1:-1]]
    first, last = ids[0][0], ids[0][-1]  # [CLS] and [SEP] (or <s> and </s>)
    long = [[first, *stream[254 * i:254 * (i + 1)], last] for i in range(32)]
    return {"mixed": mixed, "256 tokens": [long[i:i + 8] for i in range(0, 32, 8)],
            "batch 1": [[s] for s in ids[:64]]}


def print_workloads(loads: dict[str, list[list[list[int]]]],
                    engines: dict[tuple[str, int], Callable[[list[list[int]]], Vectors]],
                    linear_macs: int, attention_macs: int, rounds: int, peak: Peak) -> None:
    times: dict[tuple[str, str, int], list[float]] = {}
    for enc in engines.values():  # warm-up
        for calls in loads.values():
            enc(calls[0])
    load_before = os.getloadavg()[0]
    for r in range(rounds):
        peak.measure()
        for load, calls in loads.items():
            for (name, threads), enc in rotated(list(engines.items()), r):
                time.sleep(0.2)
                t0 = time.perf_counter()
                for batch in calls:
                    enc(batch)
                times.setdefault((load, name, threads), []).append(time.perf_counter() - t0)
    print(f"\n# workloads (encoder calls only, ids given), median of {rounds} interleaved rounds; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; {ROTATION}")
    print(f"# {peak.describe()} (the corpus' rounds and these)")
    base_name = ("onnxruntime fp32" if any(k[0] == "onnxruntime fp32" for k in engines)
                 else "native int8")
    vs_native = base_name != "native int8"  # else "vs native int8" is the column before
    print(f"| workload | engine | threads | tokens/s | vs {base_name} | "
          + ("vs native int8 | " if vs_native else "") + "G-MAC/s | of int8 peak |")
    print("|---|---|---|---|---|" + ("---|" if vs_native else "") + "---|---|")
    for load, calls in loads.items():
        seqs = [s for b in calls for s in b]
        n_tokens = sum(len(s) for s in seqs)
        macs = n_tokens * linear_macs + attention_macs * sum(len(s) ** 2 for s in seqs)
        for (name, threads) in engines:
            med = statistics.median(times[(load, name, threads)])
            base_key = (load, "onnxruntime fp32", threads)
            base = statistics.median(times[base_key if base_key in times else
                                           (load, "native int8", threads)])
            f32 = statistics.median(times[(load, "native int8", threads)])
            print(f"| {load} ({len(seqs)} texts, {n_tokens:,} tokens) | {name} | {threads} | "
                  f"{n_tokens / med:,.0f} | {base / med:.2f}× | "
                  + (f"{f32 / med:.2f}× | " if vs_native else "")
                  + f"{macs / med / 1e9:.1f} | {peak.share(macs / med / 1e9, threads)} |")


if __name__ == "__main__":
    sys.exit(main())
