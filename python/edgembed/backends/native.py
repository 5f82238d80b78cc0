"""The C engine compiled for this CPU (``libedgembed.so``), called through ctypes.

This is the fast, accurate int8 CPU backend: the same engine, bundle and arithmetic as the wasm
builds (the vectors are bit-identical to theirs), on the host's own vector instructions
(AVX-512 VNNI, AVX-VNNI, AVX2 on x86-64; NEON with or without the dot product on ARM64), picked
by the library at run time after a self-check against its reference kernels.

Where the library comes from (``find_library``): the argument, ``$EDGEMBED_NATIVE_LIB``, the
installed package's ``edgembed/_native/`` folder (platform wheels carry it), or a source
checkout's ``build/native/`` (``./build.sh native``). Before loading, the file's ELF header is
checked against this machine, so a library for another architecture or a damaged file gives a
clear ``BackendUnavailable`` instead of a crash; the library itself is compiled for the baseline
instruction set and only runs the vector code the CPU reports, so a CPU without AVX2 or the dot
product gets slower kernels, never an illegal instruction.

Calls: token ids go in as one packed int32 array and vectors are written by the engine straight
into the numpy result (no copy); ctypes releases the GIL for the duration of each call. A
batch that fits one engine call (the Embedder's short texts) reuses the request, output and id
buffers made at load, so its Python cost is a few microseconds (``encode``). The
engine's own thread pool (``threads``, default: the cores this process may use) splits every
call, so there is no point in calling one backend from several threads at once: calls are
serialized by a lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NoReturn

import numpy as np
import numpy.typing as npt

from .. import env
from ..errors import BackendUnavailable, BundleError, EngineError, InputError, InputTooLong
from ._abi import (
    MODEL_CONFIG,
    MODEL_INFO,
    OUTPUT,
    REQUEST,
    Head,
    Output,
    SparsePooling,
    Status,
    declare,
    pooling_name,
)
from ._engine import (
    Token,
    count_text_tokens,
    raise_status,
    text_too_long,
    tokenize_texts,
    tokens_with_offsets,
)

__all__ = ["NativeBackend", "NativeLibrary", "find_library", "load_library", "native_available"]

_MAX_THREADS = 64
_LIB_NAME = "libedgembed.so"

# ELF e_machine values of the architectures the engine is built for
_ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64"}


def _this_machine() -> str:
    return env.HOST.machine  # x86_64, aarch64, or as the platform names it


def find_library(explicit: Path | str | None = None) -> Path:
    """Where libedgembed.so is: the argument, ``$EDGEMBED_NATIVE_LIB``, the installed package's
    ``_native`` folder, or a source checkout's ``build/native`` (then ``build/native-<arch>``)."""
    here = Path(__file__).resolve()
    env = os.environ.get("EDGEMBED_NATIVE_LIB")
    if explicit is not None or env:
        path = Path(explicit if explicit is not None else str(env))
        if not path.is_file():
            raise BackendUnavailable(f"the native engine library {path} does not exist")
        return path
    candidates = [
        here.parents[1] / "_native" / _LIB_NAME,
        here.parents[3] / "build" / "native" / _LIB_NAME,
        here.parents[3] / "build" / f"native-{_this_machine()}" / _LIB_NAME,
    ]
    for c in candidates:
        if c.is_file():
            return c
    raise BackendUnavailable(
        "the native engine (libedgembed.so) is not in this installation (looked in "
        "$EDGEMBED_NATIVE_LIB, the package's _native folder and build/native): install a "
        "platform wheel of edgembed, or build it from a source checkout with `./build.sh "
        "native`; backend='onnx' works meanwhile"
    )


