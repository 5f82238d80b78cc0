"""Text that is not well-formed Unicode, treated the same way on every host.

A Python ``str`` (like a JavaScript string) can hold *lone surrogates*: code points
U+D800..U+DFFF that are not characters and have no UTF-8 encoding. JSON can carry them
(``"\\ud800"``), so can ``sys.argv`` and file names (Python decodes undecodable bytes to
U+DC80..U+DCFF), and ``tokenizers`` refuses them with a TypeError.

edgembed's rule, everywhere a text enters (the Embedder, the bundle Embedder, so the server,
the Batch API and ``embed batch``; the command line's arguments): **each lone surrogate reads
as U+FFFD**, the replacement character. This is what a browser's ``TextEncoder`` does with a
JavaScript string (so the npm package agrees without any code of its own), and what the C
engine does with invalid UTF-8 bytes (each maximal invalid subsequence is one U+FFFD,
docs/tokenizer.md); BERT's normalizer then drops U+FFFD. A surrogate *pair* held as two code
points reads as the one character it encodes, as in JavaScript. Rejecting such texts instead
would turn one stray byte in a million-row job into an error the user cannot act on, and the
engine already made the other choice for bytes.
"""

from __future__ import annotations

import os

__all__ = ["argv_text", "well_formed"]


def well_formed(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (pairs combined); unchanged,
    and not copied, when it is well-formed already."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 code units, then back: a valid pair becomes its character, a lone surrogate
        # one U+FFFD, exactly WHATWG's conversion of a JavaScript string to a USVString.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def argv_text(arg: str) -> str:
    """A command-line argument as text: the bytes the shell passed, decoded as UTF-8 with
    each maximal invalid subsequence read as one U+FFFD (as the C engine reads bytes).

    Python hands undecodable argument bytes over as U+DC80..U+DCFF (``surrogateescape``);
    this recovers the bytes first, so ``embed "$(printf 'a\\xffb')"`` embeds ``a\\ufffdb``.
    """
    if arg.isascii():
        return arg
    try:
        raw = os.fsencode(arg)
    except UnicodeEncodeError:  # a surrogate that did not come from surrogateescape
        return well_formed(arg)
    return raw.decode("utf-8", "replace")
