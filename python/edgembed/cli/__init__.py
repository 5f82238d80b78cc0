"""The ``embed`` command line.

::

    registry.py  Command, register_command: every subcommand, in-process or imported lazily
    options.py   what the commands share (model options, argument types, notes on stderr)
    embed.py     ``embed TEXT …`` / ``embed -i FILE -o FILE`` (files through edgembed.io)
    models.py    ``embed models | pull | export | info | similarity``
    rerank.py    ``embed rerank QUERY -i FILE``: documents ranked by a cross-encoder
    here         ``main``: parse, run, and turn errors into ``Name: message`` and exit statuses

Other parts of edgembed add their commands (``embed bundle``, ``embed serve``, ``embed batch``)
through the registry, without touching these files.

Errors that edgembed raises on purpose, and mistakes such as a missing file, print
``Name: message`` on stderr and exit 1; usage errors exit 2; nothing prints a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterable, Sequence

from ..errors import EdgembedError
from .embed import embed_parser, run_embed
from .models import COMMANDS
from .options import Usage, add_model_options, positive_int
from .registry import Command, commands, register_command, resolve
from .rerank import RERANK_COMMAND

__all__ = ["Command", "add_model_options", "main", "positive_int", "register_command"]

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

for _command in (*COMMANDS, RERANK_COMMAND):
    register_command(_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``embed`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    found = commands()
    if args_list and args_list[0] in found:
        command = resolve(found[args_list[0]])
        parser = argparse.ArgumentParser(
            prog=f"embed {command.name}", description=command.description or command.help,
            epilog=("examples:\n" + command.examples) if command.examples else None,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        command.add_arguments(parser)
        run = command.run
        rest = args_list[1:]
    else:
        parser = embed_parser(found)
        run = run_embed
        rest = args_list
        near = _near_command(args_list, found)
        if near is not None:
            print(f"embed: {args_list[0]!r} is not a command; did you mean `embed {near}`? "
                  f"To embed the text {args_list[0]!r}, run: embed -- {args_list[0]}",
                  file=sys.stderr)
            return EXIT_USAGE
    try:
        args = parser.parse_args(rest)
        try:
            return run(args)
        except Usage as exc:
            parser.error(str(exc))
    except SystemExit as exc:  # --help, --version and usage errors: argparse's own exit
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except (EdgembedError, ImportError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            _silence_stdout()
            return EXIT_BROKEN_PIPE
        from ..io.storage import redact  # a URL's password, a storage secret: never shown

        print(redact(f"{type(exc).__name__}: {_message(exc)}"), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_ERROR  # pragma: no cover - parser.error exits


def _near_command(args: Sequence[str], found: Iterable[str]) -> str | None:
    """The command a lone argument is one edit (a letter added, dropped, changed, or two
    neighbours swapped) away from, if any: ``embed modles`` is a typo more often than a text.
    ``embed -- TEXT`` embeds it anyway."""
    if len(args) != 1 or args[0].startswith("-"):
        return None
    word = args[0]
    for name in sorted(found):
        if _one_edit(word.lower(), name):
            return name
    return None


def _one_edit(a: str, b: str) -> bool:
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):  # equal: the command in other letter cases
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) <= 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def _silence_stdout() -> None:
    """After a closed pipe (``embed … | head``), keep Python from complaining at exit."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
