"""The model as the server sees it: names, sizes, raw vectors, token counts, output shaping.

The adaptive batcher groups texts from many requests into one call, so the call cannot carry
per-request options. The batcher therefore computes *raw* pooled vectors (``embed``), and each
request shapes its own rows afterwards (:meth:`ServedModel.finish`: Matryoshka truncation, then
L2 normalization) exactly as :meth:`edgembed.Embedder.embed` does, so a vector from the server
is bit for bit the vector ``Embedder.embed`` returns for the same text and options.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import BackendUnavailable, EdgembedError, InputError, InputTooLong
from ..output.arrays import l2_normalize  # the Embedder's own, so both give identical bits
from ..sources import HUB_RECORD

__all__ = ["FloatArray", "ServedModel", "encode_base64"]

# A model's pooling modes as TEI's /info names them.
_TEI_POOLING = {"mean": "mean", "cls": "cls", "max": "max", "lasttoken": "last_token",
                "last_token": "last_token", "weightedmean": "weighted_mean",
                "mean_sqrt_len_tokens": "mean_sqrt_len", "splade": "splade"}

FloatArray = npt.NDArray[np.float32]


def encode_base64(vector: FloatArray) -> str:
    """A vector as OpenAI's ``encoding_format="base64"``: little-endian float32, base64."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


class _Text(str):
    """A request's text with its prompt name and truncation side, as the batcher carries it:
    the batcher groups texts of many requests into one call, and each keeps its own options."""

    prompt_name: str | None
    left: bool


Options = tuple["str | None", bool]  # prompt name, left truncation


def _options(text: str) -> Options:
    if isinstance(text, _Text):
        return text.prompt_name, text.left
    return None, False


