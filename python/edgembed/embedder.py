"""The Embedder: texts in, vectors out, on whichever backend runs here.

The pipeline of one ``embed`` call::

    texts ─► tokenize (no padding, truncation at max_length)
          ─► sort by length ─► token-budget batches (padded to each batch's longest only)
          ─► backend.encode (pooled vectors)  ─► restore input order
          ─► Matryoshka truncation (dimensions) ─► L2 normalization ─► precision

Every variant edgembed exports is batch-invariant (int8 activations are quantized per token),
so sorting and batching never change a text's vector: a text embedded alone and inside any
batch gives the same result.

Thread safety: one Embedder may be shared by many threads, and each call gets exactly the
vectors it would get alone. Encoder calls are serialized, one batch at a time: a CPU batch
already uses every core, and overlapping runs that fight for the same cores were measured
slower (8 threads: 17 s overlapped, 10.5 s serialized, on 2 cores); the wasm engine is
single-threaded anyway. Tokenization, sorting and post-processing of concurrent calls overlap,
and since the lock is taken per batch, a short call is not stuck behind a long one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import numpy as np
except ImportError:  # Pyodide offline: bundles run on array('f') rows instead (_bundle.py)
    np = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import numpy.typing as npt

from .backends import Backend
from .errors import BackendUnavailable, InputError, InputTooLong, InvalidModelDir
from .manifest import MANIFEST_NAME, Manifest

__all__ = [
    "BACKENDS",
    "DEFAULT_MODEL",
    "BackendChoice",
    "Embedder",
    "Precision",
    "choose_backend",
    "output_layout",
    "plan_batches",
    "quantize_embeddings",
]

_log = logging.getLogger("edgembed")

DEFAULT_MODEL = "all-minilm-l6-v2"
BACKENDS = ("auto", "onnx", "cuda", "wasm", "native")

# Token budgets: padded tokens (batch size x longest sequence) per encoder call. On a CPU,
# batches past ~2k tokens were measured slower (the FFN activations, tokens x 1536 floats,
# fall out of cache) and only delay the first result; a GPU needs far larger batches.
CPU_BATCH_TOKENS = 2048
CUDA_BATCH_TOKENS = 65536
MAX_BATCH_SIZE = {"onnx": 128, "wasm": 64, "cuda": 1024, "native": 128}
DEFAULT_VARIANT = {"onnx": "int8", "wasm": "int8", "cuda": "fp16", "native": "int8"}
ITER_CHUNK = 1024
_OPTION_NAMES = ("normalize", "dimensions", "precision", "max_batch_tokens")

Progress = Callable[[str], None]
if TYPE_CHECKING:
    FloatArray = npt.NDArray[np.float32]


class Precision(str, Enum):
    """Output precisions, as sentence-transformers' ``quantize_embeddings`` offers them.

    ``int8``/``uint8`` map each dimension's calibration range [lo, hi] linearly onto 256
    levels (values outside the range are clipped; see ``quantize_embeddings``).
    ``binary``/``ubinary`` keep the sign bit of each dimension (x > 0) packed 8 per byte,
    big-endian bit order as ``numpy.packbits``; ``binary`` stores each byte minus 128 as int8,
    ``ubinary`` the byte itself.
    """

    FLOAT32 = "float32"
    INT8 = "int8"
    UINT8 = "uint8"
    BINARY = "binary"
    UBINARY = "ubinary"


# --- backend selection (the one place) ---------------------------------------------------------


@dataclass(frozen=True)
class BackendChoice:
    """What ``Embedder.load`` will run: a backend, a variant, a token budget, and why."""

    backend: str
    variant: str
    max_batch_tokens: int
    reason: str = ""

    @property
    def device(self) -> str:
        return "cuda" if self.backend == "cuda" else "cpu"


def choose_backend(
    requested: str,
    variant: str | None,
    *,
    cuda: tuple[bool, str],
    native: tuple[bool, str] = (False, "not checked"),
) -> BackendChoice:
    """Decide the backend from the request and what this machine offers (a pure function).

    ``cuda`` is ``(usable, why)`` as ``backends.onnx.cuda_available()`` answers it, ``native``
    as ``backends.native.native_available()`` does. ``"auto"`` takes CUDA when it is usable
    (with the fp16 variant unless one is named), else the native engine for int8 when it loaded
    and passed its self-check, else onnxruntime on the CPU, and records the reason in
    ``BackendChoice.reason``; ``"cuda"`` without a usable GPU raises BackendUnavailable saying
    why and what to install.
    """
    name = str(requested).lower()
    if name == "cpu":
        name = "onnx"
    if name not in BACKENDS:
        raise InputError(f"unknown backend {requested!r}; choose from {', '.join(BACKENDS)}")
    cuda_ok, cuda_why = cuda
    native_ok, native_why = native
    reason = ""
    if name == "auto" and sys.platform == "emscripten":
        name, reason = "wasm", "auto: Pyodide runs the WebAssembly engine"
    elif name == "auto":
        if cuda_ok and (variant is None or variant in ("fp16", "fp32")):
            name, reason = "cuda", "auto: CUDA is available"
        elif native_ok and variant in (None, "int8"):
            name, reason = "native", f"auto: {native_why}"
        elif cuda_ok:
            name, reason = "onnx", f"auto: the {variant} variant runs on the CPU"
        else:
            name, reason = "onnx", f"auto: CPU because {cuda_why}"
            if native_why != "not checked" and variant in (None, "int8"):
                reason += f"; no native engine: {native_why}"
    elif name == "native" and variant not in (None, "int8"):
        raise InputError(f"backend 'native' runs the int8 engine bundle, not the {variant} variant")
    elif name == "cuda" and not cuda_ok:
        raise BackendUnavailable(
            f"backend 'cuda' cannot run here: {cuda_why}. Use backend='auto' to fall back "
            "to the CPU"
        )
    chosen_variant = (variant or DEFAULT_VARIANT[name]).lower()
    budget = CUDA_BATCH_TOKENS if name == "cuda" else CPU_BATCH_TOKENS
    return BackendChoice(name, chosen_variant, budget, reason)


def _cuda_state(requested: str) -> tuple[bool, str]:
    if str(requested).lower() not in ("auto", "cuda"):
        return False, "not requested"
    if sys.platform == "emscripten":
        return False, "Pyodide has no CUDA"
    from .backends.onnx import cuda_available

    return cuda_available()


def _native_state(requested: str) -> tuple[bool, str]:
    if str(requested).lower() not in ("auto", "native") or sys.platform == "emscripten":
        return False, "not requested"
    from .backends.native import native_available

    return native_available()


def _open_backend(
    choice: BackendChoice, model_dir: Path, manifest: Manifest, threads: int | None
) -> Backend:
    if choice.backend == "wasm":
        import importlib

        try:  # built by the engine's wasm target; absent from some installations
            wasm = importlib.import_module(".backends.wasm", __package__)
        except ImportError as exc:
            raise BackendUnavailable(
                f"backend 'wasm' is not available in this installation ({exc}); "
                "it needs the engine's .wasm build and `pip install wasmtime`. "
                "Use backend='onnx' meanwhile"
            ) from None
        bundle = _bundle_path(model_dir, manifest)
        backend: Backend = wasm.WasmBackend(bundle, threads=threads)
        return backend
    if choice.backend == "native":
        from .backends.native import NativeBackend

        try:
            bundle = _bundle_path(model_dir, manifest)
        except BackendUnavailable:  # the first use: write the engine bundle once
            from .export import export_bundle

            _, bundle = export_bundle(manifest.name)
        return NativeBackend(bundle, threads=threads)
    from .backends.onnx import OnnxBackend

    path = manifest.variant_path(model_dir, choice.variant)
    return OnnxBackend(path, device=choice.device, threads=threads)


def _bundle_path(model_dir: Path, manifest: Manifest) -> Path:
    for entry in manifest.bundles.values():
        f = entry.get("file") if isinstance(entry, dict) else None
        if f and (model_dir / str(f)).is_file():
            return model_dir / str(f)
    candidates = sorted(model_dir.glob("*.emb"))
    if candidates:
        return candidates[0]
    raise BackendUnavailable(
        f"{model_dir} has no engine bundle (.emb) for backend 'wasm'; "
        f"run `embed bundle {manifest.name}` first"
    )


# --- batching and output -----------------------------------------------------------------------


def plan_batches(
    lengths: Sequence[int], max_batch_tokens: int, max_batch_size: int = 1 << 30
) -> list[list[int]]:
    """Indices of ``lengths`` grouped into batches, longest texts first.

    Each batch is padded to its longest member, so its cost is ``len(batch) * longest``;
    that product stays within ``max_batch_tokens`` (a single text longer than the budget
    forms a batch of its own). Longest first: a batch that does not fit in memory fails at
    once, not at the end of a long run.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        if current and (
            (len(current) + 1) * max(width, lengths[i]) > max_batch_tokens
            or len(current) >= max_batch_size
        ):
            batches.append(current)
            current, width = [], 0
        current.append(i)
        width = max(width, lengths[i])
    if current:
        batches.append(current)
    return batches


