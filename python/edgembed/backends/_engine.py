"""The engine's wasm exports, driven by the same code on every Python host.

::

    WasmHost (wasmtime in CPython │ js.WebAssembly in Pyodide): call an export, copy bytes in/out
        └─► Engine: bundle into wasm memory ─► model + context ─► tokenize ─► encode

A host adapter does three things only: call an export with i32 arguments, copy bytes into the
module's memory, and copy bytes out of it (``WasmHost``). Everything the engine needs beyond
that — buffers allocated once with ``emb_alloc_wasm``, statuses turned into edgembed errors,
batches cut to the context's token budget — lives here, once, so both hosts give the same
results for the same reasons. Nothing here needs numpy: ids go in as ``array('i')`` bytes and
vectors come out into any writable buffer (a numpy array's, or an ``array('f')``).

wasm is little-endian; on a big-endian CPython the arrays are byte-swapped on the way.
"""

from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Callable, Sequence
from io import BufferedReader
from pathlib import Path
from typing import Any, NoReturn, Protocol, Union

from ..errors import BundleError, ChecksumMismatch, EngineError, InputTooLong, ModelNotFound
from ._abi import (
    BUNDLE_STATUSES,
    MODEL_CONFIG,
    MODEL_INFO,
    OUTPUT,
    REQUEST,
    WASM_SIZE_T_BYTES,
    Head,
    Output,
    Status,
    pooling_name,
)

__all__ = [
    "BundleSource", "Engine", "WasmHost", "open_bundle", "raise_status", "text_too_long",
]

_BIG_ENDIAN = sys.byteorder == "big"
_COPY_CHUNK = 1 << 20  # a bundle file goes into wasm memory 1 MiB at a time
_OUTPUT_BUDGET = 64 << 20  # result bytes per call before a batch is cut (a sequence may pass it)

# bytes in memory (from Python or a fetch), or a path to a .emb file
BundleSource = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]


def raise_status(status: int, message: str) -> NoReturn:
    """Raise the edgembed error for an engine status that is not OK (``message``: what failed and
    the engine's ``emb_status_str``)."""
    if status in BUNDLE_STATUSES:
        raise BundleError(message)
    if status == Status.TOO_LONG:
        raise InputTooLong(message)
    raise EngineError(message)


def text_too_long(n_tokens: int, max_length: int) -> InputTooLong:
    """The error for a text of ``n_tokens`` the engine refused (``EMB_STATUS_TOO_LONG``) because
    truncation was off: the same message from every engine host."""
    return InputTooLong(
        f"a text has {n_tokens} tokens, more than the model's max_length "
        f"{max_length}; pass truncate=True or shorten it"
    )


def tokenize_texts(
    tokenize_one: Callable[[str, bool], tuple[list[int], int]],
    texts: Sequence[str],
    truncate: bool,
    max_length: int,
) -> list[list[int]]:
    """Every text through an engine's ``tokenize_one`` (ids, full length); a text the engine
    returns no ids for is over ``max_length`` with ``truncate`` off: InputTooLong."""
    out = []
    for t in texts:
        ids, full = tokenize_one(t, truncate)
        if not ids:
            raise text_too_long(full, max_length)
        out.append(ids)
    return out


def count_text_tokens(
    tokenize_one: Callable[[str, bool], tuple[list[int], int]],
    texts: Sequence[str],
    truncate: bool,
) -> list[int]:
    """Tokens each text costs the encoder (its full length when ``truncate`` is off)."""
    counts = []
    for t in texts:
        ids, full = tokenize_one(t, truncate)
        counts.append(len(ids) if truncate else full)
    return counts


Token = tuple[int, int, int]  # (id, start, end): the token covers text[start:end]; specials (0, 0)


def char_offsets(text: str, byte_offsets: Sequence[int]) -> list[int]:
    """The engine's byte offsets into ``text.encode("utf-8", "surrogatepass")`` as indexes of
    ``text`` (code points, what ``text[start:end]`` takes)."""
    if text.isascii():
        return list(byte_offsets)
    at: dict[int, int] = {}
    pos = 0
    for i, ch in enumerate(text):
        at[pos] = i
        c = ord(ch)
        pos += 1 if c < 0x80 else 2 if c < 0x800 else 3 if c < 0x10000 else 4
    at[pos] = len(text)
    return [at[b] for b in byte_offsets]


