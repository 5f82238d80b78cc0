"""Wheel build hook: ship the native engine (libedgembed.so) when it has been built.

With ``build/native/libedgembed.so`` present (``./build.sh native``; or the library named by
``$EDGEMBED_NATIVE_LIB``, e.g. a cross build ``build/native-aarch64/libedgembed.so`` from
``runtime/build.sh cross``), the wheel carries it as ``edgembed/_native/libedgembed.so`` with its
sha256 beside it (checked before loading) and is tagged for the library's platform:
``py3-none-manylinux_<glibc>_<arch>`` (for glibc 2.17, the library a cross build makes: also
``manylinux2014_<arch>``), where glibc is the newest symbol version the library
needs and arch comes from its ELF header, so a cross-built library gets the right tag. Without a
library the wheel stays pure Python and the native backend reports itself unavailable.

The WebAssembly engines ``build/wasm/*.wasm`` (``./build.sh wasm``) go in as ``edgembed/_wasm/``
whenever they exist. ``EDGEMBED_WHEEL=pure`` leaves the native library out, giving the
``py3-none-any`` wheel that Pyodide installs. An editable install includes neither (a source
checkout finds both under build/).

Enabled in pyproject.toml by ``[tool.hatch.build.targets.wheel.hooks.custom]``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_ELF_ARCH = {0x3E: "x86_64", 0xB7: "aarch64"}


def library_platform(lib: Path) -> str:
    """The wheel platform tag a Linux shared library needs, from its ELF header and symbols."""
    data = lib.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError(f"{lib} is not a 64-bit ELF shared library")
    arch = _ELF_ARCH.get(int.from_bytes(data[18:20], "little"))
    if arch is None:
        raise ValueError(f"{lib}: unsupported ELF machine")
    versions = {(int(a), int(b)) for a, b in re.findall(rb"GLIBC_(\d+)\.(\d+)", data)}
    if not versions:
        return f"linux_{arch}"
    major, minor = max(versions)
    if (major, minor) <= (2, 17):  # manylinux starts at glibc 2.17, also named manylinux2014
        return f"manylinux_2_17_{arch}.manylinux2014_{arch}"
    return f"manylinux_{major}_{minor}_{arch}"


class NativeLibraryHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        for wasm in sorted((Path(self.root) / "build" / "wasm").glob("edgembed*.wasm")):
            build_data["force_include"][str(wasm.resolve())] = f"edgembed/_wasm/{wasm.name}"
        if os.environ.get("EDGEMBED_WHEEL") == "pure":
            return
        env = os.environ.get("EDGEMBED_NATIVE_LIB")
        lib = Path(env) if env else Path(self.root) / "build" / "native" / "libedgembed.so"
        if not lib.is_file():
            if env:
                raise FileNotFoundError(f"EDGEMBED_NATIVE_LIB={env} does not exist")
            return  # a pure wheel: the native backend is then unavailable
        self._tmp = Path(tempfile.mkdtemp(prefix="edgembed-native-"))
        digest = self._tmp / "libedgembed.so.sha256"
        digest.write_text(hashlib.sha256(lib.read_bytes()).hexdigest() + "\n", encoding="ascii")
        build_data["force_include"][str(lib.resolve())] = "edgembed/_native/libedgembed.so"
        build_data["force_include"][str(digest)] = "edgembed/_native/libedgembed.so.sha256"
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{library_platform(lib)}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