def check_library_file(path: Path) -> None:
    """Refuse, with a clear message, a file that is not a 64-bit little-endian ELF shared
    library for this machine's architecture (before dlopen sees it)."""
    if env.HOST.os != "linux":
        raise BackendUnavailable(
            f"the native engine is built for Linux; this is {env.HOST.os}: use backend='onnx'"
        )
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise BackendUnavailable(f"cannot read the native engine {path}: {exc}") from None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        raise BackendUnavailable(
            f"{path} is not a shared library (no ELF header: a damaged or partial file); "
            "reinstall edgembed or rebuild it with `./build.sh native`"
        )
    if head[4] != 2 or head[5] != 1:
        raise BackendUnavailable(f"{path} is not a 64-bit little-endian library")
    machine = int.from_bytes(head[18:20], "little")
    built_for = _ELF_MACHINES.get(machine, f"ELF machine {machine:#x}")
    if built_for != _this_machine():
        raise BackendUnavailable(
            f"{path} was built for {built_for}, but this machine is {_this_machine()}: install "
            "the wheel for this platform or rebuild with `./build.sh native`"
        )
    damaged = (f"{path} is damaged (shorter than its segments, or not matching its recorded "
               "sha256); reinstall edgembed or rebuild it with `./build.sh native`")
    # dlopen maps every loadable segment from the file: one that ends past the end of a
    # truncated file would be a SIGBUS inside dlopen, so check them first
    size = path.stat().st_size
    phoff = int.from_bytes(head[32:40], "little")
    phentsize, phnum = int.from_bytes(head[54:56], "little"), int.from_bytes(head[56:58], "little")
    if phentsize < 56 or phoff + phentsize * phnum > size:
        raise BackendUnavailable(damaged)
    with open(path, "rb") as f:
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    for i in range(phnum):
        ph = table[i * phentsize : (i + 1) * phentsize]
        if int.from_bytes(ph[0:4], "little") == 1:  # PT_LOAD
            offset, filesz = int.from_bytes(ph[8:16], "little"), int.from_bytes(ph[32:40], "little")
            if offset + filesz > size:
                raise BackendUnavailable(damaged)
    # a wheel records the library's sha256 beside it
    recorded = path.with_name(path.name + ".sha256")
    if recorded.is_file():
        import hashlib

        want = recorded.read_text(encoding="ascii", errors="replace").split()[:1]
        if not want or hashlib.sha256(path.read_bytes()).hexdigest() != want[0].lower():
            raise BackendUnavailable(damaged)


_ModelInfo = MODEL_INFO.as_ctypes


@dataclass(frozen=True)
class NativeLibrary:
    """A loaded libedgembed.so with its functions typed, and what its self-check found."""

    path: Path
    cdll: ctypes.CDLL
    kernels: tuple[str, ...]  # the kernel sets this CPU runs and that passed, best first

    @property
    def best_kernels(self) -> str:
        return self.kernels[0]


@lru_cache(maxsize=8)
def _load(path: str) -> NativeLibrary:
    p = Path(path)
    check_library_file(p)
    try:
        cdll = ctypes.CDLL(path)
    except OSError as exc:
        raise BackendUnavailable(
            f"cannot load the native engine {path}: {exc}; rebuild it with `./build.sh native`"
        ) from None
    try:
        declare(cdll)
    except AttributeError as exc:
        raise BackendUnavailable(
            f"{path} is an older or foreign build of the engine ({exc}); rebuild it with "
            "`./build.sh native`"
        ) from None
    kernels = tuple(cdll.emb_kernels_available().decode().split())
    if not kernels:
        raise BackendUnavailable(f"{path}: no kernel set passed the engine's self-check")
    return NativeLibrary(p, cdll, kernels)


def load_library(path: Path | str | None = None) -> NativeLibrary:
    """Find, check and load libedgembed.so once per process (runs its kernel self-check)."""
    return _load(str(find_library(path).resolve()))


