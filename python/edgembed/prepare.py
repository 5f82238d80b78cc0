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

__all__ = ["Progress", "exported_dir", "model_dir_of", "prepare_model"]

_log = logging.getLogger("edgembed")

Progress = Callable[[str], None]


def exported_dir(path: Path) -> Path | None:
    """The exported model directory ``path`` is (one with ``edgembed.json``), or whose
    ``source/`` folder it is; None for any other path."""
    if path.name == "source" and (path.parent / MANIFEST_NAME).is_file():
        return path.parent  # the source folder of a model in the cache
    if (path / MANIFEST_NAME).is_file():
        return path
    return None


def model_dir_of(model: str) -> Path:
    """Where the model ``model`` names is (or will be) exported, pulling and exporting nothing:
    an exported directory itself, else the cache's directory for the catalog or local model."""
    from .sources import model_cache_dir, resolve

    path = Path(model).expanduser()
    found = exported_dir(path) if path.is_dir() else None
    if found is not None:
        return found
    spec, _ = resolve(model)
    return model_cache_dir(spec.name)


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
    found = exported_dir(path) if text.lower() not in catalog() and path.is_dir() else None
    if found is not None:
        manifest = Manifest.load(found)
        if variant in manifest.variants:
            return found, manifest
        cached = model_cache_dir(manifest.name)
        if cached.exists() and cached.resolve() == found.resolve():
            return _export(manifest.name, variant, progress, export_model)
        manifest.variant_path(found, variant)  # raises, saying how to export it
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