def _prompts(embedder: Any) -> dict[str, str]:
    """The prompts a request may name: the model's own, and ``query`` and ``document`` always
    (the model's query and document prefixes, empty for most models)."""
    manifest = getattr(embedder, "manifest", None)
    prompts = {"query": str(getattr(manifest, "query_prefix", "") or ""),
               "document": str(getattr(manifest, "document_prefix", "") or "")}
    prompts.update(getattr(embedder, "prompts", {}) or {})
    return prompts


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
        prompts: dict[str, str] | None = None,
        embedder: Any = None,
    ) -> None:
        self.name = name
        self.dim = int(dim)
        self.max_length = int(max_length)
        self.variant = variant
        self.backend = backend
        self.max_batch_tokens = int(max_batch_tokens)
        self.prompts = dict(prompts or {})
        self.embedder = embedder  # the Embedder behind from_embedder: tokenize, decode, states
        self._embed_raw = embed_raw
        self._count = count_tokens
        self._counted = threading.local()

    @classmethod
    def from_embedder(cls, embedder: Any) -> ServedModel:
        """Wrap an :class:`edgembed.Embedder` (any object with its ``embed``/``count_tokens``)."""

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
            prompts=_prompts(embedder),
            embedder=embedder,
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

    def text(self, text: str, prompt_name: str | None = None, left: bool = False) -> str:
        """``text`` as the batcher carries it, with its request's prompt and truncation side."""
        if prompt_name is None and not left:
            return text
        item = _Text(text)
        item.prompt_name, item.left = prompt_name, left
        return item

    def embed(self, texts: list[str]) -> FloatArray:
        """Raw (unnormalized, full-width) vectors, one row per text."""
        groups: dict[Options, list[int]] = {}
        for i, t in enumerate(texts):
            groups.setdefault(_options(t), []).append(i)
        if list(groups) == [(None, False)]:
            out = np.asarray(self._embed_raw(list(texts)), dtype=np.float32)
        else:
            out = np.zeros((len(texts), self.dim), dtype=np.float32)
            for (prompt_name, left), rows in groups.items():
                part = [str(texts[i]) for i in rows]
                if (prompt_name, left) == (None, False):
                    got = self._embed_raw(part)
                else:
                    got = self._need_embedder("prompt_name and truncation_direction").embed(
                        part, normalize=False, prefix=self._prefix(prompt_name),
                        truncation_direction="left" if left else "right")
                out[rows] = np.asarray(got, dtype=np.float32).reshape(len(rows), -1)
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
        return self._counts(list(texts), True)

    def _counts(self, texts: list[str], truncate: bool) -> list[int]:
        counts = [0] * len(texts)
        groups: dict[str | None, list[int]] = {}
        for i, t in enumerate(texts):
            groups.setdefault(_options(t)[0], []).append(i)
        for prompt_name, rows in groups.items():
            part = [str(texts[i]) for i in rows]
            if prompt_name is None:
                got = self._count(part, truncate)
            else:
                got = self._need_embedder("prompt_name").count_tokens(
                    part, truncate=truncate, prefix=self._prefix(prompt_name))
            for i, n in zip(rows, got, strict=True):
                counts[i] = int(n)
        return counts

    # -- per request -----------------------------------------------------------------------------

    def tokens(self, texts: list[str], *, truncate: bool) -> list[int]:
        """Token counts; with ``truncate=False`` raises InputTooLong for a text over max_length."""
        counts = self._counts(texts, truncate)
        if not truncate:
            for i, n in enumerate(counts):
                if n > self.max_length:
                    raise InputTooLong(
                        f"texts[{i}] has {n} tokens, over the model's max length "
                        f"{self.max_length}; shorten it or send truncate=true"
                    )
        self._counted.last = (texts, counts)  # every count is within max_length either way
        return counts

    def check_prompt(self, prompt_name: str | None) -> None:
        """InputError unless ``prompt_name`` is None or one of the model's prompts."""
        if prompt_name is not None and prompt_name not in self.prompts:
            known = ", ".join(sorted(self.prompts)) or "none"
            raise InputError(f"prompt_name {prompt_name!r} is not one of this model's prompts "
                             f"({known})")

    def check_dimensions(self, dimensions: int | None) -> None:
        if dimensions is not None and not 1 <= dimensions <= self.dim:
            raise InputError(f"dimensions must be an integer from 1 to {self.dim}, "
                             f"not {dimensions}")

    def finish(self, raw: FloatArray, *, normalize: bool, dimensions: int | None) -> FloatArray:
        """The Embedder's output step: keep the first ``dimensions``, then L2-normalize."""
        out = raw[:, :dimensions] if dimensions else raw
        return l2_normalize(out) if normalize else np.array(out, dtype=np.float32)

    # -- TEI's tokenizer and token-level routes --------------------------------------------------

    def _need_embedder(self, what: str) -> Any:
        if self.embedder is None:
            raise BackendUnavailable(f"{what} needs an edgembed model; this server serves a "
                                     "custom function")
        return self.embedder

    def _prefix(self, prompt_name: str | None) -> str | None:
        """The ``prefix=`` for the Embedder: None (its default prompt) or the named prompt."""
        if prompt_name is None:
            return None
        self.check_prompt(prompt_name)
        return self.prompts[prompt_name]

    def prompt_text(self, prompt_name: str | None) -> str:
        """The text put before each text for ``prompt_name`` (None: the model's default)."""
        if self.embedder is None:
            self.check_prompt(prompt_name)
            return self.prompts.get(prompt_name, "") if prompt_name else ""
        return str(self.embedder.prompt(self._prefix(prompt_name)))

    def spans(self, texts: list[str], *, add_special_tokens: bool,
              prompt_name: str | None) -> list[Any]:
        """Every token of each ``prompt + text`` (TokenSpan: id, start, end, special, token)."""
        return list(self._need_embedder("/tokenize").tokenize_offsets(
            texts, prefix=self._prefix(prompt_name), add_special_tokens=add_special_tokens))

    def decode(self, ids: list[list[int]], *, skip_special_tokens: bool) -> list[str]:
        return list(self._need_embedder("/decode").decode(
            ids, skip_special_tokens=skip_special_tokens))

    def token_embeddings(self, texts: list[str], *, truncate: bool, left: bool,
                         prompt_name: str | None) -> list[FloatArray]:
        return list(self._need_embedder("/embed_all").token_embeddings(
            texts, prefix=self._prefix(prompt_name), truncate=truncate,
            truncation_direction="left" if left else "right"))

    def info(self) -> dict[str, Any]:
        """What TEI's /info says of the model: its hub commit (when pulled from the hub), its
        dtype and its pooling."""
        manifest = getattr(self.embedder, "manifest", None)
        pooling, sha = "mean", None
        if manifest is not None:
            pooling = "+".join(_TEI_POOLING.get(m, m)
                               for m in str(manifest.pooling).lower().split("+"))
            record = Path(self.embedder.model_dir) / "source" / HUB_RECORD
            try:
                sha = json.loads(record.read_text(encoding="utf-8")).get("commit") or None
            except (OSError, ValueError, AttributeError):
                sha = None
        dtype = {"fp32": "float32", "fp16": "float16"}.get(self.variant, self.variant)
        return {"model_sha": sha, "model_dtype": dtype or "float32", "pooling": pooling}
