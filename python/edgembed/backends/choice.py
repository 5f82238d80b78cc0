"""Which backend runs a model here, with which variant and token budget: the one place.

``choose_backend`` is a pure function of the request and of what this machine offers (a usable
GPU, a native engine that loaded and passed its self-check), so its decisions are tested as
data; ``open_backend`` then opens what it chose.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

from .. import env
from ..errors import BackendUnavailable, InputError, UnsupportedArchitecture
from ..manifest import Manifest
from . import Backend

__all__ = [
    "BACKENDS",
    "CPU_BATCH_TOKENS",
    "CUDA_BATCH_TOKENS",
    "DEFAULT_VARIANT",
    "DEPRECATED_BACKENDS",
    "MAX_BATCH_SIZE",
    "BackendChoice",
    "backend_name",
    "bundle_path",
    "choose_backend",
    "cuda_state",
    "native_state",
    "open_backend",
]

# The one set of backend names, in Python, the CLI, the server and the docs. "cpu" was once an
# alias of "onnx" (onnxruntime on the CPU) — misleading now that the native engine is the CPU's
# default — and is still accepted with a DeprecationWarning.
BACKENDS = ("auto", "native", "onnx", "wasm", "cuda")
DEPRECATED_BACKENDS = {"cpu": "onnx"}


def backend_name(requested: str) -> str:
    """``requested`` as one of BACKENDS (a deprecated alias warns and maps to its name)."""
    import warnings

    name = str(requested).lower()
    if name in DEPRECATED_BACKENDS:
        new = DEPRECATED_BACKENDS[name]
        warnings.warn(f"backend {requested!r} is deprecated; use {new!r} (onnxruntime on the "
                      "CPU) or 'native' (the edgembed engine)", DeprecationWarning, stacklevel=3)
        return new
    if name not in BACKENDS:
        raise InputError(f"unknown backend {requested!r}; choose from {', '.join(BACKENDS)}")
    return name

# Token budgets: padded tokens (batch size x longest sequence) per encoder call. On a CPU,
# batches past ~2k tokens were measured slower (the FFN activations, tokens x 1536 floats,
# fall out of cache) and only delay the first result; a GPU needs far larger batches.
CPU_BATCH_TOKENS = 2048
CUDA_BATCH_TOKENS = 65536
MAX_BATCH_SIZE = {"onnx": 128, "wasm": 64, "cuda": 1024, "native": 128}
DEFAULT_VARIANT = {"onnx": "int8", "wasm": "int8", "cuda": "fp16", "native": "int8"}


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


class LoadedModel:
    """What a loaded ``Embedder`` and ``Reranker`` both say of themselves: the exported model
    (its manifest and folder) and the backend chosen for it."""

    _manifest: Manifest
    _model_dir: Path
    _choice: BackendChoice

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
    name = backend_name(requested)
    cuda_ok, cuda_why = cuda
    native_ok, native_why = native
    reason = ""
    if name == "auto" and env.HOST.pyodide:
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


def cuda_state(requested: str) -> tuple[bool, str]:
    """(usable, why) of CUDA, asked only when ``requested`` may use it."""
    if str(requested).lower() not in ("auto", "cuda"):
        return False, "not requested"
    if env.HOST.pyodide:
        return False, "Pyodide has no CUDA"
    from .onnx import cuda_available

    return cuda_available()


def native_state(requested: str) -> tuple[bool, str]:
    """(usable, why) of the native engine, asked only when ``requested`` may use it."""
    if str(requested).lower() not in ("auto", "native") or env.HOST.pyodide:
        return False, "not requested"
    from .native import native_available

    return native_available()


def open_backend(
    choice: BackendChoice, model_dir: Path, manifest: Manifest, threads: int | None
) -> Backend:
    """The backend ``choice`` names, on the model in ``model_dir``. The native engine writes
    the model's engine bundle on first use."""
    if choice.backend == "wasm":
        try:  # built by the engine's wasm target; absent from some installations
            wasm = importlib.import_module(".wasm", __package__)
        except ImportError as exc:
            raise BackendUnavailable(
                f"backend 'wasm' is not available in this installation ({exc}); "
                "it needs the engine's .wasm build and `pip install wasmtime`. "
                "Use backend='onnx' meanwhile"
            ) from None
        try:
            bundle, sha256 = engine_bundle(model_dir, manifest, write=False)
        except BackendUnavailable:
            _check_engine_can_run(choice, model_dir, manifest)  # the better reason, if any
            raise
        backend: Backend = wasm.WasmBackend(bundle, threads=threads, sha256=sha256)
        return backend
    if choice.backend == "native":
        from .native import NativeBackend

        try:
            bundle, sha256 = engine_bundle(model_dir, manifest, write=False)
        except BackendUnavailable:  # the first use: write the engine bundle once
            _check_engine_can_run(choice, model_dir, manifest)
            try:
                bundle, sha256 = engine_bundle(model_dir, manifest, write=True)
            except UnsupportedArchitecture as exc:  # the onnx backend may still run it
                hint = "" if "backend='onnx'" in str(exc) else "; use backend='onnx'"
                raise BackendUnavailable(
                    f"backend 'native' runs the edgembed engine, which cannot run "
                    f"{manifest.name}: {exc}{hint}") from None
        return NativeBackend(bundle, threads=threads, sha256=sha256)
    from .onnx import OnnxBackend

    path = manifest.variant_path(model_dir, choice.variant)
    return OnnxBackend(path, device=choice.device, threads=threads)