def _l2_normalize(x: FloatArray) -> FloatArray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    out: FloatArray = (x / np.maximum(norms, np.float32(1e-12))).astype(np.float32, copy=False)
    return out


def quantize_embeddings(
    embeddings: FloatArray,
    precision: str | Precision,
    ranges: FloatArray | None = None,
) -> npt.NDArray[Any]:
    """Quantize float32 embeddings the way sentence-transformers' ``quantize_embeddings`` does.

    ``ranges`` (shape (2, d): per-dimension lower and upper bound) is needed for int8/uint8.
    With ``v = clip((x - lo) / ((hi - lo) / 255), 0, 255)``: ``uint8 = trunc(v)`` and
    ``int8 = trunc(v - 128)`` (truncation toward zero): sentence-transformers' formula, so the
    same ranges give the same bytes, plus the clipping it lacks. The Embedder passes ranges
    measured on the calibration corpus, so a vector's quantized form does not depend on the
    other texts of the call (sentence-transformers, given no calibration set, measures them on
    the call's own embeddings).
    """
    p = _precision(precision)
    if p is Precision.FLOAT32:
        return np.asarray(embeddings, dtype=np.float32)
    if p in (Precision.BINARY, Precision.UBINARY):
        packed = np.packbits(embeddings > 0, axis=-1)
        if p is Precision.UBINARY:
            return np.asarray(packed, dtype=np.uint8)
        return np.asarray(packed.astype(np.int16) - 128, dtype=np.int8)
    if ranges is None:
        raise InputError(f"precision {p.value!r} needs calibration ranges")
    lo = ranges[0].astype(np.float32)
    width = (ranges[1] - ranges[0]).astype(np.float32)
    steps = np.where(width > 0, width / np.float32(255.0), np.float32(1.0))
    levels = np.clip((embeddings - lo) / steps, 0, 255)
    if p is Precision.UINT8:
        return np.asarray(np.trunc(levels), dtype=np.uint8)
    return np.asarray(np.trunc(levels - 128), dtype=np.int8)


