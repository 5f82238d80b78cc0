"""Compiling engine sources in a test: gcc with the engine's flags.

``TOKENIZER_SOURCES`` are the tokenizer's C files; ``CFLAGS`` are runtime/cflags.txt's (read by
``runtime/tools/engine_cflags.py``, as every build of the engine reads them), with absolute
include paths; ``gcc`` skips the test where gcc is missing and raises ``CalledProcessError``
(with the compiler's stderr) when a build fails; ``declare`` types the public functions such a
library holds from the ABI module (``edgembed.backends._abi``), never by hand.
"""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from edgembed.backends._abi import FUNCTIONS, ctypes_signature

REPO = Path(__file__).resolve().parents[2]
# the engine's tokenizer alone (all three word models), with the bundle reader it is loaded by
TOKENIZER_SOURCES = [
    REPO / "runtime" / "src" / f"{name}.c"
    for name in ("tokenizer", "normalizer", "pre_tokenizer", "wordpiece", "unigram", "bpe",
                 "post_processor", "unicode_tables", "tokenizer_bundle", "bundle",
                 "platform_native")
]


def _shared_cflags() -> list[str]:
    spec = importlib.util.spec_from_file_location(
        "engine_cflags", REPO / "runtime" / "tools" / "engine_cflags.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    flags: list[str] = module.shared_cflags(absolute=True)
    return flags


CFLAGS = _shared_cflags()


def gcc(args: Sequence[str | Path]) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    subprocess.run(["gcc", *map(str, args)], check=True, capture_output=True, text=True)


def declare(lib: ctypes.CDLL, *names: str) -> None:
    """Type the named functions of ``runtime/include/edgembed.h`` in a library built here."""
    for name in names:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = ctypes_signature(FUNCTIONS[name])
