"""Attack 5: output paths that would destroy files.

``embed`` and ``embed batch`` run for real (subprocesses). An output that is the input is
refused before anything is written; a FIFO is written through (a reader gets the vectors, the
FIFO stays a FIFO), refused by ``embed batch`` (which renames a finished file into place); a
symlink is followed (its file gets the output, the link stays); new files get the umask's mode.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

from edgembed.embedder import Embedder

from .conftest import embed_cli, no_traceback

TEXTS = ["first text", "second text", "third text"]


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    return src


def test_output_that_is_the_input_is_refused(corpus: Path, tmp_path: Path) -> None:
    before = corpus.read_bytes()
    link = tmp_path / "same.jsonl"
    link.symlink_to(corpus)
    for args in (["-i", str(corpus), "-o", str(corpus)],
                 ["-i", str(corpus), "-o", str(link)],
                 ["batch", str(corpus), "-o", str(corpus)],
                 ["batch", str(corpus), "-o", str(tmp_path / "v.npy"),
                  "--errors-file", str(corpus)],
                 ["batch", str(corpus), "-o", str(tmp_path / "v.npy"),
                  "--errors-file", str(tmp_path / "v.npy")]):
        done = embed_cli(*args, "-q", "--backend", "onnx")
        err = no_traceback(done)
        assert done.returncode == 1, args
        assert "InputError" in err and ("is the input file" in err or "same file" in err), err
        assert corpus.read_bytes() == before
    assert not (tmp_path / "v.npy").exists()


def test_a_fifo_is_written_through(corpus: Path, tmp_path: Path, embedder: Embedder) -> None:
    fifo = tmp_path / "vectors.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    done = embed_cli("-i", str(corpus), "-o", str(fifo), "--output-format", "npy", "-q",
                     "--backend", "onnx")
    reader.join(60)
    no_traceback(done)
    assert done.returncode == 0
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO, not replaced by a file
    out = tmp_path / "check.npy"
    out.write_bytes(got[0])
    np.testing.assert_allclose(np.load(out), embedder.embed(TEXTS), atol=1e-6)

    done = embed_cli("batch", str(corpus), "-o", str(fifo), "--output-format", "npy", "-q")
    err = no_traceback(done)
    assert done.returncode == 1 and "not a regular file" in err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_symlink_is_followed(corpus: Path, tmp_path: Path, embedder: Embedder) -> None:
    real = tmp_path / "store" / "vectors.npy"
    real.parent.mkdir()
    for args in (["-i", str(corpus)], ["batch", str(corpus)]):
        link = tmp_path / "link.npy"
        link.unlink(missing_ok=True)
        real.unlink(missing_ok=True)
        link.symlink_to(real)
        done = embed_cli(*args, "-o", str(link), "-q", "--backend", "onnx")
        no_traceback(done)
        assert done.returncode == 0
        assert link.is_symlink() and os.readlink(link) == str(real)
        np.testing.assert_allclose(np.load(real), embedder.embed(TEXTS), atol=1e-6)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_new_outputs_respect_the_umask(corpus: Path, tmp_path: Path, umask: int) -> None:
    out = tmp_path / "v.npy"
    job = tmp_path / "job.jsonl"
    old = os.umask(umask)  # inherited by the subprocesses
    try:
        assert embed_cli("-i", str(corpus), "-o", str(out), "-q",
                         "--backend", "onnx").returncode == 0
        assert embed_cli("batch", str(corpus), "-o", str(job), "-q",
                         "--backend", "onnx").returncode == 0
    finally:
        os.umask(old)
    for path in (out, job):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask, path
    os.chmod(out, 0o640)  # a replaced file keeps its mode
    assert embed_cli("-i", str(corpus), "-o", str(out), "-q",
                     "--backend", "onnx").returncode == 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640
