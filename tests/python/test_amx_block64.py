"""benchmarks/amx_block64.c, the AMX GEMM with blocks of 64 beside the built one: it builds with
the engine's flags against the engine's objects, checks both kernels bit for bit (the built
one against the reference GEMM, blocks of 64 against their own definition) before it times
them, prints one parseable line, and refuses bad arguments with exit status 2. Times are
checked only for being positive numbers: a speed is a benchmark's business, never a test's."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "benchmarks" / "amx_block64.c"
OBJ = REPO / "build" / "native" / "obj"


def cflags() -> list[str]:
    text = (REPO / "runtime" / "cflags.txt").read_text(encoding="utf-8")
    return shlex.split(" ".join(line.split("#")[0] for line in text.splitlines()))


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler on PATH")
    objs = sorted(p for p in OBJ.glob("*.o") if p.name != "kernels_avx512.o")
    if not objs:
        pytest.skip(f"no engine objects in {OBJ}: run `bash runtime/build.sh native` first")
    out = tmp_path_factory.mktemp("amx") / "amx_block64"
    done = subprocess.run([cc, *cflags(), "-O3", "-o", str(out), str(SOURCE), *map(str, objs),
                           "-lm", "-pthread"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return out


def run(exe: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("shape", [("20", "32", "128"), ("16", "48", "64"), ("3", "16", "192")])
def test_both_kernels_checked_and_timed(exe: Path, shape: tuple[str, str, str]) -> None:
    done = run(exe, *shape, "0.05")
    if done.returncode == 1:  # no AMX here, or the OS refused the tile state
        assert "AMX" in done.stderr
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr  # 3 would mean a kernel differs from its definition
    name, m, n, k, us32, us64, ratio = done.stdout.split()
    assert (name, m, n, k) == ("amx_block64", *shape)
    assert float(us32) > 0 and float(us64) > 0
    t32, t64, h = float(us32), float(us64), 0.0005  # printed to 3 decimals
    assert (t32 - h) / (t64 + h) - h <= float(ratio) <= (t32 + h) / (t64 - h) + h


@pytest.mark.parametrize("args", [(), ("16", "24", "64"), ("16", "32", "96"), ("0", "16", "64"),
                                  ("16", "16", "64", "0"), ("16", "16", "64", "1", "extra")])
def test_bad_arguments(exe: Path, args: tuple[str, ...]) -> None:
    done = run(exe, *args)
    assert done.returncode == 2
    assert "usage: amx_block64 M N K" in done.stderr
