"""onnxruntime backend: CPU, and CUDA where onnxruntime-gpu and a GPU are present.

On CUDA the batch goes through I/O binding: the int64 inputs are copied to the device once,
only the pooled (B, D) output is allocated there and copied back, and the (B, T, D) token
states never leave the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import BackendUnavailable

__all__ = ["OUTPUTS", "OnnxBackend", "cuda_available", "pad_batch"]

OUTPUTS = ("pooled", "logits", "sparse_embedding")  # by task: embedding, rerank, sparse


def pad_batch(
    batch: Sequence[Sequence[int]],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(input_ids, attention_mask), padded with 0 to the batch's longest sequence."""
    width = max((len(s) for s in batch), default=0)
    ids = np.zeros((len(batch), max(width, 1)), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, seq in enumerate(batch):
        ids[i, : len(seq)] = seq
        mask[i, : len(seq)] = 1
    return ids, mask


def cuda_available() -> tuple[bool, str]:
    """Whether the CUDA provider can run here, and if not, why."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False, ("onnxruntime has no CUDA provider (pip install 'edgembed[cuda]', which "
                       "installs onnxruntime-gpu in place of onnxruntime)")
    try:
        import ctypes

        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False, "no NVIDIA driver found (libcuda.so.1 cannot be loaded)"
    return True, "CUDA provider and driver present"


class OnnxBackend:
    """Runs an exported edgembed ONNX model with onnxruntime.

    ``InferenceSession.run`` may be called from several threads at once (``thread_safe``);
    the Embedder still runs one batch at a time, which is faster on a CPU.
    """

    thread_safe = True

    def __init__(
        self,
        model_path: Path,
        *,
        device: str = "cpu",
        threads: int | None = None,
        device_id: int = 0,
    ):
        import onnxruntime as ort

        if device not in ("cpu", "cuda"):
            raise BackendUnavailable(f"unknown onnxruntime device {device!r} (cpu or cuda)")

        so = ort.SessionOptions()
        so.log_severity_level = 3
        if threads:
            so.intra_op_num_threads = int(threads)
            so.inter_op_num_threads = 1
        providers: list[Any]
        if device == "cuda":
            ok, why = cuda_available()
            if not ok:
                raise BackendUnavailable(f"backend 'cuda' cannot run here: {why}")
            providers = [
                ("CUDAExecutionProvider", {"device_id": device_id,
                                           "arena_extend_strategy": "kSameAsRequested"}),
                "CPUExecutionProvider",
            ]
        else:
            providers = ["CPUExecutionProvider"]
        try:
            self.session = ort.InferenceSession(str(model_path), so, providers=providers)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise BackendUnavailable(f"onnxruntime cannot load {model_path}: {exc}") from None
        if device == "cuda" and "CUDAExecutionProvider" not in self.session.get_providers():
            raise BackendUnavailable(
                "onnxruntime could not start its CUDA provider (check the CUDA and cuDNN "
                "libraries onnxruntime-gpu needs)"
            )
        self.name = "cuda" if device == "cuda" else "onnx"
        self.device = device
        self.device_id = device_id
        self.model_path = Path(model_path)
        out = {o.name: o for o in self.session.get_outputs()}
        # The model's per-text output: an embedding model's pooled vector (not normalized), a
        # cross-encoder's logits or a SPLADE model's sparse vector (export/graph.py).
        self.output = next((n for n in OUTPUTS if n in out), None)
        if self.output is None:
            raise BackendUnavailable(f"{model_path} is not an edgembed model: it has none of "
                                     f"the outputs {', '.join(OUTPUTS)}; re-export it")
        self.dim = int(out[self.output].shape[-1])
        inputs = {i.name for i in self.session.get_inputs()}
        # A model whose pooling leaves the prompt out takes each text's prompt length.
        self.takes_prompt_length = "prompt_length" in inputs
        # A BERT cross-encoder reads the document's tokens as type 1.
        self.takes_token_types = "token_type_ids" in inputs

    def encode(
        self, batch: Sequence[Sequence[int]], prompt_lengths: Sequence[int] | None = None,
        token_types: Sequence[Sequence[int]] | None = None,
    ) -> npt.NDArray[np.float32]:
        """Pooled vectors (or logits, or sparse vectors: ``output``); ``prompt_lengths``
        (tokens of each text's prompt, its leading special token included) matter only to a
        model that pools without the prompt, ``token_types`` (one per token) only to a
        cross-encoder that takes them (else they are 0)."""
        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        ids, mask = pad_batch(batch)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self.takes_token_types:
            types = np.zeros_like(ids)
            for i, seq in enumerate(token_types or ()):
                if len(seq) != len(batch[i]):
                    raise ValueError(f"{len(seq)} token types for {len(batch[i])} tokens")
                types[i, : len(seq)] = seq
            feeds["token_type_ids"] = types
        if self.takes_prompt_length:
            lengths = prompt_lengths if prompt_lengths is not None else [0] * len(batch)
            if len(lengths) != len(batch):
                raise ValueError(f"{len(lengths)} prompt lengths for {len(batch)} texts")
            feeds["prompt_length"] = np.asarray(lengths, dtype=np.int64)
        if self.device == "cuda":
            return self._encode_bound(feeds)
        (pooled,) = self.session.run([self.output], feeds)
        return np.asarray(pooled, dtype=np.float32)

    def token_embeddings(self, batch: Sequence[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        """The encoder's last hidden states, one (len(seq), C) array per sequence (before
        pooling; the padding positions are left out)."""
        if not batch:
            return []
        ids, mask = pad_batch(batch)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self.takes_prompt_length:
            feeds["prompt_length"] = np.zeros(len(batch), dtype=np.int64)
        (states,) = self.session.run(["token_embeddings"], feeds)
        return [np.array(states[i, : len(seq)], dtype=np.float32) for i, seq in enumerate(batch)]

    def _encode_bound(self, feeds: dict[str, npt.NDArray[np.int64]]) -> npt.NDArray[np.float32]:
        # One binding per call: bindings hold per-run state, and calls may be concurrent.
        binding = self.session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        binding.bind_output(self.output, "cuda", self.device_id)
        self.session.run_with_iobinding(binding)
        (pooled,) = binding.copy_outputs_to_cpu()
        return np.asarray(pooled, dtype=np.float32)