def tokens_with_offsets(
    text: str, ids: Sequence[int], offsets: Sequence[int]
) -> list[Token]:
    """(id, start, end) per token from the engine's ids and byte offsets (two per id)."""
    chars = char_offsets(text, offsets)
    return [(int(i), chars[2 * k], chars[2 * k + 1]) for k, i in enumerate(ids)]


class WasmHost(Protocol):
    """One instantiated edgembed module (edgembed.wasm or edgembed-relaxed.wasm) on some host."""

    variant: str  # "simd128" or "relaxed"

    def call(self, name: str, *args: int) -> int:
        """Call export ``name`` with i32 arguments; its i32 result (0 for a void export)."""
        ...

    def write(self, ptr: int, data: memoryview) -> None:
        """Copy ``data`` (bytes, format "B") into the module's memory at ``ptr``."""
        ...

    def read_into(self, ptr: int, out: memoryview) -> None:
        """Copy ``len(out)`` bytes of the module's memory at ``ptr`` into ``out`` (format "B")."""
        ...


def _le(values: array[int]) -> memoryview:
    if _BIG_ENDIAN:
        values.byteswap()
    return memoryview(values).cast("B")


def open_bundle(source: BundleSource) -> tuple[str, int, BufferedReader | memoryview]:
    """(a name for messages, size, a binary file or the bytes) of a bundle source.

    A path that does not exist raises ModelNotFound, on every host alike.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = memoryview(source).cast("B")
        return f"<bundle of {data.nbytes} bytes>", data.nbytes, data
    path = Path(source)
    try:
        f = open(path, "rb")  # noqa: SIM115 (the caller closes it)
    except FileNotFoundError:
        raise ModelNotFound(
            f"the bundle {path} does not exist; export one with `embed bundle MODEL` "
            "(on CPython) and copy or fetch it here"
        ) from None
    except IsADirectoryError:
        raise BundleError(f"{path} is a directory, not a bundle (.emb) file") from None
    return str(path), os.fstat(f.fileno()).st_size, f


class Engine:
    """A model and one context on a ``WasmHost``. Not thread-safe: one call at a time."""

    def __init__(self, host: WasmHost, bundle: BundleSource, *, max_tokens: int = 2048,
                 sha256: str | None = None) -> None:
        """``sha256``: the digest the model manifest records for the bundle, checked on the
        bytes as they are copied in (ChecksumMismatch when they differ)."""
        import hashlib

        self.host = host
        self._model = self._ctx = 0
        name, size, data = open_bundle(bundle)
        if size == 0:
            if not isinstance(data, memoryview):
                data.close()
            raise BundleError(f"{name} is empty (0 bytes), not a bundle; write it again with "
                              "`embed bundle MODEL`")
        self.source = name
        digest = hashlib.sha256()
        # the model references the bundle in wasm memory for its whole life
        self._bundle_ptr = self._alloc(max(size, 1))
        if isinstance(data, memoryview):
            self._write(self._bundle_ptr, data)
            digest.update(data)
        else:
            with data:
                self._copy_file(data, size, name, digest)
        if sha256 is not None and digest.hexdigest() != sha256.lower():
            raise ChecksumMismatch(
                f"{name} differs from the one recorded in the model's manifest (sha256 "
                f"{digest.hexdigest()[:12]}…, recorded {sha256[:12]}…): it was altered or "
                "damaged; regenerate it with `embed bundle MODEL --force`")
        self._scratch = self._alloc(64)
        st = host.call("emb_model_init_wasm", self._scratch, self._bundle_ptr, size)
        if st != Status.OK:
            self._raise(st, name)
        self._model = self._u32(self._scratch)
        info_size = MODEL_INFO.size()  # wasm32
        info_ptr = self._alloc(info_size)
        host.call("emb_model_get_info_wasm", self._model, info_ptr)
        info = MODEL_INFO.unpack(self._read(info_ptr, info_size))
        host.call("emb_free_wasm", info_ptr)
        self.dim, self.max_length = info["dim"], info["max_length"]
        self.pooling = pooling_name(info["pooling"])
        self.normalized_by_model = bool(info["normalize"])
        self.bundle_version = info["version"]
        config_ptr = self._alloc(MODEL_CONFIG.size())
        host.call("emb_model_get_config_wasm", self._model, config_ptr)
        self.config = MODEL_CONFIG.unpack(self._read(config_ptr, MODEL_CONFIG.size()), "<")
        host.call("emb_free_wasm", config_ptr)
        self.hidden_dim = self.config["hidden_dim"]
        self.type_vocab_size = self.config["type_vocab_size"]
        self.include_prompt = bool(self.config["include_prompt"])

        self.max_tokens = max(int(max_tokens), self.max_length)
        st = host.call("emb_context_init_wasm", self._scratch, self._model, self.max_tokens)
        if st != Status.OK:
            self._raise(st, "context")
        self._ctx = self._u32(self._scratch)
        # input/output buffers, allocated once: ids, lengths, token types, prompt lengths, the
        # request and its result, vectors (or token states), text bytes, token ids
        self._ids = self._alloc(4 * self.max_tokens)
        self._lens = self._alloc(4 * self.max_tokens)
        self._types = self._alloc(4 * self.max_tokens)
        self._prompts = self._alloc(4 * self.max_tokens)
        self._req = self._alloc(REQUEST.size())
        self._res = self._alloc(OUTPUT.size())
        self._out_cap = 4 * self.max_tokens * max(self.dim, self.hidden_dim)
        self._out = self._alloc(self._out_cap)
        self._text_cap = 1 << 16
        self._text = self._alloc(self._text_cap)
        self._tok_cap = max(4 * self.max_length, 1024)
        self._tok = self._alloc(4 * self._tok_cap)
        self._offsets = 0  # two per token, allocated by the first tokenize_offsets
        self._tok_types = 0  # a pair's token types, allocated by the first tokenize_pair

    # ── memory ──

    def _alloc(self, size: int) -> int:
        ptr = self.host.call("emb_alloc_wasm", size)
        if ptr == 0:
            raise EngineError(f"wasm memory exhausted allocating {size} bytes")
        return ptr

    def _write(self, ptr: int, data: memoryview) -> None:
        if data.nbytes:
            self.host.write(ptr, data)

    def _copy_file(self, f: BufferedReader, size: int, name: str, digest: Any) -> None:
        buf = bytearray(min(size, _COPY_CHUNK))
        view = memoryview(buf)
        done = 0
        while done < size:
            n = f.readinto(view[: min(len(buf), size - done)])
            if not n:
                raise BundleError(f"{name}: could not read the whole file")
            self.host.write(self._bundle_ptr + done, view[:n])
            digest.update(view[:n])
            done += n

    def _put_text(self, data: bytes) -> None:
        """``data`` into the text buffer, grown first when it is too small."""
        if len(data) > self._text_cap:
            self.host.call("emb_free_wasm", self._text)
            self._text_cap = max(len(data), 2 * self._text_cap)
            self._text = self._alloc(self._text_cap)
        self._write(self._text, memoryview(data))

    def _read(self, ptr: int, n: int) -> bytes:
        out = bytearray(n)
        if n:
            self.host.read_into(ptr, memoryview(out))
        return bytes(out)

    def _u32(self, ptr: int) -> int:
        return int.from_bytes(self._read(ptr, 4), "little")

    def _i32s(self, ptr: int, n: int) -> list[int]:
        values = array("i", self._read(ptr, 4 * n))
        if _BIG_ENDIAN:
            values.byteswap()
        return values.tolist()

    def _cstring(self, ptr: int, limit: int = 4096) -> str:
        data = b""
        while len(data) < limit:
            chunk = self._read(ptr + len(data), 64)
            end = chunk.find(b"\0")
            if end >= 0:
                return (data + chunk[:end]).decode("utf-8", errors="replace")
            data += chunk
        return data.decode("utf-8", errors="replace")

    def _raise(self, status: int, what: str) -> NoReturn:
        text = self._cstring(self.host.call("emb_status_str_wasm", status))
        raise_status(status, f"{what}: {text}")

    # ── the model ──

    def meta(self, key: str) -> str | None:
        """A metadata string of the bundle (``name``, ``quantization``, …), None if absent."""
        data = key.encode("utf-8") + b"\0"
        if len(data) + 8 > self._text_cap:
            return None
        self._write(self._text, memoryview(data))
        ptr = self.host.call("emb_model_get_meta_wasm", self._model, self._text, self._scratch)
        if ptr == 0:
            return None
        return self._read(ptr, self._u32(self._scratch)).decode("utf-8", errors="replace")

    def tokenize_one(self, text: str, truncate: bool) -> tuple[list[int], int]:
        """(ids with [CLS]/[SEP], the text's full token count); ids are [] when the text is
        too long and ``truncate`` is off."""
        data = text.encode("utf-8", errors="surrogatepass")
        self._put_text(data)
        st = self.host.call(
            "emb_model_tokenize_wasm",
            self._model,
            self._text,
            len(data),
            int(truncate),
            self._tok,
            self._tok_cap,
            self._scratch,
            self._scratch + WASM_SIZE_T_BYTES,
        )
        counts = self._i32s(self._scratch, 2)
        if st == Status.TOO_LONG:
            return [], counts[1]
        if st != Status.OK:
            self._raise(st, "tokenize")
        return self._i32s(self._tok, counts[0]), counts[1]

    def tokenize(self, texts: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Token ids of each text with [CLS]/[SEP], by the engine's own tokenizer."""
        return tokenize_texts(self.tokenize_one, texts, truncate, self.max_length)

    def tokenize_pair(self, first: str, second: str,
                      truncate: bool) -> tuple[list[int], list[int], int, bool]:
        """(ids, token types, the pair's full token count, whether it fits) of a (query,
        document) pair, by the tokenizer's pair template and, past max_length, its truncation
        strategy. It does not fit when ``truncate`` is off and the pair is over max_length, or
        when the strategy cuts one side only and the other alone is too long; ids and types
        are then []."""
        a = first.encode("utf-8", errors="surrogatepass")
        b = second.encode("utf-8", errors="surrogatepass")
        self._put_text(a + b)
        if not self._tok_types:
            self._tok_types = self._alloc(4 * self._tok_cap)
        st = self.host.call(
            "emb_model_tokenize_ex_wasm", self._model, self._text, len(a), self._text + len(a),
            len(b), int(truncate), self._tok, self._tok_types, 0, self._tok_cap, self._scratch,
            self._scratch + WASM_SIZE_T_BYTES,
        )
        n, full = self._i32s(self._scratch, 2)
        if st == Status.TOO_LONG:
            return [], [], full, False
        if st != Status.OK:
            self._raise(st, "tokenize")
        return self._i32s(self._tok, n), self._i32s(self._tok_types, n), full, True

    def tokenize_offsets(self, texts: Sequence[str], truncate: bool = True) -> list[list[Token]]:
        """Each text's tokens as (id, start, end): the token covers ``text[start:end]`` (the
        offsets of Hugging Face tokenizers; the special tokens the template adds are (0, 0))."""
        if not self._offsets:
            self._offsets = self._alloc(8 * self._tok_cap)
        out = []
        for text in texts:
            data = text.encode("utf-8", errors="surrogatepass")
            self._put_text(data)
            st = self.host.call(
                "emb_model_tokenize_ex_wasm", self._model, self._text, len(data), 0, 0,
                int(truncate), self._tok, 0, self._offsets, self._tok_cap, self._scratch,
                self._scratch + WASM_SIZE_T_BYTES,
            )
            n, full = self._i32s(self._scratch, 2)
            if st == Status.TOO_LONG:
                raise text_too_long(full, self.max_length)
            if st != Status.OK:
                self._raise(st, "tokenize")
            ids = self._i32s(self._tok, n)
            byte_offs = [v & 0xFFFFFFFF for v in self._i32s(self._offsets, 2 * n)]
            out.append(tokens_with_offsets(text, ids, byte_offs))
        return out

    def count_tokens(self, texts: Sequence[str], truncate: bool = True) -> list[int]:
        """Tokens each text costs the encoder (its full length when truncate is False)."""
        return count_text_tokens(self.tokenize_one, texts, truncate)

    def encode_into(
        self,
        batch: Sequence[Sequence[int]],
        out: memoryview,
        *,
        type_ids: Sequence[Sequence[int]] | None = None,
        prompt_lengths: Sequence[int] | None = None,
        tokens: bool = False,
    ) -> None:
        """Pooled, not normalized vectors of ``batch`` as float32 rows into ``out`` (bytes,
        ``len(batch) * dim * 4`` of them). A batch over the context's tokens is cut into
        pieces: a sequence's vector never depends on its batch. ``type_ids``: one list of token
        types per sequence (sentence pairs); ``prompt_lengths``: leading prompt tokens per
        sequence (left out of the pooling when the model says include_prompt false);
        ``tokens``: every token's last hidden state instead (``Σ len * hidden_dim * 4`` bytes)."""
        self.run_into(batch, out, output=Output.TOKENS if tokens else Output.EMBEDDING,
                      type_ids=type_ids, prompt_lengths=prompt_lengths)

    def row_width(self, output: Output, top_k: int = 0) -> int:
        """Floats per result row of an ``output`` kind."""
        widths = {Output.EMBEDDING: self.dim, Output.TOKENS: self.hidden_dim,
                  Output.SCORES: self.config["n_labels"],
                  Output.SPARSE: top_k or self.config["vocab_size"]}
        return int(widths[Output(output)])

    def run_into(
        self,
        batch: Sequence[Sequence[int]],
        out: memoryview,
        *,
        output: Output = Output.EMBEDDING,
        type_ids: Sequence[Sequence[int]] | None = None,
        prompt_lengths: Sequence[int] | None = None,
        top_k: int = 0,
        per_token: bool = False,
        pooling: int = 0,
        indices: memoryview | None = None,
    ) -> None:
        """One ``emb_context_run`` request kind (edgembed.h) over ``batch``: float32 rows
        (``row_width`` each) into ``out``, one per sequence, or per token (TOKENS, SPARSE with
        ``per_token``); SPARSE with ``top_k`` writes the rows' vocabulary ids (int32) into
        ``indices`` too. Cut into calls of at most max_tokens tokens (and a bounded output);
        no result depends on the cut. ``pooling``: EMBEDDING's emb_pooling, SPARSE's
        emb_sparse_pooling (0: the model's)."""
        head = self.config["head"]
        if output == Output.SCORES and head != Head.CLASSIFIER:
            raise EngineError("scores need a bundle with a classification head (a reranker)")
        if output == Output.SPARSE and head != Head.MLM:
            raise EngineError("sparse weights need a bundle with a masked-LM head (SPLADE)")
        if output == Output.SPARSE and not 0 <= top_k <= self.config["vocab_size"]:
            raise EngineError(f"top_k must be within 0..{self.config['vocab_size']}")
        if type_ids is not None and (len(type_ids) != len(batch) or not self.type_vocab_size):
            raise EngineError("type_ids needs one list per sequence, for a model with token types")
        if prompt_lengths is not None and len(prompt_lengths) != len(batch):
            raise EngineError("prompt_lengths needs one count per sequence")
        per_tok = output == Output.TOKENS or (output == Output.SPARSE and per_token)
        width = 4 * self.row_width(output, top_k if output == Output.SPARSE else 0)
        rows = sum(len(s) for s in batch) if per_tok else len(batch)
        if out.nbytes != rows * width:
            raise EngineError(f"output buffer of {out.nbytes} bytes for {rows} rows")
        with_indices = output == Output.SPARSE and top_k > 0
        if with_indices and (indices is None or indices.nbytes != rows * width):
            raise EngineError(f"indices buffer for {rows} rows of {top_k}")
        budget = max(_OUTPUT_BUDGET, 4 * self.max_tokens * max(self.dim, self.hidden_dim))
        start = at = 0
        while start < len(batch):
            end, used, out_rows = start, 0, 0
            while end < len(batch) and (end == start or (
                    used + len(batch[end]) <= self.max_tokens
                    and (out_rows + (len(batch[end]) if per_tok else 1)) * width <= budget)):
                used += len(batch[end])
                out_rows += len(batch[end]) if per_tok else 1
                end += 1
            span = slice(at * width, (at + out_rows) * width)
            self._run_chunk(batch[start:end], out[span],
                            None if type_ids is None else type_ids[start:end],
                            None if prompt_lengths is None else prompt_lengths[start:end],
                            int(output), top_k if output == Output.SPARSE else 0,
                            int(per_token and output == Output.SPARSE), pooling,
                            indices[span] if with_indices and indices is not None else None)
            start, at = end, at + out_rows

    def encode_rows(self, batch: Sequence[Sequence[int]], **inputs: Any) -> list[array[float]]:
        """``encode_into`` without numpy: one ``array('f')`` per sequence (or token)."""
        d = self.hidden_dim if inputs.get("tokens") else self.dim
        rows = sum(len(s) for s in batch) if inputs.get("tokens") else len(batch)
        flat = array("f", bytes(4 * d * rows))
        self.encode_into(batch, memoryview(flat).cast("B"), **inputs)
        if _BIG_ENDIAN:
            flat.byteswap()
        return [flat[i * d : (i + 1) * d] for i in range(rows)]

    def run_rows(self, batch: Sequence[Sequence[int]], output: Output,
                 **inputs: Any) -> list[array[float]]:
        """``run_into`` without numpy: one ``array('f')`` per result row (SCORES, or SPARSE
        without ``top_k``)."""
        d = self.row_width(output)
        per_tok = output == Output.TOKENS or (output == Output.SPARSE and inputs.get("per_token"))
        rows = sum(len(s) for s in batch) if per_tok else len(batch)
        flat = array("f", bytes(4 * d * rows))
        self.run_into(batch, memoryview(flat).cast("B"), output=output, **inputs)
        if _BIG_ENDIAN:
            flat.byteswap()
        return [flat[i * d : (i + 1) * d] for i in range(rows)]

    def _out_buffer(self, nbytes: int) -> int:
        """The wasm output buffer, grown to ``nbytes`` when a call needs more."""
        if nbytes > self._out_cap:
            self.host.call("emb_free_wasm", self._out)
            self._out = 0
            self._out = self._alloc(nbytes)
            self._out_cap = nbytes
        return self._out

    def _run_chunk(self, seqs: Sequence[Sequence[int]], out: memoryview,
                   type_ids: Sequence[Sequence[int]] | None, prompts: Sequence[int] | None,
                   output: int, top_k: int, per_token: int, pooling: int,
                   indices: memoryview | None) -> None:
        lens = array("i")
        ids = array("i")
        for s in seqs:
            if len(s) > self.max_length:
                raise InputTooLong(
                    f"a sequence of {len(s)} tokens exceeds max_length {self.max_length}"
                )
            lens.append(len(s))
            ids.extend(s)
        self._write(self._lens, _le(lens))
        self._write(self._ids, _le(ids))
        if type_ids is not None:
            types = array("i")
            for s, t in zip(seqs, type_ids, strict=True):
                if len(t) != len(s):
                    raise EngineError("type_ids: one token type per token")
                types.extend(t)
            self._write(self._types, _le(types))
        if prompts is not None:
            self._write(self._prompts, _le(array("i", prompts)))
        request = {"ids": self._ids, "lengths": self._lens, "n_seqs": len(seqs),
                   "type_ids": self._types if type_ids is not None else 0,
                   "prompt_lengths": self._prompts if prompts is not None else 0,
                   "output": output, "pooling": pooling, "normalize": 0, "include_prompt": -1,
                   "top_k": top_k, "per_token": per_token}
        self._write(self._req, memoryview(REQUEST.pack(request)))
        cap = out.nbytes // 4
        values = self._out_buffer(2 * out.nbytes if indices is not None else out.nbytes)
        idx_ptr = values + out.nbytes if indices is not None else 0
        self._write(self._res, memoryview(OUTPUT.pack(
            {"values": values, "values_cap": cap, "indices": idx_ptr})))
        st = self.host.call("emb_context_run_wasm", self._ctx, self._req, self._res)
        if st != Status.OK:
            self._raise(st, "encode")
        self.host.read_into(values, out)
        if indices is not None:
            self.host.read_into(idx_ptr, indices)

    def close(self) -> None:
        """Free the engine's objects (the module's memory goes with its host)."""
        if self._ctx:
            self.host.call("emb_context_free_wasm", self._ctx)
            self._ctx = 0
        if self._model:
            self.host.call("emb_model_free_wasm", self._model)
            self._model = 0
