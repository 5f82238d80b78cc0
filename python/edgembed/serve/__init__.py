"""``embed serve``: OpenAI- and TEI-compatible embeddings over HTTP, on the adaptive batcher.

    request ─► app (routes, auth, limits, schemas) ─► AdaptiveBatcher ─► model ─► JSON

``cli`` parses ``embed serve``; ``settings`` holds the configuration; ``app`` builds the ASGI
app (FastAPI) around a ``model.ServedModel``; ``server`` runs it with uvicorn (foreground with
graceful SIGTERM, or ``BackgroundServer`` in a thread); ``errors`` maps every error class to one
HTTP status; ``auth``, ``limits`` and ``metrics`` are the middlewares. FastAPI and uvicorn come
with ``pip install 'edgembed[serve]'`` and are imported only by ``app`` and ``server``.
"""

from __future__ import annotations

from .settings import ServeSettings

__all__ = ["ServeSettings"]
