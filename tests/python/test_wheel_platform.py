"""The wheel's platform tag, as hatch_build.py's ``library_platform`` computes it from the native
library's ELF header and the newest GLIBC symbol version it needs, on small real shared
libraries compiled here: zig's clang for glibc 2.17 (x86_64 and aarch64, the targets
``runtime/build.sh cross`` builds the engine for; zig's caches in build/zig-cache, shared with
that build) and this machine's C compiler for a library that needs glibc 2.34
(``pthread_create`` moved into libc in 2.34). Each library's versions are also read with
``objdump -T`` when it is installed, so the expectation is the linker's, not this test's.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE = r"""
#include <math.h>
#include <pthread.h>
static void *run(void *arg) { return arg; }
int go(double x) {
    pthread_t t;
    if (pthread_create(&t, 0, run, 0) != 0) return -1;
    pthread_join(t, 0);
    return (int)exp(x);
}
"""


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    pytest.importorskip("hatchling")  # the test extra has it
    spec = importlib.util.spec_from_file_location("hatch_build", REPO / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("elf") / "lib.c"
    path.write_text(SOURCE, encoding="ascii")
    return path


def _compile(cmd: list[str], out: Path) -> Path:
    env = {**os.environ, "ZIG_GLOBAL_CACHE_DIR": str(REPO / "build" / "zig-cache")}
    done = subprocess.run([*cmd, "-shared", "-fPIC", "-o", str(out)], capture_output=True,
                          text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _zig(source: Path, target: str) -> Path:
    if importlib.util.find_spec("ziglang") is None:
        pytest.skip("needs zig's clang: pip install ziglang (runtime/build.sh cross does)")
    return _compile([sys.executable, "-m", "ziglang", "cc", "-target", target, str(source),
                     "-lm", "-lpthread"], source.parent / f"lib-{target}.so")


def _glibc_needed(lib: Path) -> tuple[int, int] | None:
    """The newest GLIBC_ version objdump lists among the library's dynamic symbols."""
    if shutil.which("objdump") is None:
        return None
    out = subprocess.run(["objdump", "-T", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    return max((int(a), int(b)) for a, b in re.findall(r"GLIBC_(\d+)\.(\d+)", out))


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_glibc_2_17_library_is_manylinux2014(hook: ModuleType, source: Path, arch: str) -> None:
    lib = _zig(source, f"{arch}-linux-gnu.2.17")
    assert _glibc_needed(lib) in (None, (2, 17))
    assert hook.library_platform(lib) == f"manylinux_2_17_{arch}.manylinux2014_{arch}"


def test_glibc_2_34_library_is_manylinux_2_34(hook: ModuleType, source: Path) -> None:
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    m = re.fullmatch(r"glibc (\d+)\.(\d+)", libc)
    if shutil.which("cc") is None or not m or (int(m[1]), int(m[2])) < (2, 34):
        pytest.skip(f"needs a C compiler and glibc >= 2.34 (this machine: {libc or 'no glibc'})")
    lib = _compile(["cc", str(source), "-lm", "-lpthread"], source.parent / "lib-host.so")
    assert _glibc_needed(lib) in (None, (2, 34))
    machine = os.uname().machine
    assert hook.library_platform(lib) == f"manylinux_2_34_{machine}"


def test_what_is_not_a_64_bit_elf_library_is_refused(hook: ModuleType, source: Path) -> None:
    with pytest.raises(ValueError, match="not a 64-bit ELF"):
        hook.library_platform(source)  # C source, not ELF
