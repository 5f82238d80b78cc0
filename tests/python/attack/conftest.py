"""The attack suite's shared parts: the real int8 model, real servers and the real CLI.

Every test here repeats an attack on edgembed — a bad body, a stray byte, a second server, a
hostile path, a slow client, a full disk — against the real thing (uvicorn on 127.0.0.1 with
real HTTP clients, the ``embed`` command in a subprocess, the engine) and asserts the safe
outcome. docs/server.md ("Threat model") says what each one defends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'edgembed[serve]'")

from edgembed.embedder import Embedder


@pytest.fixture(autouse=True)
def _home(edgembed_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test (and every subprocess it starts) uses the session's exported model."""
    monkeypatch.setenv("EDGEMBED_HOME", str(edgembed_home))
    monkeypatch.delenv("EDGEMBED_API_KEYS", raising=False)
    return edgembed_home


@pytest.fixture(scope="session")
def embedder(exported_model_dir: Path) -> Embedder:
    """The int8 model on onnxruntime, as the servers of this suite run it."""
    return Embedder.load(exported_model_dir, variant="int8", backend="onnx")


def embed_cli(*args: str, input: bytes | None = None, timeout: float = 120,
              env: dict[str, str] | None = None, cwd: Path | None = None
              ) -> subprocess.CompletedProcess[bytes]:
    """``embed ARGS`` in a subprocess (the real entry point), on the int8 model, quiet."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from edgembed.cli import main; sys.exit(main())",
         *args], input=input, capture_output=True, timeout=timeout,
        env={**os.environ, **(env or {})}, cwd=cwd)


def no_traceback(done: subprocess.CompletedProcess[bytes]) -> str:
    """stderr, after checking it holds no Python traceback."""
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    return err


class Spawned:
    """``embed serve`` (or another command) in a subprocess; killed at the end of the test."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; from edgembed.cli import main; sys.exit(main())", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    def wait_line(self, needle: str, timeout: float = 60) -> str:
        """The first stderr line holding ``needle`` (AssertionError with what was seen)."""
        assert self.proc.stderr is not None
        seen = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            line = self.proc.stderr.readline().decode("utf-8", "replace")
            if not line:
                break
            seen.append(line)
            if needle in line:
                return line
        raise AssertionError(f"{needle!r} not seen; stderr: {''.join(seen)!r}")

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        """(exit status, stderr) once the process ends by itself."""
        _, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err.decode("utf-8", "replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


@pytest.fixture()
def spawn() -> Iterator[Any]:
    started: list[Spawned] = []

    def start(args: list[str], env: dict[str, str] | None = None) -> Spawned:
        s = Spawned(args, env)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
