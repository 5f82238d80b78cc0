"""Where the engine's .wasm builds are, and which builds there are.

``find_wasm_dir`` looks, in order, at an explicit folder, ``$EDGEMBED_WASM_DIR``, the installed
package's ``_wasm`` folder (the wheel puts the files there) and a source checkout's
``build/wasm`` (``./build.sh wasm``). Both Python hosts (wasmtime, Pyodide) read them here.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from ..errors import BackendUnavailable

__all__ = ["VARIANTS", "WASM_FILES", "check_variant", "find_wasm_dir", "read_wasm"]

WASM_FILES = {"simd128": "edgembed.wasm", "relaxed": "edgembed-relaxed.wasm"}
VARIANTS = (None, "relaxed", "simd128")  # None: the host picks (see backends/wasm.py)


def _package_wasm_dir() -> Path | None:
    """The installed package's ``_wasm`` folder, where the wheel puts the .wasm files."""
    folder = resources.files("edgembed") / "_wasm"
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


def check_variant(variant: str | None) -> None:
    if variant not in VARIANTS:
        raise BackendUnavailable(f"unknown wasm variant {variant!r} (relaxed or simd128)")
