"""``WasmHost`` over Pyodide's ``js.WebAssembly``: the engine in the page's (or Node's) own
WebAssembly, driven by the same ``Engine`` code as under wasmtime.

Exports are called through their JsProxy (looked up once); memory is copied in bulk, never an
element at a time: ``Uint8Array.new(memory.buffer, ptr, n).assign(data)`` into wasm memory and
``.assign_to(out)`` out of it. ``memory.buffer`` is taken anew for every copy, because
``memory.grow`` replaces the ArrayBuffer.

Compiling: ``PyodideHost.from_directory`` compiles synchronously, which a Web Worker, Node and
Deno allow; a browser may cap synchronous compilation on its main thread (older Chromium: 4 KB;
Chromium 156 compiles the engine), so ``await PyodideHost.create()`` (used by
``edgembed.web.load``) compiles asynchronously and works everywhere.

Variant: SIMD128 by default (Pyodide cannot see the CPU, and on x86-64 V8 runs the relaxed dot
product slower); ``variant="relaxed"`` takes the relaxed build after its probe finds the
relaxed dot product exact here (Node 20 computes it wrongly), and fails otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BackendUnavailable
from ._wasm_files import WASM_FILES, check_variant, find_wasm_dir, read_wasm

__all__ = ["PyodideHost"]


def _js() -> Any:
    try:
        import js
    except ImportError:
        raise BackendUnavailable(
            "the js.WebAssembly host runs only inside Pyodide; in CPython backend 'wasm' "
            "uses wasmtime (pip install wasmtime)"
        ) from None
    return js


def _to_u8(js: Any, data: bytes) -> Any:
    u8 = js.Uint8Array.new(len(data))
    u8.assign(data)
    return u8


def _module_bytes(directory: Path | None, variant: str | None) -> tuple[str, bytes]:
    """(variant, .wasm bytes): SIMD128 unless ``variant`` is "relaxed"."""
    check_variant(variant)
    name = "relaxed" if variant == "relaxed" else "simd128"
    where = find_wasm_dir(directory)
    data = read_wasm(where, name)
    if data is None:
        raise BackendUnavailable(
            f"{where / WASM_FILES[name]} is missing; reinstall edgembed (its wheel ships the "
            ".wasm files) or build them with `./build.sh wasm`"
        )
    return name, data


class PyodideHost:
    """One instance of edgembed.wasm (or the relaxed build) in the JavaScript engine."""

    def __init__(self, instance: Any, variant: str) -> None:
        self.variant = variant
        self._exports = instance.exports
        self._memory = self._exports.memory
        self._fns: dict[str, Any] = {}
        self._u8 = _js().Uint8Array

    @classmethod
    def from_directory(
        cls, directory: Path | None = None, variant: str | None = None
    ) -> PyodideHost:
        """Compile and instantiate synchronously (Web Workers, Node, Deno)."""
        js = _js()
        name, data = _module_bytes(directory, variant)
        try:
            module = js.WebAssembly.Module.new(_to_u8(js, data))
            instance = js.WebAssembly.Instance.new(module, js.Object.new())
        except Exception as exc:  # a JsException: no SIMD, or the main thread's size limit
            raise BackendUnavailable(
                f"this JavaScript engine cannot compile {WASM_FILES[name]} here ({exc}); "
                "on a browser's main thread use `await edgembed.web.load(...)`, which "
                "compiles asynchronously"
            ) from None
        return cls._checked(instance, name)

    @classmethod
    async def create(cls, directory: Path | None = None, variant: str | None = None) -> PyodideHost:
        """Compile and instantiate asynchronously (allowed everywhere, needed on a browser's
        main thread)."""
        js = _js()
        name, data = _module_bytes(directory, variant)
        try:
            module = await js.WebAssembly.compile(_to_u8(js, data))
            instance = await js.WebAssembly.instantiate(module, js.Object.new())
        except Exception as exc:  # a JsException
            raise BackendUnavailable(
                f"this JavaScript engine cannot compile {WASM_FILES[name]} ({exc}); edgembed "
                "needs WebAssembly SIMD (Chrome/Edge 91+, Firefox 89+, Safari 16.4+, Node 16.4+)"
            ) from None
        return cls._checked(instance, name)

    @classmethod
    def _checked(cls, instance: Any, name: str) -> PyodideHost:
        host = cls(instance, name)
        if name == "relaxed" and host.call("emb_relaxed_probe_wasm") != 1:
            raise BackendUnavailable(
                "this JavaScript engine computes the relaxed-SIMD dot product wrongly (Node 20 "
                "does); use variant 'simd128'"
            )
        return host

    # ── WasmHost ──

    def call(self, name: str, *args: int) -> int:
        fn = self._fns.get(name)
        if fn is None:
            fn = self._fns[name] = getattr(self._exports, name)
        result = fn(*args)
        return 0 if result is None else int(result)

    def write(self, ptr: int, data: memoryview) -> None:
        self._u8.new(self._memory.buffer, ptr, data.nbytes).assign(data)

    def read_into(self, ptr: int, out: memoryview) -> None:
        self._u8.new(self._memory.buffer, ptr, out.nbytes).assign_to(out)

