"""The C engine compiled to WebAssembly: tokenizer and encoder in one module, on any host.

``WasmBackend`` runs it under wasmtime in CPython and under the JavaScript engine's own
``WebAssembly`` in Pyodide (``backends/_pyodide.py``); both hosts drive the exports through the
same code (``backends/_engine.py``), so they give the same vectors to the bit. The bundle is
copied into wasm memory once (the model references it there), and every call writes its
inputs into buffers allocated once inside that memory. Nothing is padded: the sequences of a
batch are packed back to back, and a batch larger than the engine's context is cut into
pieces, which changes nothing since a sequence's vector never depends on its batch.

Variant choice (the one place, ``_instantiate`` here and its twin in ``_pyodide.py``): all
builds give bit-identical vectors. On x86-64, wasmtime runs the SIMD128 build at least as fast
as the relaxed one (there the relaxed dot product costs as much as two SIMD128 ones, and signed
activations need two of it; see docs/engine.md), so it is the default. Elsewhere
``edgembed-relaxed.wasm`` is used when wasmtime compiles it and its exported probe finds the
relaxed dot product exact on this host, else ``edgembed.wasm``.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from array import array
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailable
from ._engine import BundleSource, Engine

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["WASM_FILES", "WasmBackend", "find_wasm_dir", "read_wasm"]

WASM_FILES = {"simd128": "edgembed.wasm", "relaxed": "edgembed-relaxed.wasm"}
VARIANTS = (None, "relaxed", "simd128")


def _package_wasm_dir() -> Path | None:
    """The installed package's ``_wasm`` folder, where the wheel puts the .wasm files."""
    folder = resources.files(__package__.rpartition(".")[0]) / "_wasm"
    return folder if isinstance(folder, Path) else None  # None inside a zip: not a folder


def find_wasm_dir(explicit: Path | None = None) -> Path:
    """Where the .wasm files are: the argument, $EDGEMBED_WASM_DIR, the installed package's
    ``_wasm`` folder, or a source checkout's ``build/wasm``."""
    here = Path(__file__).resolve()
    candidates = [
        explicit,
        Path(os.environ["EDGEMBED_WASM_DIR"]) if os.environ.get("EDGEMBED_WASM_DIR") else None,
        _package_wasm_dir(),
        here.parents[1] / "_wasm",
        here.parents[3] / "build" / "wasm",
    ]
    for c in candidates:
        if c is not None and (c / "edgembed.wasm").is_file():
            return c
    where = f"{explicit}, " if explicit is not None else ""
    raise BackendUnavailable(
        f"the engine's edgembed.wasm was not found (looked in {where}$EDGEMBED_WASM_DIR, the "
        "package's _wasm folder and build/wasm); build it with `./build.sh wasm`, or install "
        "an edgembed wheel, which ships it"
    )


def read_wasm(directory: Path, variant: str) -> bytes | None:
    """The bytes of a variant's .wasm file in ``directory``; None when it is not there."""
    try:
        return (directory / WASM_FILES[variant]).read_bytes()
    except FileNotFoundError:
        return None


def _check_variant(variant: str | None) -> None:
    if variant not in VARIANTS:
        raise BackendUnavailable(f"unknown wasm variant {variant!r} (relaxed or simd128)")