def native_available(path: Path | str | None = None) -> tuple[bool, str]:
    """Whether the native backend should be picked automatically here, and why (not).

    Yes when the library loads and a vectorized kernel set passed its self-check; the plain C
    reference alone is correct but slower than onnxruntime, so it does not count.
    """
    try:
        lib = load_library(path)
    except BackendUnavailable as exc:
        return False, str(exc)
    if lib.best_kernels == "reference":
        return False, "the native engine has no vector kernels for this CPU (reference only)"
    return True, f"native engine with {lib.best_kernels} kernels ({lib.path})"


def _default_threads() -> int:
    return max(1, min(env.HOST.cores, _MAX_THREADS))


class NativeBackend:
    """The edgembed engine as a native library. One call at a time (a lock), each call spread
    over the engine's ``threads``."""

    name = "native"
    thread_safe = True

    def __init__(
        self,
        bundle: Path | str,
        *,
        threads: int | None = None,
        max_tokens: int = 2048,
        library: Path | str | None = None,
        kernels: str | None = None,
        sha256: str | None = None,
    ) -> None:
        """Load ``bundle`` (.emb). ``threads``: engine threads per call, the caller's included
        (default: the cores this process may use). ``kernels``: a kernel set name from
        ``available_kernels`` (default: ``$EDGEMBED_NATIVE_KERNELS`` or the best one).
        ``max_tokens``: tokens per engine call (bigger batches are cut). ``sha256``: the
        bundle's digest as the model manifest records it, checked on the bytes loaded
        (ChecksumMismatch when they differ)."""
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or not 1 <= threads <= _MAX_THREADS):
            raise InputError(
                f"threads must be an integer from 1 to {_MAX_THREADS}, not {threads!r}"
            )
        self._lib = load_library(library)
        lib = self._lib.cdll
        self._c = lib
        self._lock = threading.Lock()
        self._model = ctypes.c_void_p()
        self._ctx = ctypes.c_void_p()

        path = Path(bundle)
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise BundleError(f"{path}: {exc}") from None
        if size == 0:
            raise BundleError(f"{path} is empty (0 bytes), not a bundle; write it again with "
                              "`embed bundle MODEL`")
        # the model references the bundle's bytes: keep them alive, 64-byte aligned, read once
        self._buf = np.empty(size + 64, dtype=np.uint8)
        off = -self._buf.ctypes.data % 64
        self._bytes = self._buf[off : off + size]
        with open(path, "rb") as f:
            if f.readinto(self._bytes.data) != size:
                raise BundleError(f"{path}: could not read the whole file")
        from ..export.bundle import check_bundle

        check_bundle(self._bytes.data, sha256=sha256, name=str(path))
        st = lib.emb_model_init(ctypes.byref(self._model), self._bytes.ctypes.data, size)
        if st != Status.OK:
            self._raise(st, str(path))
        raw = _ModelInfo()
        lib.emb_model_get_info(self._model, ctypes.byref(raw))
        info = MODEL_INFO.from_ctypes(raw)
        self.dim, self.max_length = int(info["dim"]), int(info["max_length"])
        self.pooling = pooling_name(info["pooling"])
        self.normalized_by_model = bool(info["normalize"])
        self.bundle_version = int(info["version"])
        self.bundle_path = path
        raw_config = MODEL_CONFIG.as_ctypes()
        lib.emb_model_get_config(self._model, ctypes.byref(raw_config))
        self.config = MODEL_CONFIG.from_ctypes(raw_config)  # emb_model_config's fields
        self.hidden_dim = int(self.config["hidden_dim"])
        self.type_vocab_size = int(self.config["type_vocab_size"])
        self.include_prompt = bool(self.config["include_prompt"])
        self.takes_prompt_length = True  # encode(..., prompt_lengths=) leaves prompts out

        self.max_tokens = max(int(max_tokens), self.max_length)
        n_threads = threads if threads is not None else _default_threads()
        wanted = kernels or os.environ.get("EDGEMBED_NATIVE_KERNELS") or None
        if wanted and wanted not in self._lib.kernels:
            self.close()
            raise BackendUnavailable(
                f"kernel set {wanted!r} is not available here; this CPU runs: "
                f"{', '.join(self._lib.kernels)}"
            )
        st = lib.emb_context_init_ex(
            ctypes.byref(self._ctx), self._model, self.max_tokens, n_threads,
            wanted.encode() if wanted else None,
        )
        if st != Status.OK:
            self.close()
            self._raise(st, "context")
        self.threads = int(lib.emb_context_threads(self._ctx))
        self.kernels = lib.emb_context_kernels(self._ctx).decode()
        self._tok_cap = max(4 * self.max_length, 1024)
        self._tok = np.empty(self._tok_cap, dtype=np.int32)
        self._n_ids, self._n_full = ctypes.c_size_t(), ctypes.c_size_t()
        # encode()'s one-call path: its request, output and id buffers are made once, at
        # fixed addresses, and only the fields that change are written per call (under the
        # lock); run_packed builds its own for the general case
        self._run = lib.emb_context_run
        self._ids_buf = np.empty(self.max_tokens, dtype=np.int32)
        self._lengths_buf = np.empty(self.max_tokens, dtype=np.int32)
        self._request = REQUEST.as_ctypes(
            ids=self._ids_buf.ctypes.data, lengths=self._lengths_buf.ctypes.data,
            output=int(Output.EMBEDDING), include_prompt=-1)
        self._output = OUTPUT.as_ctypes()
        self._request_ref = ctypes.byref(self._request)
        self._output_ref = ctypes.byref(self._output)

    # ── description ──

    @property
    def library_path(self) -> Path:
        return self._lib.path

    @property
    def available_kernels(self) -> tuple[str, ...]:
        """Kernel sets this CPU runs that passed the self-check, best first."""
        return self._lib.kernels

    def describe(self) -> str:
        """One line: kernels, threads, and the library in use."""
        return (f"native engine: {self.kernels} kernels, {self.threads} thread"
                f"{'s' if self.threads != 1 else ''} (available: {' '.join(self._lib.kernels)}; "
                f"{self._lib.path})")

    def __repr__(self) -> str:
        return (f"NativeBackend(kernels={self.kernels!r}, threads={self.threads}, "
                f"dim={self.dim}, library={str(self._lib.path)!r})")

    # ── errors ──

    def _raise(self, status: int, what: str) -> NoReturn:
        raise_status(status, f"{what}: {self._c.emb_status_str(status).decode()}")

    # ── the Backend interface ──

    def _tokenize_one(self, text: str, truncate: bool) -> tuple[list[int], int]:
        data = text.encode("utf-8", errors="surrogatepass")
        n_ids, n_full = self._n_ids, self._n_full
        st = self._c.emb_model_tokenize(self._model, data, len(data), int(truncate),
                                        self._tok.ctypes.data, self._tok_cap,
                                        ctypes.byref(n_ids), ctypes.byref(n_full))
        if st == Status.TOO_LONG:
            return [], int(n_full.value)
        if st != Status.OK:
            self._raise(st, "tokenize")
        return self._tok[: n_ids.value].tolist(), int(n_full.value)

    def tokenize(self, texts: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Token ids of each text with [CLS]/[SEP], by the engine's own tokenizer."""
        with self._lock:
            return tokenize_texts(self._tokenize_one, texts, truncate, self.max_length)

    def count_tokens(self, texts: Sequence[str], truncate: bool = True) -> list[int]:
        """Tokens each text costs the encoder (its full length when truncate is False)."""
        with self._lock:
            return count_text_tokens(self._tokenize_one, texts, truncate)

    def tokenize_offsets(self, texts: Sequence[str], truncate: bool = True) -> list[list[Token]]:
        """Each text's tokens as (id, start, end): the token covers ``text[start:end]`` (the
        offsets of Hugging Face tokenizers; the special tokens the template adds are (0, 0))."""
        out = []
        offs = np.empty(2 * self._tok_cap, dtype=np.uint32)
        with self._lock:
            for text in texts:
                data = text.encode("utf-8", errors="surrogatepass")
                n_ids, n_full = self._n_ids, self._n_full
                st = self._c.emb_model_tokenize_ex(
                    self._model, data, len(data), None, 0, int(truncate), self._tok.ctypes.data,
                    None, offs.ctypes.data, self._tok_cap, ctypes.byref(n_ids),
                    ctypes.byref(n_full),
                )
                if st == Status.TOO_LONG:
                    raise text_too_long(n_full.value, self.max_length)
                if st != Status.OK:
                    self._raise(st, "tokenize")
                n = n_ids.value
                out.append(tokens_with_offsets(text, self._tok[:n].tolist(),
                                               offs[: 2 * n].tolist()))
        return out

    def encode(
        self,
        batch: Sequence[Sequence[int]],
        *,
        type_ids: Sequence[Sequence[int]] | None = None,
        prompt_lengths: Sequence[int] | None = None,
    ) -> npt.NDArray[np.float32]:
        """Pooled, not normalized vectors (n, dim) of a batch of id sequences. ``type_ids``: one
        list of token types per sequence (sentence pairs); ``prompt_lengths``: leading prompt
        tokens per sequence (see ``encode_packed``)."""
        if type_ids is None and prompt_lengths is None:
            vectors = self._encode_one_call(batch)
            if vectors is not None:
                return vectors
        lengths = np.fromiter((len(s) for s in batch), dtype=np.int32, count=len(batch))
        ids = np.fromiter(itertools.chain.from_iterable(batch), dtype=np.int32,
                          count=int(lengths.sum()))
        types = None
        if type_ids is not None:
            if len(type_ids) != len(batch) or any(
                    len(t) != len(s) for t, s in zip(type_ids, batch, strict=True)):
                raise InputError("type_ids needs one token type per token of each sequence")
            types = np.fromiter(itertools.chain.from_iterable(type_ids), dtype=np.int32,
                                count=ids.size)
        prompts = None if prompt_lengths is None else np.asarray(prompt_lengths, dtype=np.int32)
        return self.encode_packed(ids, lengths, type_ids=types, prompt_lengths=prompts)

    def _encode_one_call(self, batch: Sequence[Sequence[int]]
                         ) -> npt.NDArray[np.float32] | None:
        """``encode`` of a batch that is one engine call with nothing to refuse (every
        sequence 1..max_length ids, max_tokens in all): the same request as ``run_packed``
        makes, through the buffers made at load, with the checks on Python ints. None when
        the batch needs ``run_packed`` (a cut into several calls, or an error to raise)."""
        lengths = [len(s) for s in batch]
        n = len(lengths)
        if not n:
            return None
        total = sum(lengths)
        if total > self.max_tokens or max(lengths) > self.max_length or min(lengths) < 1:
            return None
        ids = np.fromiter(itertools.chain.from_iterable(batch), dtype=np.int32, count=total)
        result = np.empty((n, self.dim), dtype=np.float32)
        with self._lock:
            if not self._ctx:
                raise EngineError("this backend is closed")
            self._ids_buf[:total] = ids
            self._lengths_buf[:n] = lengths
            self._request.n_seqs = n
            out = self._output
            out.values, out.values_cap = result.ctypes.data, result.size
            st = self._run(self._ctx, self._request_ref, self._output_ref)
        if st != Status.OK:
            self._raise(st, "encode")
        return result

    def encode_packed(
        self,
        ids: npt.NDArray[np.int32],
        lengths: npt.NDArray[np.int32],
        *,
        type_ids: npt.NDArray[np.int32] | None = None,
        prompt_lengths: npt.NDArray[np.int32] | None = None,
        tokens: bool = False,
    ) -> npt.NDArray[np.float32]:
        """Like ``encode``, for sequences already packed back to back in one int32 array
        (``lengths`` ids each): read in place by the engine, no copy. ``type_ids``: one token
        type per id (sentence pairs; models with token types); ``prompt_lengths``: leading
        prompt tokens per sequence, left out of the pooling when the model's Pooling module says
        include_prompt false. ``tokens``: the last hidden states (T, hidden_dim) instead."""
        values, _ = self.run_packed(ids, lengths, output=Output.TOKENS if tokens else
                                    Output.EMBEDDING, type_ids=type_ids,
                                    prompt_lengths=prompt_lengths)
        return values

    def scores(self, batch: Sequence[Sequence[int]], *,
               type_ids: Sequence[Sequence[int]] | None = None) -> npt.NDArray[np.float32]:
        """The classification head's logits (n, n_labels) of each sequence (a reranker's
        query-document pairs: their ids and token types as the tokenizer's pair template
        gives them). Only for bundles with head "classifier" (``config["head"]``)."""
        ids, lengths, types = self._pack(batch, type_ids)
        return self.run_packed(ids, lengths, output=Output.SCORES, type_ids=types)[0]

    def sparse(self, batch: Sequence[Sequence[int]], *,
               type_ids: Sequence[Sequence[int]] | None = None, top_k: int = 0,
               per_token: bool = False, pooling: SparsePooling = SparsePooling.MODEL,
               ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int32] | None]:
        """SPLADE weights from the masked-LM head: per sequence (pooled over its tokens as
        ``pooling`` says, the model's by default) or per token, every vocabulary entry's
        (rows, vocab_size) and no indices, or with ``top_k`` the k largest of each row (rows,
        k) with their vocabulary ids (id −1, weight 0 past a row's nonzero weights). Only for
        bundles with head "mlm"."""
        ids, lengths, types = self._pack(batch, type_ids)
        return self.run_packed(ids, lengths, output=Output.SPARSE, type_ids=types,
                               top_k=top_k, per_token=per_token, pooling=int(pooling))

    @staticmethod
    def _pack(batch: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]] | None
              ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32],
                         npt.NDArray[np.int32] | None]:
        lengths = np.fromiter((len(s) for s in batch), dtype=np.int32, count=len(batch))
        ids = np.fromiter(itertools.chain.from_iterable(batch), dtype=np.int32,
                          count=int(lengths.sum()))
        if type_ids is None:
            return ids, lengths, None
        if len(type_ids) != len(batch) or any(
                len(t) != len(s) for t, s in zip(type_ids, batch, strict=True)):
            raise InputError("type_ids needs one token type per token of each sequence")
        return ids, lengths, np.fromiter(itertools.chain.from_iterable(type_ids),
                                         dtype=np.int32, count=ids.size)

    def run_packed(
        self,
        ids: npt.NDArray[np.int32],
        lengths: npt.NDArray[np.int32],
        *,
        output: Output = Output.EMBEDDING,
        type_ids: npt.NDArray[np.int32] | None = None,
        prompt_lengths: npt.NDArray[np.int32] | None = None,
        top_k: int = 0,
        per_token: bool = False,
        pooling: int = 0,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int32] | None]:
        """One ``emb_context_run`` request (edgembed.h) over packed sequences, cut into calls
        of at most ``max_tokens`` tokens (a sequence is never split; no result depends on the
        cut): (values, indices) with one row per sequence, or per token (TOKENS, SPARSE
        ``per_token``); indices only for SPARSE with ``top_k``. ``pooling``: EMBEDDING's
        emb_pooling, SPARSE's emb_sparse_pooling (0: the model's)."""
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        lengths = np.ascontiguousarray(lengths, dtype=np.int32)
        if lengths.ndim != 1 or ids.ndim != 1 or int(lengths.sum()) != ids.size:
            raise InputError("ids must be one flat array holding sum(lengths) token ids")
        if type_ids is not None:
            type_ids = np.ascontiguousarray(type_ids, dtype=np.int32)
            if type_ids.shape != ids.shape:
                raise InputError("type_ids must hold one token type per id")
            if not self.type_vocab_size:
                raise InputError("this model has no token types: pass type_ids=None")
        if prompt_lengths is not None:
            prompt_lengths = np.ascontiguousarray(prompt_lengths, dtype=np.int32)
            if prompt_lengths.shape != lengths.shape:
                raise InputError("prompt_lengths must hold one count per sequence")
        head = int(self.config["head"])
        if output == Output.SCORES and head != Head.CLASSIFIER:
            raise InputError("scores need a bundle with a classification head (a reranker)")
        if output == Output.SPARSE and head != Head.MLM:
            raise InputError("sparse weights need a bundle with a masked-LM head (SPLADE)")
        vocab = int(self.config["vocab_size"])
        if output == Output.SPARSE and not 0 <= top_k <= vocab:
            raise InputError(f"top_k must be within 0..{vocab} (the vocabulary)")
        per_tok = output == Output.TOKENS or (output == Output.SPARSE and per_token)
        width = {Output.EMBEDDING: self.dim, Output.TOKENS: self.hidden_dim,
                 Output.SCORES: int(self.config["n_labels"]),
                 Output.SPARSE: top_k or vocab}[Output(output)]
        n = lengths.size
        rows_total = int(ids.size) if per_tok else n
        result = np.empty((rows_total, width), dtype=np.float32)
        indices = (np.empty((rows_total, width), dtype=np.int32)
                   if output == Output.SPARSE and top_k else None)
        if n == 0:
            return result, indices
        too_long = lengths > self.max_length
        if too_long.any():
            i = int(np.argmax(too_long))
            raise InputTooLong(f"a sequence of {int(lengths[i])} tokens exceeds max_length "
                               f"{self.max_length}")
        if (lengths < 1).any():
            raise InputError("every sequence needs at least one token")
        if prompt_lengths is not None and (
                (prompt_lengths < 0) | (prompt_lengths >= lengths)).any():
            raise InputError("a prompt must leave at least one token of its sequence")
        starts = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
        request = REQUEST.as_ctypes()
        request.output, request.pooling, request.normalize, request.include_prompt = (
            int(output), pooling, 0, -1)
        request.top_k, request.per_token = (top_k, int(per_token)) if output == Output.SPARSE \
            else (0, 0)
        out_struct = OUTPUT.as_ctypes()
        with self._lock:
            if not self._ctx:
                raise EngineError("this backend is closed")
            first = 0
            while first < n:  # calls of at most max_tokens tokens (a sequence is never split)
                last = first + 1
                while last < n and starts[last + 1] - starts[first] <= self.max_tokens:
                    last += 1
                t0 = int(starts[first])
                r0, r1 = (t0, int(starts[last])) if per_tok else (first, last)
                out = result[r0:r1]
                request.ids = ids.ctypes.data + 4 * t0
                request.lengths = lengths.ctypes.data + 4 * first
                request.n_seqs = last - first
                request.type_ids = None if type_ids is None else type_ids.ctypes.data + 4 * t0
                request.prompt_lengths = (None if prompt_lengths is None
                                          else prompt_lengths.ctypes.data + 4 * first)
                out_struct.values, out_struct.values_cap = out.ctypes.data, out.size
                out_struct.indices = None if indices is None else indices[r0:r1].ctypes.data
                st = self._c.emb_context_run(self._ctx, ctypes.byref(request),
                                             ctypes.byref(out_struct))
                if st != Status.OK:
                    self._raise(st, "encode")
                first = last
        return result, indices

    def close(self) -> None:
        """Free the engine's context (and its threads) and model."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            if getattr(self, "_ctx", None):
                self._c.emb_context_free(self._ctx)
                self._ctx = ctypes.c_void_p()
            if getattr(self, "_model", None):
                self._c.emb_model_free(self._model)
                self._model = ctypes.c_void_p()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the library may be gone
            self.close()
