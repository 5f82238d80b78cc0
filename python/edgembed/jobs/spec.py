"""What one ``embed batch`` job is: its input, model, options and output (``BatchSpec``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..embedder import DEFAULT_MODEL

__all__ = ["DEFAULT_CHUNK", "ENGINES", "BatchSpec"]

DEFAULT_CHUNK = 1024
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class BatchSpec:
    """One ``embed batch`` job: what to read, how to embed it, where to write it."""

    input: str
    output: str
    input_format: str | None = None
    output_format: str | None = None
    field: str | None = None
    column: str | None = None
    id_column: str | None = None
    encoding_errors: str = "strict"
    errors_file: str | None = None
    model: str = DEFAULT_MODEL
    variant: str | None = None
    backend: str = "auto"
    threads: int | None = None
    prompt: str | None = None  # "query" or "document": the model's prefix for that kind
    normalize: bool | None = None  # None: as the model does (its Normalize module)
    truncate: bool = True
    dimensions: int | None = None
    precision: str = "float32"
    chunk_size: int = DEFAULT_CHUNK
    resume: bool = False
    restart: bool = False
    work_dir: str | None = None
    engine: str = "local"
    ray_address: str | None = None
    actors: int = 2
    cpus_per_actor: float = 1.0
