"""``embed rerank QUERY DOC … | -i FILE``: documents ranked by a cross-encoder, best first.

Each result is one JSON object per line on stdout (or ``-o FILE.jsonl``): the document's
``index`` in the input (0-based), its ``score``, the input's ``id`` with ``--id-column``, and
its ``text`` with ``--return-documents``.
"""

from __future__ import annotations

import argparse
import json
import sys

from .._unicode import argv_text
from ..errors import InputError
from ..io.readers import RowReader
from ..io.storage import same_file, write_text_atomically
from .options import Usage, add_backend_option, add_format_options, positive_int, say
from .registry import Command

__all__ = ["RERANK_COMMAND"]

EXAMPLES = """\
  embed rerank "how do I reset my password" -i faq.txt --top-n 5
  embed rerank "what is SPLADE" "a sparse retrieval model" "a kind of bird"
  embed rerank -m bge-reranker-base "query" -i docs.jsonl --field body --id-column id \\
      --return-documents -o ranked.jsonl
"""


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="QUERY", help="the query the documents are scored against")
    p.add_argument("documents", nargs="*", metavar="DOC", help="documents (or -i FILE)")
    g = p.add_argument_group("input and output")
    g.add_argument("-i", "--input", metavar="FILE",
                   help="read documents from FILE (.txt one per line, .jsonl, .csv, .parquet; "
                        "- for stdin)")
    g.add_argument("-o", "--output", metavar="FILE",
                   help="write the results to FILE (.jsonl; - or none: stdout)")
    add_format_options(g, "the input's name (stdin: txt)", "the output's name")
    g.add_argument("--errors", choices=("strict", "replace"), default="strict",
                   help="invalid UTF-8 in the input: stop (strict, default) or replace it")
    r = p.add_argument_group("ranking")
    r.add_argument("--top-n", type=positive_int, metavar="N",
                   help="print the N best documents only (default: all)")
    r.add_argument("--return-documents", action="store_true",
                   help="include each document's text in its result")
    r.add_argument("--raw", action="store_true",
                   help="scores are the raw logits, without the model's activation")
    r.add_argument("--no-truncate", action="store_true",
                   help="a query-document pair over the model's max length is an error, not "
                        "cut")
    r.add_argument("--batch-tokens", type=positive_int, metavar="N",
                   help="padded tokens per encoder call (default: per backend)")
    m = p.add_argument_group("model")
    m.add_argument("-m", "--model", default="ms-marco-minilm-l6-v2",
                   help="a cross-encoder: catalog name, hub id or directory "
                        "(default: %(default)s)")
    m.add_argument("--variant", choices=("int8", "fp32", "int4", "fp16"),
                   help="weights to run (default: int8 on CPU, fp16 on CUDA)")
    add_backend_option(m)
    m.add_argument("--threads", type=positive_int, metavar="N",
                   help="CPU threads (default: one per core)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or notes on stderr")


def _run(args: argparse.Namespace) -> int:
    from ..reranker import Reranker

    if args.input is None and not args.documents:
        raise Usage("give documents after the query or -i FILE (see embed rerank --help)")
    if args.input is not None and args.documents:
        raise Usage("give documents as arguments or -i FILE, not both")
    if args.output_format not in (None, "jsonl") or (
            args.output not in (None, "-") and args.output_format is None
            and not args.output.endswith(".jsonl")):
        raise InputError(f"-o {args.output}: rerank results are written as .jsonl")
    if args.input not in (None, "-") and args.output not in (None, "-") \
            and same_file(args.input, args.output):
        raise InputError(f"-o {args.output} is the input file; choose another output")
    ids: list[object] = []
    if args.input is not None:
        docs: list[str] = []
        with RowReader(args.input, args.input_format, field=args.field, column=args.column,
                       id_column=args.id_column, encoding_errors=args.errors) as source:
            for row in source.valid_rows():
                docs.append(row.text or "")
                ids.append(row.id)
    else:
        docs = [argv_text(d) for d in args.documents]
    reranker = Reranker.load(args.model, variant=args.variant, backend=args.backend,
                             threads=args.threads, progress=lambda m: say(args, m))
    results = reranker.rerank(argv_text(args.query), docs, top_n=args.top_n, raw=args.raw,
                              truncate=not args.no_truncate,
                              max_batch_tokens=args.batch_tokens)
    lines = []
    for res in results:
        item: dict[str, object] = {"index": res.index, "score": res.score}
        if args.id_column is not None:
            item["id"] = ids[res.index]
        if args.return_documents:
            item["text"] = docs[res.index]
        lines.append(json.dumps(item, ensure_ascii=False, default=str) + "\n")
    if args.output in (None, "-"):
        sys.stdout.write("".join(lines))
        sys.stdout.flush()
    else:
        write_text_atomically(args.output, "".join(lines))
    return 0


RERANK_COMMAND = Command(
    "rerank", "rank documents against a query with a cross-encoder", _args, _run,
    description="Score each document against QUERY with a cross-encoder (reranker) and print "
                "them best first, one JSON object per line: index, score (and id, text).",
    examples=EXAMPLES)