def _check_engine_can_run(choice: BackendChoice, model_dir: Path, manifest: Manifest) -> None:
    """The engine backends run BERT encoders and tokenize in C: a family or tokenizer kind the
    engine lacks stops here, with the way out (onnxruntime runs every family the exporter
    builds, and tokenizes with Hugging Face ``tokenizers``, any kind)."""
    from ..capabilities import ENGINE_FAMILIES, ENGINE_TASKS, ENGINE_TOKENIZERS

    lacks = ""
    if manifest.task not in {t.value for t in ENGINE_TASKS}:
        head = {"rerank": "classification head (cross-encoders)",
                "sparse": "masked-LM head (SPLADE)"}.get(manifest.task, f"{manifest.task} head")
        lacks = f"no {head} yet ({manifest.name} is a {manifest.task} model)"
    elif manifest.family and manifest.family not in ENGINE_FAMILIES:
        lacks = f"no {manifest.family} encoder yet ({manifest.name} is one)"
    else:
        tj = model_dir / "source" / "tokenizer.json"
        try:
            kind = str(json.loads(tj.read_text(encoding="utf-8"))["model"]["type"]).lower()
        except (OSError, ValueError, KeyError, TypeError):
            return  # no pulled tokenizer.json here: the bundle writer reports what it finds
        if kind not in ENGINE_TOKENIZERS:
            lacks = f"no {kind} tokenizer yet ({manifest.name} uses one)"
    if lacks:
        raise BackendUnavailable(f"backend {choice.backend!r} runs the edgembed engine, which "
                                 f"has {lacks}; use backend='onnx'")


def bundle_path(model_dir: Path, manifest: Manifest) -> Path:
    """The engine bundle (.emb) of an exported model directory: the manifest's, else any."""
    return engine_bundle(model_dir, manifest, write=False)[0]


def engine_bundle(model_dir: Path, manifest: Manifest, *, write: bool) -> tuple[Path, str | None]:
    """The engine bundle of an exported model directory and the sha256 its manifest records
    (None for a bundle found beside it but not recorded), for the engine to check the bytes it
    loads against. A recorded bundle of another format version than this engine reads is
    rewritten from the model, as is a missing one when ``write`` (the native engine's first
    use), and a SPLADE model's bundle that is not the rescored one (an int8 one misses the
    sparse quality bar, and ``auto`` runs the engine for sparse models because the rescored
    one meets it)."""
    from ..export.bundle import BUNDLE_VERSION

    sparse = manifest.task == "sparse"
    stale = False
    for entry in manifest.bundles.values():
        f = entry.get("file") if isinstance(entry, dict) else None
        if f and (model_dir / str(f)).is_file():
            if entry.get("format_version") == BUNDLE_VERSION and (
                    not sparse or entry.get("sparse") == "rescored"):
                sha = entry.get("sha256")
                return model_dir / str(f), str(sha) if sha else None
            stale = True
    if not stale and not write:
        candidates = sorted(model_dir.glob("*.emb"))
        if candidates:
            return candidates[0], None
        raise BackendUnavailable(
            f"{model_dir} has no engine bundle (.emb) for backend 'wasm'; "
            f"run `embed bundle {manifest.name}` first"
        )
    from ..export import export_bundle  # the first use, or a bundle of an older format

    record, bundle = export_bundle(manifest.name, force=stale,
                                   sparse="rescored" if sparse else None)
    manifest.bundles["int8"] = dict(record)  # what export_bundle saved, in the caller's copy too
    return bundle, str(record["sha256"])
