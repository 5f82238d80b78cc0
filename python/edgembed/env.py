"""The Python host, detected once when edgembed first needs it, as a frozen object.

Nothing else in the package reads ``sys.platform``, ``platform.machine()`` or tries whether
threads start: every host-dependent choice reads ``env.HOST`` (as ``js/src/env.ts`` does for
the JavaScript hosts). Modules import this module, not the object (``from . import env``, then
``env.HOST.pyodide``), so a test can replace ``HOST`` with ``dataclasses.replace(HOST, …)``.

=========== ==================================================================================
field       what it decides
=========== ==================================================================================
pyodide     CPython compiled to WebAssembly (Pyodide, PyScript, JupyterLite): every model is an
            engine bundle on the wasm engine, run by the page's own ``js.WebAssembly``
threads     ``threading.Thread`` can start: the adaptive batcher's threads (else its event-loop
            form), the server
numpy       numpy is installed: the Embedder returns arrays (else lists of ``array`` rows)
os          ``sys.platform``: the native engine is a Linux library
machine     the CPU architecture, ``x86_64`` or ``aarch64`` (else as the platform names it)
cores       logical processors this process may run on
=========== ==================================================================================
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from dataclasses import dataclass

__all__ = ["HOST", "Host", "detect"]

_MACHINE_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


@dataclass(frozen=True)
class Host:
    """What this Python can do (see the module docstring)."""

    pyodide: bool
    threads: bool
    numpy: bool
    os: str
    machine: str
    cores: int


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def detect() -> Host:
    """Look at the running interpreter (``HOST`` holds the answer of the first look)."""
    pyodide = sys.platform == "emscripten"
    machine = platform.machine().lower()
    return Host(
        pyodide=pyodide,
        threads=not pyodide,  # Emscripten's CPython is built without threads
        numpy=importlib.util.find_spec("numpy") is not None,
        os=sys.platform,
        machine=_MACHINE_ALIASES.get(machine, machine),
        cores=_cores(),
    )


HOST: Host = detect()