class _WasmtimeHost:
    """``WasmHost`` over wasmtime: exports called through the store, memory through ctypes."""

    def __init__(self, directory: Path, variant: str | None) -> None:
        try:
            import wasmtime
        except ImportError:
            raise BackendUnavailable(
                "backend 'wasm' needs wasmtime: pip install wasmtime"
            ) from None
        self._wt = wasmtime
        cfg = wasmtime.Config()
        cfg.wasm_simd = True
        cfg.wasm_relaxed_simd = True
        self._engine = wasmtime.Engine(cfg)
        self.variant, self._store, self._ex = self._instantiate(directory, variant)
        self._memory = self._ex["memory"]

    def _instantiate(self, directory: Path, variant: str | None) -> tuple[str, Any, Any]:
        wt = self._wt
        _check_variant(variant)
        if variant is None and platform.machine().lower() in ("x86_64", "amd64"):
            variant = "simd128"
        relaxed = read_wasm(directory, "relaxed") if variant in (None, "relaxed") else None
        if relaxed is not None:
            try:
                store = wt.Store(self._engine)
                module = wt.Module(self._engine, relaxed)
                ex = wt.Instance(store, module, []).exports(store)
                if ex["emb_relaxed_probe_wasm"](store) == 1:
                    return "relaxed", store, ex
            except wt.WasmtimeError:
                pass
            if variant == "relaxed":
                raise BackendUnavailable(
                    "this wasmtime cannot run the relaxed-SIMD engine exactly"
                )
        data = read_wasm(directory, "simd128")
        if data is None:
            find_wasm_dir(directory)  # raises, saying where it looked
        store = wt.Store(self._engine)
        module = wt.Module(self._engine, data)
        return "simd128", store, wt.Instance(store, module, []).exports(store)

    def call(self, name: str, *args: int) -> int:
        result = self._ex[name](self._store, *args)
        return 0 if result is None else int(result)

    def _span(self, ptr: int, n: int) -> memoryview:
        # re-made on every use: memory.grow may move the host mapping
        base = ctypes.addressof(self._memory.data_ptr(self._store).contents)
        return memoryview((ctypes.c_ubyte * n).from_address(base + ptr)).cast("B")

    def write(self, ptr: int, data: memoryview) -> None:
        self._span(ptr, data.nbytes)[:] = data

    def read_into(self, ptr: int, out: memoryview) -> None:
        out[:] = self._span(ptr, out.nbytes)


def _open_host(directory: Path | None, variant: str | None) -> Any:
    """The host this Python offers: js.WebAssembly in Pyodide, else wasmtime."""
    _check_variant(variant)
    if sys.platform == "emscripten":
        from ._pyodide import PyodideHost

        return PyodideHost.from_directory(find_wasm_dir(directory), variant)
    return _WasmtimeHost(find_wasm_dir(directory), variant)


class WasmBackend:
    """The edgembed engine in WebAssembly. Not thread-safe: one call at a time."""

    name = "wasm"
    thread_safe = False

    def __init__(
        self,
        bundle: BundleSource,
        *,
        threads: int | None = None,
        variant: str | None = None,
        max_tokens: int = 2048,
        wasm_dir: Path | None = None,
        host: Any = None,
    ) -> None:
        """Load ``bundle``: a path to a .emb file, or its bytes. ``threads`` is accepted for
        the Backend interface; this backend runs one thread. ``variant``: ``"relaxed"``,
        ``"simd128"`` or None (probe). ``max_tokens``: tokens per engine call (bigger batches
        are cut). ``host``: an instantiated module (a ``WasmHost``), e.g. one compiled
        asynchronously in a browser; by default the module is found and instantiated here."""
        del threads
        if host is None:
            host = _open_host(wasm_dir, variant)
        self._host = host
        self.variant: str = host.variant
        self._engine = Engine(host, bundle, max_tokens=max_tokens)
        e = self._engine
        self.dim, self.max_length, self.max_tokens = e.dim, e.max_length, e.max_tokens
        self.pooling, self.normalized_by_model = e.pooling, e.normalized_by_model
        self.bundle_version = e.bundle_version

    # ── the Backend interface ──

    def meta(self, key: str) -> str | None:
        """A metadata string of the bundle (``name``, ``quantization``, …), None if absent."""
        return self._engine.meta(key)

    def tokenize(self, texts: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Token ids of each text with [CLS]/[SEP], by the engine's own tokenizer."""
        return self._engine.tokenize(texts, truncate)

    def tokenize_counted(self, text: str, truncate: bool = True) -> tuple[list[int], int]:
        """(ids, the text's full token count); ids are [] for a text over max_length when
        ``truncate`` is off."""
        return self._engine.tokenize_one(text, truncate)

    def count_tokens(self, texts: Sequence[str], truncate: bool = True) -> list[int]:
        """Tokens each text costs the encoder (its full length when truncate is False)."""
        return self._engine.count_tokens(texts, truncate)

    def encode(self, batch: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """Pooled, not normalized vectors (n, dim) of a batch of id sequences (numpy)."""
        import numpy as np

        result = np.zeros((len(batch), self.dim), dtype="<f4")
        self._engine.encode_into(batch, result.data.cast("B"))
        return result.astype(np.float32, copy=False)

    def encode_rows(self, batch: Sequence[Sequence[int]]) -> list[array[float]]:
        """``encode`` without numpy: one ``array('f')`` of ``dim`` floats per sequence."""
        return self._engine.encode_rows(batch)

    def close(self) -> None:
        """Free the engine's objects (the module goes with this object)."""
        if getattr(self, "_engine", None) is not None:
            self._engine.close()
