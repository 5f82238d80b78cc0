"""The model as the server sees it: names, sizes, raw vectors, token counts, output shaping.

The adaptive batcher groups texts from many requests into one call, so the call cannot carry
per-request options. The batcher therefore computes *raw* pooled vectors (``embed``), and each
request shapes its own rows afterwards (:meth:`ServedModel.finish`: Matryoshka truncation, then
L2 normalization) exactly as :meth:`edgembed.Embedder.embed` does, so a vector from the server
is bit for bit the vector ``Embedder.embed`` returns for the same text and options.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import EdgembedError, InputError, InputTooLong
from ..output.arrays import l2_normalize  # the Embedder's own, so both give identical bits

__all__ = ["FloatArray", "ServedModel", "encode_base64"]

FloatArray = npt.NDArray[np.float32]


def encode_base64(vector: FloatArray) -> str:
    """A vector as OpenAI's ``encoding_format="base64"``: little-endian float32, base64."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


class ServedModel:
    """What the server needs from a model; also the batcher's target (``embed``, ``count_tokens``).

    Build it with :meth:`from_embedder` (the real thing) or :meth:`from_callable` (any function
    from a list of texts to one vector per text, for tests and custom models).
    """

    def __init__(
        self,
        *,
        name: str,
        dim: int,
        max_length: int,
        embed_raw: Callable[[list[str]], Any],
        count_tokens: Callable[[list[str], bool], list[int]],
        variant: str = "",
        backend: str = "",
        max_batch_tokens: int = 4096,
        prefixes: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.dim = int(dim)
        self.max_length = int(max_length)
        self.variant = variant
        self.backend = backend
        self.max_batch_tokens = int(max_batch_tokens)
        self.prefixes = dict(prefixes or {})
        self._embed_raw = embed_raw
        self._count = count_tokens
        self._counted = threading.local()

    @classmethod
    def from_embedder(cls, embedder: Any) -> ServedModel:
        """Wrap an :class:`edgembed.Embedder` (any object with its ``embed``/``count_tokens``)."""
        manifest = getattr(embedder, "manifest", None)
        prefixes = {}
        if manifest is not None:
            prefixes = {"query": str(getattr(manifest, "query_prefix", "")),
                        "document": str(getattr(manifest, "document_prefix", ""))}

        def embed_raw(texts: list[str]) -> Any:
            return embedder.embed(texts, normalize=False)

        def count(texts: list[str], truncate: bool) -> list[int]:
            return [int(n) for n in embedder.count_tokens(texts, truncate=truncate)]

        return cls(
            name=str(embedder.model_name),
            dim=int(embedder.dim),
            max_length=int(embedder.max_length),
            embed_raw=embed_raw,
            count_tokens=count,
            variant=str(getattr(embedder, "variant", "")),
            backend=str(getattr(embedder, "backend", "")),
            max_batch_tokens=int(getattr(embedder, "max_batch_tokens", 4096)),
            prefixes=prefixes,
        )

    @classmethod
    def from_callable(
        cls,
        fn: Callable[[list[str]], Any],
        *,
        dim: int,
        name: str = "custom",
        max_length: int = 512,
        max_batch_tokens: int = 4096,
    ) -> ServedModel:
        """Wrap ``fn(texts) -> vectors``. Tokens are estimated at four characters each, plus two."""

        def count(texts: list[str], truncate: bool) -> list[int]:
            counts = [len(t) // 4 + 2 for t in texts]
            return [min(n, max_length) for n in counts] if truncate else counts

        return cls(name=name, dim=dim, max_length=max_length, embed_raw=fn, count_tokens=count,
                   variant="custom", backend="python", max_batch_tokens=max_batch_tokens)

    # -- the batcher's target --------------------------------------------------------------------

    def embed(self, texts: list[str]) -> FloatArray:
        """Raw (unnormalized, full-width) vectors, one row per text."""
        out = np.asarray(self._embed_raw(list(texts)), dtype=np.float32)
        if out.ndim != 2 or out.shape[0] != len(texts):
            raise EdgembedError(f"the model returned an array of shape {out.shape} for "
                                f"{len(texts)} texts")
        return out

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens the encoder sees per text (truncated), for the batcher's cost model.

        The server counts a request's tokens (:meth:`tokens`) just before submitting it, in the
        same thread; the batcher's count of the same text objects reuses that count instead of
        tokenizing again.
        """
        last = getattr(self._counted, "last", None)
        self._counted.last = None
        if last is not None and len(last[0]) == len(texts) and all(
            a is b for a, b in zip(last[0], texts, strict=True)
        ):
            return list(last[1])
        return self._count(list(texts), True)

    # -- per request -----------------------------------------------------------------------------

    def tokens(self, texts: list[str], *, truncate: bool) -> list[int]:
        """Token counts; with ``truncate=False`` raises InputTooLong for a text over max_length."""
        counts = self._count(texts, truncate)
        if not truncate:
            for i, n in enumerate(counts):
                if n > self.max_length:
                    raise InputTooLong(
                        f"texts[{i}] has {n} tokens, over the model's max length "
                        f"{self.max_length}; shorten it or send truncate=true"
                    )
        self._counted.last = (texts, counts)  # every count is within max_length either way
        return counts

    def prefix(self, prompt_name: str | None) -> str:
        """The text prepended for a named prompt (``query``, ``document``); ``""`` for none."""
        if prompt_name is None:
            return ""
        if prompt_name not in self.prefixes:
            known = ", ".join(sorted(self.prefixes)) or "none"
            raise InputError(f"prompt_name {prompt_name!r} is not one of this model's prompts "
                             f"({known})")
        return self.prefixes[prompt_name]

    def check_dimensions(self, dimensions: int | None) -> None:
        if dimensions is not None and not 1 <= dimensions <= self.dim:
            raise InputError(f"dimensions must be an integer from 1 to {self.dim}, "
                             f"not {dimensions}")

    def finish(self, raw: FloatArray, *, normalize: bool, dimensions: int | None) -> FloatArray:
        """The Embedder's output step: keep the first ``dimensions``, then L2-normalize."""
        out = raw[:, :dimensions] if dimensions else raw
        return l2_normalize(out) if normalize else np.array(out, dtype=np.float32)
