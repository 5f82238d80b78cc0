"""benchmarks/int8_peak.c, the denominator of the benchmarks' "of int8 peak" columns: it builds
with the machine's C compiler, says which VNNI kind this CPU runs, prints one parseable line per
run, and refuses bad arguments with a message and exit status 2. Rates are checked only for
being positive numbers of the right form: a speed is a benchmark's business, never a test's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "benchmarks" / "int8_peak.c"


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler on PATH")
    out = tmp_path_factory.mktemp("peak") / "int8_peak"
    done = subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o", str(out),
                           str(SOURCE)], capture_output=True, text=True)
    if done.returncode != 0 and "unrecognized" in done.stderr + done.stdout:
        pytest.skip(f"this compiler lacks the VNNI/AMX targets: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    return out


def run(exe: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)


def test_which_names_a_kind(exe: Path) -> None:
    done = run(exe, "which")
    kind = done.stdout.strip()
    assert kind in ("zmm", "ymm", "none")
    assert done.returncode == (1 if kind == "none" else 0)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_vnni_line(exe: Path, threads: str) -> None:
    kind = run(exe, "which").stdout.strip()
    done = run(exe, "vnni", threads, "0.05")
    if kind == "none":
        assert done.returncode == 1 and "neither AVX-512 VNNI nor AVX-VNNI" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    name, asked, got, n, rate = done.stdout.split()
    assert (name, asked, got, n) == ("int8_peak", "vnni", kind, threads)
    assert float(rate) > 0


def test_amx_line_or_refusal(exe: Path) -> None:
    done = run(exe, "amx32", "1", "0.05")
    if done.returncode == 1:  # no AMX here (or the kernel refused the tile state)
        assert "AMX" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:4] == ["int8_peak", "amx32", "amx32", "1"]
    assert float(done.stdout.split()[4]) > 0


@pytest.mark.parametrize("args", [[], ["vnni"], ["vnni", "0", "1"], ["vnni", "1", "-1"],
                                  ["vnni", "1", "x"], ["fma", "1", "1"]])
def test_bad_arguments(exe: Path, args: list[str]) -> None:
    done = run(exe, *args)
    assert done.returncode == 2
    assert done.stderr.startswith(("usage: int8_peak", "int8_peak:"))
    assert done.stdout == ""
