"""build/native/embcli bench, the engine's debugging timer: calls of N × L tokens, warm or
``cold`` (64 MiB written before each call, untimed), one line of results; bad shapes and
unknown trailing arguments exit with status 2 and say what is wanted. Times are checked only
for being positive and ordered (best ≤ median): a speed is a benchmark's business, never a
test's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

EMBCLI = Path(__file__).resolve().parents[2] / "build" / "native" / "embcli"
BENCH = re.compile(r"^(\d+) x (\d+) tokens, (\d+) threads, (\S+): (\d+) tokens/s, ([\d.]+) G-MAC/s "
                   r"\(linear \+ attention\), best of (\d+) calls \(([\d.]+) ms, CPU ([\d.]+) ms; "
                   r"median call ([\d.]+) ms\)$")


@pytest.fixture(scope="module")
def embcli(native_library: Path) -> Path:
    if not EMBCLI.exists():
        pytest.skip(f"{EMBCLI} is missing: run `bash runtime/build.sh native`")
    return EMBCLI


def run(embcli: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(embcli), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("mode", [(), ("cold",)])
def test_bench_warm_and_cold(embcli: Path, bundle: Path, mode: tuple[str, ...]) -> None:
    done = run(embcli, "bench", str(bundle), "2", "12", "1", "", "0.05", *mode)
    assert done.returncode == 0, done.stderr
    m = BENCH.match(done.stdout.strip().splitlines()[-1])
    assert m, done.stdout
    n, length, threads = int(m[1]), int(m[2]), int(m[3])
    assert (n, length, threads) == (2, 12, 1)
    assert int(m[7]) >= 3  # at least three calls, whatever the time asked for
    best, median = float(m[8]), float(m[10])
    assert 0 < best <= median
    assert int(m[5]) > 0 and float(m[6]) > 0


@pytest.mark.parametrize("args", [("0", "12"), ("2", "1"), ("2", "9999")])
def test_bench_refuses_bad_shapes(embcli: Path, bundle: Path, args: tuple[str, str]) -> None:
    done = run(embcli, "bench", str(bundle), *args, "1", "", "0.05")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "bench needs N >= 1, 2 <= L <= 256" in done.stderr  # all-minilm-l6-v2: 256 tokens


@pytest.mark.parametrize("extra", [("col",), ("cold", "more")])
def test_bench_refuses_unknown_trailing_arguments(embcli: Path, bundle: Path,
                                                  extra: tuple[str, ...]) -> None:
    done = run(embcli, "bench", str(bundle), "2", "12", "1", "", "0.05", *extra)
    assert done.returncode == 2
    assert done.stdout == ""
    assert 'the last one "cold" if any' in done.stderr
