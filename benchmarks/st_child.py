"""sentence-transformers in another Python, for the benchmarks that compare against it.

torch and sentence-transformers are never edgembed dependencies: the benchmarks take an
interpreter that has them (``--st-python``, e.g. a throwaway venv) and keep one process of it
running, so its timed runs interleave with edgembed's and a busy moment hits all alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

CHILD = r"""
import json, sys, time
import numpy as np
import torch
import sentence_transformers
from sentence_transformers import SentenceTransformer
args = json.load(open(sys.argv[1]))
model = SentenceTransformer(args["model_dir"], device="cpu")
model.max_seq_length = args["max_length"]
texts = args["texts"]
model.encode(texts[:64], batch_size=32)  # warm-up
print(json.dumps({"threads": torch.get_num_threads(), "torch": torch.__version__,
                  "st": sentence_transformers.__version__}), flush=True)
for line in sys.stdin:
    if line.strip() != "run":
        torch.set_num_threads(int(line))
    t = time.perf_counter()
    v = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    seconds = time.perf_counter() - t
    np.save(args["out"], v.astype(np.float32))
    print(json.dumps({"seconds": seconds}), flush=True)
"""


class SentenceTransformersChild:
    """One sentence-transformers process embedding ``texts`` (batch 32, normalized) on demand.

    ``info``: its torch and sentence-transformers versions and default thread count."""

    def __init__(self, python: str, model_dir: Path, texts: list[str],
                 max_length: int = 256) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        d = Path(self.tmp.name)
        self.out = d / "v.npy"
        (d / "args.json").write_text(json.dumps({"model_dir": str(model_dir), "texts": texts,
                                                 "out": str(self.out),
                                                 "max_length": max_length}), encoding="utf-8")
        (d / "st.py").write_text(CHILD, encoding="utf-8")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.proc = subprocess.Popen([python, str(d / "st.py"), str(d / "args.json")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env)
        self.info: dict[str, Any] = self._reply()

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the sentence-transformers process ended early")
        data: dict[str, Any] = json.loads(line)
        return data

    def run(self, threads: int | None = None) -> tuple[float, npt.NDArray[np.float32]]:
        """Embed every text once (with ``threads`` torch threads, else its default); the
        encode time in seconds and the vectors."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n" if threads is None else f"{threads}\n")
        self.proc.stdin.flush()
        seconds = float(self._reply()["seconds"])
        return seconds, np.load(self.out)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=300)
        self.tmp.cleanup()