def output_layout(dims: int, precision: str | Precision) -> tuple[int, np.dtype[Any]]:
    """(row width, dtype) of ``embed``'s output for ``dims`` dimensions at ``precision``."""
    p = _precision(precision)
    if p in (Precision.BINARY, Precision.UBINARY):
        return (dims + 7) // 8, np.dtype(np.int8 if p is Precision.BINARY else np.uint8)
    return dims, np.dtype({Precision.FLOAT32: np.float32, Precision.INT8: np.int8,
                           Precision.UINT8: np.uint8}[p])


def _precision(value: str | Precision) -> Precision:
    try:
        return Precision(str(value.value if isinstance(value, Precision) else value).lower())
    except ValueError:
        known = ", ".join(p.value for p in Precision)
        raise InputError(f"unknown precision {value!r}; choose from {known}") from None


def _pick(options: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    defaults: dict[str, Any] = {"normalize": True, "dimensions": None, "precision": "float32",
                                "max_batch_tokens": None}
    return {n: options.get(n, defaults[n]) for n in names}


def _as_texts(texts: str | Iterable[str], start: int = 0) -> list[str]:
    """A list of texts; a single string is one text. Non-strings raise TypeError by index."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, (bytes, bytearray)):
        raise TypeError("texts must be a str or an iterable of str, not bytes; decode it first")
    try:
        items = list(texts)
    except TypeError:
        raise TypeError(
            f"texts must be a str or an iterable of str, not {type(texts).__name__}"
        ) from None
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise TypeError(f"texts[{start + i}] is {type(t).__name__}, not str")
    return items


# --- Embedder ----------------------------------------------------------------------------------


class _Tokenizer:
    """Two configured HF tokenizers (truncating and not), never reconfigured after load.

    ``tokenizers.Tokenizer`` keeps truncation as mutable state; switching it per call would
    race between threads, so each mode has its own instance.
    """

    def __init__(self, source_dir: Path, max_length: int, *, lowercase: bool = False) -> None:
        from ._tokenize import load_tokenizer

        self.max_length = max_length
        self._truncating = load_tokenizer(source_dir, max_length, truncate=True,
                                          lowercase=lowercase)
        self._full = load_tokenizer(source_dir, max_length, truncate=False, lowercase=lowercase)

    def encode(
        self, texts: list[str], *, truncate: bool, check: bool = True, start: int = 0
    ) -> tuple[list[list[int]], int]:
        """Token ids per text and how many texts were truncated.

        With ``truncate=False`` and ``check``, a text over max_length raises InputTooLong
        naming its index (``start`` is the index of ``texts[0]`` in the caller's input).
        """
        if not texts:
            return [], 0
        if truncate:
            encs = self._truncating.encode_batch(texts)
            return [e.ids for e in encs], sum(1 for e in encs if e.overflowing)
        encs = self._full.encode_batch(texts)
        ids = [e.ids for e in encs]
        for i, seq in enumerate(ids if check else ()):
            if len(seq) > self.max_length:
                raise InputTooLong(
                    f"texts[{start + i}] has {len(seq)} tokens, over the model's max length "
                    f"{self.max_length}; shorten it or embed with truncation on"
                )
        return ids, 0


class Embedder:
    """Embeds texts with one exported model on one backend. Create it with ``Embedder.load``."""

    def __init__(
        self,
        *,
        backend: Backend,
        tokenizer: _Tokenizer,
        manifest: Manifest,
        model_dir: Path,
        choice: BackendChoice,
    ) -> None:
        self._backend = backend
        self._tokenizer = tokenizer
        self._manifest = manifest
        self._model_dir = model_dir
        self._choice = choice
        self._max_batch_size = MAX_BATCH_SIZE.get(choice.backend, 128)
        self._encode_lock = threading.Lock()
        self._calibration_lock = threading.Lock()
        self._calibration: FloatArray | None = None

    # ── construction ──

    @classmethod
    def load(
        cls,
        model: str | os.PathLike[str] | bytes = DEFAULT_MODEL,
        *,
        variant: str | None = None,
        backend: str = "auto",
        threads: int | None = None,
        progress: Progress | None = None,
    ) -> Embedder:
        """Load ``model``, pulling and exporting it first if this machine has not yet.

        ``model``: a catalog name (``embed models`` lists them), a Hugging Face model
        directory, or an exported model directory (one with ``edgembed.json``); or an engine
        bundle — a path to a .emb file, or its bytes — which runs on backend ``wasm`` (in
        Pyodide everything does: see docs/pyodide.md).
        ``variant``: ``int8`` (default on CPU), ``fp32``, ``int4`` or ``fp16`` (default on
        CUDA). ``backend``: ``auto`` (CUDA when a GPU and onnxruntime-gpu are present, else
        CPU), ``onnx`` (onnxruntime on the CPU), ``cuda`` or ``wasm``. ``threads``: the
        onnxruntime intra-op threads (default: one per core). ``progress`` receives one line
        per step of a first-time pull and export (default: the ``edgembed`` logger).
        """
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InputError(f"threads must be a positive integer, not {threads!r}")
        from ._bundle import embedder_from_bundle, is_bundle_source

        if (isinstance(model, (bytes, bytearray, memoryview)) or is_bundle_source(model)
                or sys.platform == "emscripten"):
            # an engine bundle (.emb, or its bytes), and everything in Pyodide: the wasm engine
            if str(backend).lower() not in ("auto", "wasm"):
                raise BackendUnavailable(
                    f"backend {backend!r} cannot run an engine bundle or in Pyodide; use "
                    "backend='wasm'")
            if variant not in (None, "int8"):
                raise InputError(f"engine bundles are int8, not {variant!r}")
            return embedder_from_bundle(model)
        choice = choose_backend(backend, variant, cuda=_cuda_state(backend),
                                native=_native_state(backend))
        model_dir, manifest = _prepare_model(model, choice.variant, progress)
        try:
            engine = _open_backend(choice, model_dir, manifest, threads)
        except BackendUnavailable as exc:
            if str(backend).lower() != "auto" or choice.backend not in ("cuda", "native"):
                raise
            choice = choose_backend("onnx", variant, cuda=(False, str(exc)))
            choice = BackendChoice(choice.backend, choice.variant, choice.max_batch_tokens,
                                   f"auto: CPU because {exc}")
            model_dir, manifest = _prepare_model(model, choice.variant, progress)
            engine = _open_backend(choice, model_dir, manifest, threads)
        source = model_dir / "source"
        tokenizer = _Tokenizer(source if source.is_dir() else model_dir, manifest.max_length,
                               lowercase=manifest.do_lower_case)
        return cls(backend=engine, tokenizer=tokenizer, manifest=manifest,
                   model_dir=model_dir, choice=choice)

    # ── properties ──

    @property
    def dim(self) -> int:
        return self._manifest.dim

    @property
    def max_length(self) -> int:
        return self._manifest.max_length

    @property
    def model_name(self) -> str:
        return self._manifest.name

    @property
    def variant(self) -> str:
        return self._choice.variant

    @property
    def backend(self) -> str:
        return self._choice.backend

    @property
    def backend_reason(self) -> str:
        """Why this backend was chosen ("" when it was asked for by name)."""
        return self._choice.reason

    @property
    def model_dir(self) -> Path:
        return self._model_dir

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def max_batch_tokens(self) -> int:
        return self._choice.max_batch_tokens

    def __repr__(self) -> str:
        extra = f", reason={self._choice.reason!r}" if self._choice.reason else ""
        return (f"Embedder(model={self.model_name!r}, variant={self.variant!r}, "
                f"backend={self.backend!r}, dim={self.dim}{extra})")

    # ── tokens ──

    def tokenize(
        self, texts: str | Iterable[str], *, prefix: str | None = None, truncate: bool = True
    ) -> list[list[int]]:
        """Token ids (with [CLS]/[SEP], no padding) of each text, as the encoder sees them;
        with ``truncate=False``, all of each text's tokens."""
        items = self._with_prefix(_as_texts(texts), prefix)
        return self._tokenizer.encode(items, truncate=truncate, check=False)[0]

    def count_tokens(
        self, texts: str | Iterable[str], *, prefix: str | None = None, truncate: bool = True
    ) -> list[int]:
        """How many tokens each text costs the encoder (special tokens included; at most
        ``max_length`` unless ``truncate=False``). The adaptive batcher's cost model uses it."""
        return [len(ids) for ids in self.tokenize(texts, prefix=prefix, truncate=truncate)]

    # ── embeddings ──

    def embed(
        self,
        texts: str | Iterable[str],
        *,
        normalize: bool = True,
        prefix: str | None = None,
        truncate: bool = True,
        dimensions: int | None = None,
        precision: str | Precision = "float32",
        max_batch_tokens: int | None = None,
    ) -> npt.NDArray[Any]:
        """Embed ``texts`` (a string counts as one text): an array of shape (n, dims), rows in
        input order. Without numpy (Pyodide), a list of n rows instead: ``array('f')``, or
        ``array('b')`` for int8/binary and ``array('B')`` for uint8/ubinary precisions.

        ``prefix`` is prepended to every text. ``truncate=False`` raises InputTooLong for a
        text over ``max_length`` tokens instead of cutting it. ``dimensions`` keeps the first
        dimensions (Matryoshka) and renormalizes. ``precision``: see :class:`Precision` and
        ``docs/python.md``; binary precisions return ``ceil(dims / 8)`` bytes per row.
        ``max_batch_tokens`` overrides the backend's token budget per encoder call.
        """
        vectors, truncated = self._embed_counted(
            texts, normalize=normalize, prefix=prefix, truncate=truncate,
            dimensions=dimensions, precision=precision, max_batch_tokens=max_batch_tokens)
        if truncated:
            _log.info("%d of %d texts were longer than %d tokens and were truncated",
                      truncated, len(vectors), self.max_length)
        return vectors

    def embed_query(self, texts: str | Iterable[str], **options: Any) -> npt.NDArray[Any]:
        """``embed`` with the model's query prefix (e5-style "query: "; "" for MiniLM)."""
        return self.embed(texts, prefix=self._manifest.query_prefix, **options)

    def embed_document(self, texts: str | Iterable[str], **options: Any) -> npt.NDArray[Any]:
        """``embed`` with the model's document prefix (e5-style "passage: ")."""
        return self.embed(texts, prefix=self._manifest.document_prefix, **options)

    def embed_iter(
        self,
        texts: Iterable[str],
        *,
        chunk_size: int = ITER_CHUNK,
        normalize: bool = True,
        prefix: str | None = None,
        truncate: bool = True,
        dimensions: int | None = None,
        precision: str | Precision = "float32",
        max_batch_tokens: int | None = None,
    ) -> Iterator[npt.NDArray[Any]]:
        """Embed a stream of texts with bounded memory: one array per ``chunk_size`` texts.

        Reads ``chunk_size`` texts at a time, so any iterable (a file, a generator) works;
        the arrays, concatenated, equal ``embed(list(texts))``.
        """
        for vectors, _ in self._embed_stream(
            texts, chunk_size=chunk_size, normalize=normalize, prefix=prefix,
            truncate=truncate, dimensions=dimensions, precision=precision,
            max_batch_tokens=max_batch_tokens,
        ):
            yield vectors

    def _embed_stream(
        self,
        texts: Iterable[str],
        *,
        chunk_size: int = ITER_CHUNK,
        **options: Any,
    ) -> Iterator[tuple[npt.NDArray[Any], int]]:
        """``embed_iter`` that also says how many texts of each chunk were truncated."""
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise InputError(f"chunk_size must be a positive integer, not {chunk_size!r}")
        self._options(**_pick(options, _OPTION_NAMES))  # bad options fail before any work
        chunk: list[str] = []
        start = 0
        for text in texts:
            chunk.append(text)
            if len(chunk) >= chunk_size:
                yield self._embed_counted(chunk, start=start, **options)
                start += len(chunk)
                chunk = []
        if chunk:
            yield self._embed_counted(chunk, start=start, **options)

    def _embed_counted(
        self,
        texts: str | Iterable[str],
        *,
        start: int = 0,
        normalize: bool = True,
        prefix: str | None = None,
        truncate: bool = True,
        dimensions: int | None = None,
        precision: str | Precision = "float32",
        max_batch_tokens: int | None = None,
    ) -> tuple[npt.NDArray[Any], int]:
        """``embed`` plus the number of truncated texts; ``start`` offsets error indices."""
        opts = self._options(normalize, dimensions, precision, max_batch_tokens)
        return self._embed_list(_as_texts(texts, start), prefix, truncate, opts, start)

    def quantization_ranges(
        self, *, normalize: bool = True, dimensions: int | None = None
    ) -> FloatArray:
        """The (2, dims) per-dimension [lo, hi] used by the int8 and uint8 precisions.

        Measured once per Embedder: the minimum and maximum of each dimension over the
        embeddings of the calibration corpus (the 262 varied texts shipped with the package),
        after the same ``normalize``/``dimensions`` processing as the output.
        """
        with self._calibration_lock:
            if self._calibration is None:
                self._calibration = self._calibration_vectors()
        vectors = self._finish(self._calibration, normalize, dimensions)
        return np.stack([vectors.min(axis=0), vectors.max(axis=0)]).astype(np.float32)

    # ── internals ──

    def _calibration_vectors(self) -> FloatArray:
        """Pooled vectors of the calibration corpus, cached beside the model once computed.

        The cache file is named after the variant file's sha256, so a re-export invalidates
        it; a model directory that cannot be written to just keeps them in memory.
        """
        from ._corpus import calibration_texts

        texts = calibration_texts()
        entry = self._manifest.variants.get(self.variant)
        cache = (self._model_dir / f"calibration.{self.variant}.{entry.sha256[:16]}.npy"
                 if entry is not None and self.backend not in ("wasm", "native") else None)
        if cache is not None and cache.is_file():
            with contextlib.suppress(OSError, ValueError):
                cached = np.load(cache)
                if cached.shape == (len(texts), self.dim) and cached.dtype == np.float32:
                    return np.asarray(cached, dtype=np.float32)
        ids, _ = self._tokenizer.encode(texts, truncate=True)
        vectors = self._pooled(ids, self._choice.max_batch_tokens)
        if cache is not None:
            with contextlib.suppress(OSError):
                fd, tmp = tempfile.mkstemp(prefix=".calibration-", suffix=".npy",
                                           dir=self._model_dir)
                with os.fdopen(fd, "wb") as f:
                    np.save(f, vectors)
                os.replace(tmp, cache)
        return vectors

    def _options(
        self,
        normalize: bool,
        dimensions: int | None,
        precision: str | Precision,
        max_batch_tokens: int | None,
    ) -> tuple[bool, int | None, Precision, int]:
        if dimensions is not None and (
            isinstance(dimensions, bool) or not isinstance(dimensions, int)
            or not 1 <= dimensions <= self.dim
        ):
            raise InputError(f"dimensions must be an integer from 1 to {self.dim}, "
                             f"not {dimensions!r}")
        if max_batch_tokens is not None and (
            not isinstance(max_batch_tokens, int) or max_batch_tokens < 1
        ):
            raise InputError(f"max_batch_tokens must be a positive integer, "
                             f"not {max_batch_tokens!r}")
        return (bool(normalize), dimensions, _precision(precision),
                max_batch_tokens or self._choice.max_batch_tokens)

    def _with_prefix(self, texts: list[str], prefix: str | None) -> list[str]:
        if not prefix:
            return texts
        return [prefix + t for t in texts]

    def _embed_list(
        self,
        items: list[str],
        prefix: str | None,
        truncate: bool,
        opts: tuple[bool, int | None, Precision, int],
        start: int = 0,
    ) -> tuple[npt.NDArray[Any], int]:
        normalize, dimensions, precision, budget = opts
        if not items:
            width, dtype = output_layout(dimensions or self.dim, precision)
            return np.zeros((0, width), dtype=dtype), 0
        ids, truncated = self._tokenizer.encode(self._with_prefix(items, prefix),
                                                truncate=truncate, start=start)
        vectors = self._finish(self._pooled(ids, budget), normalize, dimensions)
        if precision is Precision.FLOAT32:
            return vectors, truncated
        ranges = None
        if precision in (Precision.INT8, Precision.UINT8):
            ranges = self.quantization_ranges(normalize=normalize, dimensions=dimensions)
        return quantize_embeddings(vectors, precision, ranges), truncated

    def _pooled(self, ids: list[list[int]], budget: int) -> FloatArray:
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        for batch in plan_batches([len(s) for s in ids], budget, self._max_batch_size):
            out[batch] = self._encode([ids[i] for i in batch])
        return out

    def _encode(self, batch: list[list[int]]) -> FloatArray:
        with self._encode_lock:
            return self._backend.encode(batch)

    def _finish(self, pooled: FloatArray, normalize: bool, dimensions: int | None) -> FloatArray:
        out = pooled[:, :dimensions] if dimensions else pooled
        return _l2_normalize(out) if normalize else np.array(out, dtype=np.float32)


# --- model preparation -------------------------------------------------------------------------


def _prepare_model(
    model: str | os.PathLike[str], variant: str, progress: Progress | None
) -> tuple[Path, Manifest]:
    """(model_dir, manifest) with ``variant`` exported, pulling and exporting when needed."""
    from .export import export_model, parse_variants
    from .sources import model_cache_dir, resolve

    parse_variants([variant])  # an unknown variant fails here, with the list of known ones
    from .catalog import catalog

    text = os.fspath(model)
    path = Path(text).expanduser()
    if text.lower() not in catalog() and path.is_dir():
        if path.name == "source" and (path.parent / MANIFEST_NAME).is_file():
            path = path.parent  # the source folder of a model in the cache
        if (path / MANIFEST_NAME).is_file():
            manifest = Manifest.load(path)
            if variant in manifest.variants:
                return path, manifest
            cached = model_cache_dir(manifest.name)
            if cached.exists() and cached.resolve() == path.resolve():
                return _export(manifest.name, variant, progress, export_model)
            manifest.variant_path(path, variant)  # raises, saying how to export it
    spec, _ = resolve(model)
    cached = model_cache_dir(spec.name)
    if (cached / MANIFEST_NAME).is_file():
        manifest = Manifest.load(cached)
        if variant in manifest.variants:
            return cached, manifest
    return _export(model, variant, progress, export_model)


def _export(
    model: str | os.PathLike[str],
    variant: str,
    progress: Progress | None,
    export_model: Callable[..., tuple[Manifest, Path]],
) -> tuple[Path, Manifest]:
    from .sources import model_cache_dir, resolve

    say = progress or _log.info
    spec, _ = resolve(model)
    if (model_cache_dir(spec.name) / "source").is_dir():
        notice = (f"exporting the {variant} variant of {spec.name} into the cache "
                  "(once; about a minute)")
    else:
        notice = (f"first use of {os.fspath(model)}: pulling its files and exporting the "
                  f"{variant} variant into the cache (once; about a minute)")
    if progress is None:
        _log.warning("%s", notice)
    else:
        progress(notice)
    manifest, model_dir = export_model(model, variants=[variant], progress=say)
    if variant not in manifest.variants:
        raise InvalidModelDir(f"export of {manifest.name} did not produce {variant!r}")
    return model_dir, manifest
