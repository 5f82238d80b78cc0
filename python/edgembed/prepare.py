"""A model ready to run: pulled and exported into the cache the first time it is asked for.

``prepare_model`` turns what a user names — a catalog name, a Hugging Face directory, an
exported model directory (or its ``source/`` folder) — into an exported model directory that
has the wanted variant, pulling and exporting only what is missing (``sources`` and
``export``), and says so once, since it takes about a minute.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from .errors import InvalidModelDir
from .manifest import MANIFEST_NAME, Manifest

__all__ = ["Progress", "prepare_model"]

_log = logging.getLogger("edgembed")

Progress = Callable[[str], None]


def prepare_model(
    model: str | os.PathLike[str], variant: str, progress: Progress | None
) -> tuple[Path, Manifest]:
    """(model_dir, manifest) with ``variant`` exported, pulling and exporting when needed."""
    from .catalog import catalog
    from .export import export_model, parse_variants
    from .sources import model_cache_dir, resolve, revision_differs

    parse_variants([variant])  # an unknown variant fails here, with the list of known ones

    text = os.fspath(model)
    path = Path(text).expanduser()
    if text.lower() not in catalog() and path.is_dir():
        if path.name == "source" and (path.parent / MANIFEST_NAME).is_file():
            path = path.parent  # the source folder of a model in the cache
        if (path / MANIFEST_NAME).is_file():
            manifest = Manifest.load(path)
            if variant in manifest.variants:
                return path, manifest
            cached = model_cache_dir(manifest.name)
            if cached.exists() and cached.resolve() == path.resolve():
                return _export(manifest.name, variant, progress, export_model)
            manifest.variant_path(path, variant)  # raises, saying how to export it
    spec, _ = resolve(model)
    cached = model_cache_dir(spec.name)
    if (cached / MANIFEST_NAME).is_file() and not revision_differs(text):
        manifest = Manifest.load(cached)
        if variant in manifest.variants:
            return cached, manifest
    return _export(model, variant, progress, export_model)


def _export(
    model: str | os.PathLike[str],
    variant: str,
    progress: Progress | None,
    export_model: Callable[..., tuple[Manifest, Path]],
) -> tuple[Path, Manifest]:
    from .sources import model_cache_dir, resolve

    say = progress or _log.info
    spec, _ = resolve(model)
    if (model_cache_dir(spec.name) / "source").is_dir():
        notice = (f"exporting the {variant} variant of {spec.name} into the cache "
                  "(once; about a minute)")
    else:
        notice = (f"first use of {os.fspath(model)}: pulling its files and exporting the "
                  f"{variant} variant into the cache (once; about a minute)")
    if progress is None:
        _log.warning("%s", notice)
    else:
        progress(notice)
    manifest, model_dir = export_model(model, variants=[variant], progress=say)
    if variant not in manifest.variants:
        raise InvalidModelDir(f"export of {manifest.name} did not produce {variant!r}")
    return model_dir, manifest
