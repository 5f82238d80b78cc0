"""edgembed in Pyodide (PyScript, JupyterLite, Node): load an engine bundle from a URL,
bytes or a file, with everything that may block done asynchronously.

::

    import edgembed.web
    embedder = await edgembed.web.load("https://example.org/models/all-minilm-l6-v2.emb")
    rows = embedder.embed(["a sentence", "another"])   # 2 rows of 384 floats, unit length

``load`` fetches a URL with Pyodide's ``pyfetch`` (``urllib`` in a thread on CPython) and
compiles the engine with ``WebAssembly.compile``, asynchronously, which works on every host
and is what a browser's main thread may require (browsers may cap synchronous compilation there;
headless Chromium 156 compiles the ~68 KB engine synchronously too). In a Web Worker —
JupyterLite's kernel, PyScript's ``worker`` scripts — Node and Deno,
``Embedder.load(path_or_bytes)`` does the same without ``await``. Without numpy, ``embed``
returns a list of ``array('f')`` rows. ``load_reranker`` does the same for a cross-encoder's
bundle (``Reranker.load(path_or_bytes)`` without ``await``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import env
from .backends._engine import BundleSource
from .embedder import Embedder
from .errors import ModelNotFound, SourceUnavailable
from .reranker import Reranker

__all__ = ["fetch_bundle", "is_url", "load", "load_reranker"]


def is_url(source: object) -> bool:
    """True for an ``http(s)://`` (or ``blob:``) address."""
    return isinstance(source, str) and source.lower().startswith(("http://", "https://", "blob:"))


async def fetch_bundle(url: str) -> bytes:
    """The bytes of the bundle at ``url``. An HTTP error status raises ModelNotFound, a
    network failure SourceUnavailable."""
    if env.HOST.pyodide:
        from pyodide.http import pyfetch

        try:
            response = await pyfetch(url)
        except Exception as exc:  # a JsException (network error, CORS)
            raise SourceUnavailable(
                f"cannot fetch the bundle {url} ({exc}); check the address and, from another "
                "origin, that the server sends Access-Control-Allow-Origin"
            ) from None
        if not response.ok:
            raise ModelNotFound(f"the bundle {url} was not found (HTTP {response.status})")
        data: bytes = await response.bytes()
        return data
    return await asyncio.to_thread(_fetch_blocking, url)


def _fetch_blocking(url: str) -> bytes:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data: bytes = response.read()
            return data
    except urllib.error.HTTPError as exc:
        raise ModelNotFound(f"the bundle {url} was not found (HTTP {exc.code})") from None
    except (urllib.error.URLError, OSError) as exc:
        raise SourceUnavailable(f"cannot fetch the bundle {url} ({exc})") from None


async def load(
    model: BundleSource,
    *,
    wasm_build: str | None = None,
    max_tokens: int = 2048,
    wasm_variant: str | None = None,
) -> Embedder:
    """An Embedder on the wasm engine for a bundle: a URL, its bytes, a path to a .emb file
    (Pyodide's file system, or a mounted folder) or an exported model directory.

    ``wasm_build``: the engine build, "simd128" (default) or "relaxed" (only after its probe
    passes here); ``wasm_variant`` is its deprecated old name.
    """
    from ._bundle import wasm_build_of

    wasm_build = wasm_build_of(wasm_build, wasm_variant)
    source, host = await _source_and_host(model, wasm_build)
    return Embedder.from_bundle(source, wasm_build=wasm_build, max_tokens=max_tokens,
                                host=host)


async def load_reranker(model: BundleSource, *, wasm_build: str | None = None,
                        max_tokens: int = 2048) -> Reranker:
    """``load`` for a cross-encoder's bundle: a Reranker on the wasm engine, which tokenizes
    the pairs itself. Without numpy, ``score`` and ``rerank`` work on ``array('f')`` rows."""
    source, host = await _source_and_host(model, wasm_build)
    return Reranker.from_bundle(source, wasm_build=wasm_build, max_tokens=max_tokens,
                                host=host)


async def _source_and_host(model: BundleSource, wasm_build: str | None) -> tuple[Any, Any]:
    """(the bundle's bytes for a URL, else ``model``; in Pyodide the engine module compiled
    asynchronously, else None)."""
    source: Any = model
    if isinstance(model, str) and is_url(model):
        source = await fetch_bundle(model)
    host = None
    if env.HOST.pyodide:
        from .backends._pyodide import PyodideHost

        host = await PyodideHost.create(variant=wasm_build)
    return source, host
