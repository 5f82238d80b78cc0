"""benchmarks/block64.c, the amx and avx512-vnni GEMMs with blocks of 64 beside the built ones: it
builds with the engine's flags against the engine's objects, checks both kernels of a set bit
for bit (the built one against the reference GEMM, blocks of 64 against their own definition)
before it times them, prints one parseable line, and refuses bad arguments with exit status 2.
Times are checked only for being positive numbers: a speed is a benchmark's business, never a
test's."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "benchmarks" / "block64.c"
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
    out = tmp_path_factory.mktemp("block64") / "block64"
    done = subprocess.run([cc, *cflags(), "-O3", "-o", str(out), str(SOURCE), *map(str, objs),
                           "-lm", "-pthread"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return out


def run(exe: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


SHAPES = [("20", "32", "128"), ("16", "48", "64"), ("3", "16", "192"), ("70", "64", "4160")]


@pytest.mark.parametrize("kernel_set", ["amx", "avx512-vnni"])
@pytest.mark.parametrize("shape", SHAPES)  # 70 rows: chunks of 64 rows; K 4160: two chunks of K
def test_both_kernels_checked_and_timed(exe: Path, kernel_set: str,
                                        shape: tuple[str, str, str]) -> None:
    done = run(exe, kernel_set, *shape, "0.05")
    if done.returncode == 1:  # the CPU lacks the set's features, or the OS refused AMX tiles
        assert "block64: this CPU has no" in done.stderr
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr  # 3 would mean a kernel differs from its definition
    name, got_set, m, n, k, us32, us64, ratio = done.stdout.split()
    assert (name, got_set, m, n, k) == ("block64", kernel_set, *shape)
    assert float(us32) > 0 and float(us64) > 0
    t32, t64, h = float(us32), float(us64), 0.0005  # printed to 3 decimals
    assert (t32 - h) / (t64 + h) - h <= float(ratio) <= (t32 + h) / (t64 - h) + h


BAD = [(), ("amx",), ("amx", "16", "24", "64"), ("amx", "16", "32", "96"),
       ("avx512-vnni", "0", "16", "64"), ("avx512-vnni", "16", "16", "64", "0"),
       ("amx", "16", "16", "64", "1", "extra"), ("avx2", "16", "16", "64"), ("16", "16", "64")]


@pytest.mark.parametrize("args", BAD)
def test_bad_arguments(exe: Path, args: tuple[str, ...]) -> None:
    done = run(exe, *args)
    assert done.returncode == 2
    assert "usage: block64 SET M N K" in done.stderr
