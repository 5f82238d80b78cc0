"""runtime/cflags.txt, read once for every Python script that compiles engine sources.

The wasm build (``build_wasm.py``), the tests that build the tokenizer themselves
(``tests/python/c_build.py``) and the benchmarks take their flags from here, as
``runtime/build.sh`` takes them from the same file. Flags are separated by blanks and lines;
``#`` starts a comment; include paths in the file are relative to the repository root.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def shared_cflags(*, absolute: bool = False) -> list[str]:
    """The flags of every build of the engine (warnings, arithmetic, include paths). With
    ``absolute``, the include paths are made absolute, so the compiler may run anywhere."""
    text = (ROOT / "runtime" / "cflags.txt").read_text(encoding="utf-8")
    flags = [flag for line in text.splitlines() for flag in line.split("#")[0].split()]
    if absolute:
        flags = [f"-I{ROOT / f[2:]}" if f.startswith("-I") else f for f in flags]
    return flags
