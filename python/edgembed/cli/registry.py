"""The ``embed`` subcommands, in one registry.

Other parts of edgembed add theirs (``embed bundle``, ``embed serve``, ``embed batch``) without
touching the embedding command:

- in-process: ``register_command(Command(name, help, add_arguments, run))``;
- lazily: one line in ``_LAZY_COMMANDS`` naming a module that defines
  ``add_arguments(parser)`` and ``run(args) -> int``; it is imported only when its command runs,
  and listed only where the module is installed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Command", "commands", "register_command", "resolve"]


@dataclass(frozen=True)
class Command:
    """One ``embed`` subcommand."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""
    examples: str = ""


_COMMANDS: dict[str, Command] = {}

# Subcommands provided by other modules: name → (module, one-line help).
_LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "bundle": ("edgembed.export.bundle_cli", "write the C engine's bundle (.emb) for a model"),
    "serve": ("edgembed.serve.cli", "serve embeddings over HTTP"),
    "batch": ("edgembed.jobs.cli", "embed a large file as a durable, resumable job"),
}


def register_command(command: Command) -> None:
    """Add a subcommand (a later registration of the same name replaces the earlier one)."""
    _COMMANDS[command.name] = command


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def commands() -> dict[str, Command]:
    """Every command: those registered, then the lazy ones whose module is installed."""
    found = dict(_COMMANDS)
    for name, (module, help_text) in _LAZY_COMMANDS.items():
        if name not in found and _installed(module):
            found[name] = Command(name, help_text, _lazy(module, "add_arguments"),
                                  _lazy(module, "run"))
    return found


def resolve(command: Command) -> Command:
    """The full Command of a lazy one, once it is about to run: its module's ``COMMAND`` (with
    the description and examples its ``--help`` shows), imported now; others as they are."""
    lazy = _LAZY_COMMANDS.get(command.name)
    if lazy is None or command.name in _COMMANDS:
        return command
    full = getattr(importlib.import_module(lazy[0]), "COMMAND", None)
    return full if isinstance(full, Command) else command


def _lazy(module: str, attr: str) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        return getattr(importlib.import_module(module), attr)(*args)

    return call
