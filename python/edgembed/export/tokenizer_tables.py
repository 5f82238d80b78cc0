"""The engine tokenizer's tables in a bundle, from a model's tokenizer.json (or vocab.txt).

``tokenizer_tables`` turns the Hugging Face tokenizer of a model directory into the bundle's
``tokenizer`` / ``tokenizer.*`` metadata strings and ``tokenizer.*`` tensors, as the engine's
``emb_tokenizer_from_bundle`` reads them (layout: the top of ``runtime/include/edgembed.h``).
A component or option the engine does not implement is refused here, by name, never
approximated: the engine must give exactly the ids of Hugging Face ``tokenizers``.

Three kinds: ``wordpiece`` (BERT), ``unigram`` (SentencePiece, XLM-RoBERTa) and ``bpe``
(byte-level BPE: RoBERTa, ModernBERT, GPT-2-style). For the last two the tables are the
vocabulary (bytes + offsets), the Unigram scores (float64, exactly as tokenizer.json has them)
or the BPE merges as id triples, the added tokens, and the normalizer / pre-tokenizer steps and
post-processor template; metadata strings are ASCII only, so every text is a tensor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import InvalidModelDir, UnsupportedArchitecture

__all__ = ["tokenizer_tables"]


def _yes(b: int | bool) -> str:
    return "true" if b else "false"


def tokenizer_tables(
    hf_dir: Path,
) -> tuple[dict[str, str], list[tuple[str, npt.NDArray[Any]]], int]:
    """(metadata strings, tensors, number of vocabulary entries) of the model's tokenizer."""
    tj = Path(hf_dir) / "tokenizer.json"
    if tj.is_file():
        spec = json.loads(tj.read_text(encoding="utf-8"))
        kind = (spec.get("model") or {}).get("type")
        if kind in ("Unigram", "BPE"):
            return _general_tables(tj, spec)
        trunc = spec.get("truncation") or {}
        plain_truncation = (trunc.get("strategy", "LongestFirst") == "LongestFirst"
                            and trunc.get("direction", "Right") == "Right")
        if kind == "WordPiece" and not plain_truncation:
            # the streaming WordPiece truncates pairs longest-first from the right only: another
            # strategy (a cross-encoder's only_second) or side is the general pipeline's
            return _general_tables(tj, spec)
        if kind == "WordPiece":
            try:
                words, flags = _read_tokenizer(hf_dir)
            except UnsupportedArchitecture:
                # beyond the streaming WordPiece (other added tokens, lstrip, a normalizer
                # Sequence, …): the general pipeline's steps, or its own refusal
                return _general_tables(tj, spec)
            return _wordpiece_tables(words, flags)
    words, flags = _read_tokenizer(hf_dir)
    return _wordpiece_tables(words, flags)


def _wordpiece_tables(
    words: list[str], flags: dict[str, int]
) -> tuple[dict[str, str], list[tuple[str, npt.NDArray[Any]]], int]:
    meta = {
        "tokenizer": "wordpiece",
        "tokenizer.lowercase": _yes(flags["lowercase"]),
        "tokenizer.strip_accents": _yes(flags["strip_accents"]),
        "tokenizer.handle_chinese_chars": _yes(flags["handle_chinese_chars"]),
        "tokenizer.clean_text": _yes(flags["clean_text"]),
        "tokenizer.unk_id": str(flags["unk_id"]),
        "tokenizer.cls_id": str(flags["cls_id"]),
        "tokenizer.sep_id": str(flags["sep_id"]),
        "tokenizer.pad_id": str(flags["pad_id"]),
        "tokenizer.max_input_chars_per_word": str(flags["max_input_chars_per_word"]),
    }
    vocab = np.frombuffer("\n".join(words).encode("utf-8"), dtype=np.uint8)
    return meta, [("tokenizer.vocab", vocab)], len(words)


def _check_added_tokens(
    tj: Path, added: list[dict[str, Any]], vocab_map: dict[str, int], flags: dict[str, int]
) -> None:
    """The engine matches exactly these added tokens in raw text: the PAD, UNK, CLS and SEP of
    the flags and ``[MASK]``, each special, matched as written (no normalization, stripping or
    word boundary). Any other added token would be split like ordinary text and give other ids
    than Hugging Face ``tokenizers``, so such a tokenizer is refused rather than mis-tokenized."""
    known = {flags["pad_id"], flags["unk_id"], flags["cls_id"], flags["sep_id"]}
    if "[MASK]" in vocab_map:
        known.add(vocab_map["[MASK]"])
    for a in added:
        content, ident = a.get("content"), a.get("id")
        plain = a.get("special", False) and not any(
            a.get(k, False) for k in ("normalized", "lstrip", "rstrip", "single_word"))
        if ident not in known or vocab_map.get(str(content)) != ident or not plain:
            raise UnsupportedArchitecture(
                f"{tj}: added token {content!r} (id {ident}) is not one the engine's tokenizer "
                "handles (only [PAD], [UNK], [CLS], [SEP] and [MASK], special and matched as "
                "written); this model cannot be bundled: run it with backend='onnx'"
            )


def _read_tokenizer(hf_dir: Path) -> tuple[list[str], dict[str, int]]:
    """Vocabulary (by id) and the engine tokenizer's flags, from tokenizer.json or vocab.txt."""
    tj = hf_dir / "tokenizer.json"
    flags: dict[str, int] = {}
    if tj.is_file():
        t = json.loads(tj.read_text(encoding="utf-8"))
        model = t.get("model") or {}
        if model.get("type") != "WordPiece":
            raise UnsupportedArchitecture(
                f"{tj}: tokenizer model {model.get('type')!r} (WordPiece only)"
            )
        if model.get("continuing_subword_prefix", "##") != "##":
            raise UnsupportedArchitecture(f"{tj}: continuing_subword_prefix must be '##'")
        norm = t.get("normalizer") or {}
        if norm.get("type") != "BertNormalizer":
            raise UnsupportedArchitecture(
                f"{tj}: normalizer {norm.get('type')!r} (BertNormalizer only)"
            )
        pre = t.get("pre_tokenizer") or {}
        if pre.get("type") != "BertPreTokenizer":
            raise UnsupportedArchitecture(
                f"{tj}: pre_tokenizer {pre.get('type')!r} (BertPreTokenizer only)"
            )
        vocab_map: dict[str, int] = model["vocab"]
        lowercase = bool(norm.get("lowercase", True))
        strip = norm.get("strip_accents")
        flags["lowercase"] = int(lowercase)
        flags["strip_accents"] = int(lowercase if strip is None else bool(strip))
        flags["handle_chinese_chars"] = int(bool(norm.get("handle_chinese_chars", True)))
        flags["clean_text"] = int(bool(norm.get("clean_text", True)))
        flags["max_input_chars_per_word"] = int(model.get("max_input_chars_per_word", 100))
        unk_token = model.get("unk_token", "[UNK]")
        post = t.get("post_processor") or {}
        specials = post.get("special_tokens") or {}
        cls_ids = specials.get("[CLS]", {}).get("ids") or [vocab_map.get("[CLS]", -1)]
        sep_ids = specials.get("[SEP]", {}).get("ids") or [vocab_map.get("[SEP]", -1)]
        pad = t.get("padding") or {}
        flags["pad_id"] = int(pad.get("pad_id", vocab_map.get("[PAD]", 0)))
        flags["cls_id"], flags["sep_id"] = int(cls_ids[0]), int(sep_ids[0])
        flags["unk_id"] = int(vocab_map.get(unk_token, -1))
        _check_added_tokens(tj, t.get("added_tokens") or [], vocab_map, flags)
        n = len(vocab_map)
        vocab: list[str | None] = [None] * n
        for tok, i in vocab_map.items():
            if not 0 <= i < n or vocab[i] is not None:
                raise InvalidModelDir(f"{tj}: vocabulary ids are not 0..{n - 1} without gaps")
            vocab[i] = tok
        words = [v for v in vocab if v is not None]
    else:
        vt = hf_dir / "vocab.txt"
        if not vt.is_file():
            raise InvalidModelDir(f"{hf_dir}: neither tokenizer.json nor vocab.txt")
        words = vt.read_text(encoding="utf-8").split("\n")
        if words and words[-1] == "":
            words.pop()
        lower = True
        tc = hf_dir / "tokenizer_config.json"
        if tc.is_file():
            lower = bool(json.loads(tc.read_text()).get("do_lower_case", True))
        index = {w: i for i, w in enumerate(words)}
        flags.update(
            lowercase=int(lower),
            strip_accents=int(lower),
            handle_chinese_chars=1,
            clean_text=1,
            max_input_chars_per_word=100,
            pad_id=index.get("[PAD]", 0),
            cls_id=index.get("[CLS]", -1),
            sep_id=index.get("[SEP]", -1),
            unk_id=index.get("[UNK]", -1),
        )
    for key in ("unk_id", "cls_id", "sep_id", "pad_id"):
        if not 0 <= flags[key] < len(words):
            raise InvalidModelDir(f"{hf_dir}: the tokenizer has no {key[:-3].upper()} token")
    for w in words:
        if "\n" in w:
            raise UnsupportedArchitecture(f"{hf_dir}: a vocabulary token contains a newline")
    return words, flags


# --- Unigram and BPE ---------------------------------------------------------------------------

# The Split / ByteLevel regexes the engine has matchers for (runtime/src/pre_tokenizer.c).
_PATTERNS = {
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+": "gpt2",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": "cl100k",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
}
_BEHAVIORS = {"Removed": "removed", "Isolated": "isolated", "MergedWithPrevious":
              "merged_with_previous", "MergedWithNext": "merged_with_next",
              "Contiguous": "contiguous"}
_ADDED_FLAGS = {"single_word": 1, "lstrip": 2, "rstrip": 4, "normalized": 8, "special": 16}
TEMPLATE_A, TEMPLATE_B = -1, -2


def _u8(text: str | bytes) -> npt.NDArray[np.uint8]:
    data = text.encode("utf-8") if isinstance(text, str) else text
    out: npt.NDArray[np.uint8] = np.frombuffer(data, dtype=np.uint8).copy()
    return out


def _i32(rows: Any) -> npt.NDArray[np.int32]:
    return np.asarray(rows, dtype=np.int32)


def _refuse(tj: Path, what: str) -> UnsupportedArchitecture:
    return UnsupportedArchitecture(
        f"{tj}: {what} is not implemented by the engine's tokenizer, so this model cannot be "
        "bundled (the engine never approximates a tokenizer); run it with backend='onnx'"
    )


def _steps(node: Any, list_key: str) -> list[dict[str, Any]]:
    """A component, or the components of a (nested) Sequence, in order."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        out: list[dict[str, Any]] = []
        for sub in node.get(list_key) or []:
            out += _steps(sub, list_key)
        return out
    return [node]


def _pattern(tj: Path, where: str, pat: Any) -> tuple[str, str | None]:
    """("literal", the string) or (a known regex's name, None)."""
    if isinstance(pat, dict) and "String" in pat:
        if not pat["String"]:
            raise _refuse(tj, f"{where} with an empty pattern")
        return "literal", str(pat["String"])
    if isinstance(pat, dict) and "Regex" in pat:
        name = _PATTERNS.get(pat["Regex"])
        if name is None:
            raise _refuse(tj, f"{where} with the regex {pat['Regex']!r}")
        return name, None
    raise _refuse(tj, f"{where} with the pattern {pat!r}")


def _normalizer_tables(
    tj: Path, spec: dict[str, Any], meta: dict[str, str], tensors: list[tuple[str, Any]]
) -> None:
    import base64

    ops = []
    for k, n in enumerate(_steps(spec.get("normalizer"), "normalizers")):
        kind, key = n.get("type"), f"tokenizer.normalizers.{k}"
        if kind == "Precompiled":
            charsmap = base64.b64decode(n.get("precompiled_charsmap") or "")
            if not charsmap:
                raise _refuse(tj, "the normalizer Precompiled without a charsmap")
            ops.append("precompiled")
            tensors.append((key + ".data", _u8(charsmap)))
        elif kind == "NFC":
            ops.append("nfc")
        elif kind == "Lowercase":
            ops.append("lowercase")
        elif kind == "BertNormalizer":
            ops.append("bert")
            lower = bool(n.get("lowercase", True))
            strip = n.get("strip_accents")
            meta[key + ".clean_text"] = _yes(n.get("clean_text", True))
            meta[key + ".handle_chinese_chars"] = _yes(n.get("handle_chinese_chars", True))
            meta[key + ".strip_accents"] = _yes(lower if strip is None else bool(strip))
            meta[key + ".lowercase"] = _yes(lower)
        elif kind == "Strip":
            ops.append("strip")
            meta[key + ".left"] = _yes(n.get("strip_left", True))
            meta[key + ".right"] = _yes(n.get("strip_right", True))
        elif kind == "Replace":
            pat, content = n.get("pattern") or {}, str(n.get("content", ""))
            if pat.get("Regex") == " {2,}":
                meta[key + ".pattern"] = "spaces"
            elif pat.get("String"):
                meta[key + ".pattern"] = "literal"
                tensors.append((key + ".data", _u8(pat["String"])))
            else:
                raise _refuse(tj, f"the normalizer Replace with the pattern {pat!r}")
            ops.append("replace")
            if content:
                tensors.append((key + ".content", _u8(content)))
        elif kind == "Prepend":
            ops.append("prepend")
            if n.get("prepend"):
                tensors.append((key + ".content", _u8(str(n["prepend"]))))
        else:
            raise _refuse(tj, f"the normalizer {kind}")
    if len(ops) > 8:
        raise _refuse(tj, f"a normalizer Sequence of {len(ops)} steps (8 at most)")
    meta["tokenizer.normalizers"] = " ".join(ops)


def _pre_tokenizer_tables(
    tj: Path, spec: dict[str, Any], meta: dict[str, str], tensors: list[tuple[str, Any]]
) -> None:
    ops = []
    for k, p in enumerate(_steps(spec.get("pre_tokenizer"), "pretokenizers")):
        kind, key = p.get("type"), f"tokenizer.pre_tokenizers.{k}"
        if kind == "WhitespaceSplit":
            ops.append("whitespace_split")
        elif kind == "BertPreTokenizer":
            ops.append("bert")
        elif kind == "Metaspace":
            scheme = p.get("prepend_scheme", "always")
            if p.get("add_prefix_space") is False:  # tokenizers' reading of the old field
                scheme = "never"
            if scheme not in ("always", "first", "never"):
                raise _refuse(tj, f"Metaspace with prepend_scheme {scheme!r}")
            replacement = str(p.get("replacement", p.get("str_rep", "\u2581")))
            if len(replacement) != 1:
                raise _refuse(tj, f"Metaspace with the replacement {replacement!r}")
            ops.append("metaspace")
            meta[key + ".prepend"] = scheme
            meta[key + ".split"] = _yes(p.get("split", True))
            tensors.append((key + ".replacement", _u8(replacement)))
        elif kind == "ByteLevel":
            ops.append("byte_level")
            meta[key + ".add_prefix_space"] = _yes(p.get("add_prefix_space", True))
            meta[key + ".use_regex"] = _yes(p.get("use_regex", True))
        elif kind == "Split":
            name, literal = _pattern(tj, "the pre-tokenizer Split", p.get("pattern"))
            behavior = _BEHAVIORS.get(str(p.get("behavior")))
            if behavior is None:
                raise _refuse(tj, f"Split with the behavior {p.get('behavior')!r}")
            ops.append("split")
            meta[key + ".pattern"] = name
            meta[key + ".behavior"] = behavior
            meta[key + ".invert"] = _yes(p.get("invert", False))
            if literal is not None:
                tensors.append((key + ".literal", _u8(literal)))
        else:
            raise _refuse(tj, f"the pre-tokenizer {kind}")
    if len(ops) > 8:
        raise _refuse(tj, f"a pre-tokenizer Sequence of {len(ops)} steps (8 at most)")
    meta["tokenizer.pre_tokenizers"] = " ".join(ops)


def _post_processor_tables(
    tj: Path, spec: dict[str, Any], token_id: dict[str, int], meta: dict[str, str],
    tensors: list[tuple[str, Any]],
) -> None:
    single: list[tuple[int, int]] = [(TEMPLATE_A, 0)]
    pair: list[tuple[int, int]] = [(TEMPLATE_A, 0), (TEMPLATE_B, 1)]
    trim, trim_prefix = False, False
    templates = 0
    for p in _steps(spec.get("post_processor"), "processors"):
        kind = p.get("type")
        if kind == "ByteLevel":
            trim = trim or bool(p.get("trim_offsets", True))
            trim_prefix = bool(p.get("add_prefix_space", True))
            continue
        templates += 1
        if kind == "RobertaProcessing":
            cls, sep = int(p["cls"][1]), int(p["sep"][1])
            single = [(cls, 0), (TEMPLATE_A, 0), (sep, 0)]
            pair = [(cls, 0), (TEMPLATE_A, 0), (sep, 0), (sep, 0), (TEMPLATE_B, 0), (sep, 0)]
            if p.get("trim_offsets", True):
                trim, trim_prefix = True, bool(p.get("add_prefix_space", True))
        elif kind == "BertProcessing":
            cls, sep = int(p["cls"][1]), int(p["sep"][1])
            single = [(cls, 0), (TEMPLATE_A, 0), (sep, 0)]
            pair = [(cls, 0), (TEMPLATE_A, 0), (sep, 0), (TEMPLATE_B, 1), (sep, 1)]
        elif kind == "TemplateProcessing":
            specials = p.get("special_tokens") or {}

            def items(
                tpl: list[dict[str, Any]], specials: dict[str, Any] = specials
            ) -> list[tuple[int, int]]:
                out: list[tuple[int, int]] = []
                for piece in tpl:
                    if "Sequence" in piece:
                        seq = piece["Sequence"]
                        out.append((TEMPLATE_A if seq["id"] == "A" else TEMPLATE_B,
                                    int(seq.get("type_id", 0))))
                    else:
                        tok = piece["SpecialToken"]
                        ids = (specials.get(tok["id"]) or {}).get("ids")
                        if ids is None:
                            ids = [token_id[tok["id"]]]
                        out += [(int(i), int(tok.get("type_id", 0))) for i in ids]
                return out

            single = items(p.get("single") or [])
            pair = items(p.get("pair") or [])
        else:
            raise _refuse(tj, f"the post-processor {kind}")
    if templates > 1:
        raise _refuse(tj, "a post-processor Sequence with more than one template")
    for name, tpl in (("single", single), ("pair", pair)):
        if len(tpl) > 16:
            raise _refuse(tj, f"a {name} template of {len(tpl)} items (16 at most)")
        tensors.append((f"tokenizer.template.{name}", _i32(tpl).reshape(-1, 2)))
    meta["tokenizer.trim_offsets"] = _yes(trim)
    meta["tokenizer.trim_add_prefix_space"] = _yes(trim_prefix)


def _general_tables(
    tj: Path, spec: dict[str, Any]
) -> tuple[dict[str, str], list[tuple[str, npt.NDArray[Any]]], int]:
    model = spec["model"]
    kind = model["type"]
    meta: dict[str, str] = {"tokenizer": kind.lower()}
    tensors: list[tuple[str, Any]] = []
    texts: dict[int, str] = {}
    if kind == "WordPiece":
        if model.get("continuing_subword_prefix", "##") != "##":
            prefix = model["continuing_subword_prefix"]
            raise _refuse(tj, f"WordPiece continuing_subword_prefix {prefix!r}")
        token_id = {str(t): int(i) for t, i in (model.get("vocab") or {}).items()}
        if not token_id:
            raise InvalidModelDir(f"{tj}: the WordPiece vocabulary is empty")
        unk = model.get("unk_token", "[UNK]")
        if unk not in token_id:
            raise InvalidModelDir(f"{tj}: the unk_token {unk!r} is not in the vocabulary")
        n_model = max(token_id.values()) + 1
        texts = {i: t for t, i in token_id.items()}
        meta["tokenizer.unk_id"] = str(token_id[unk])
        meta["tokenizer.max_input_chars_per_word"] = str(int(model.get("max_input_chars_per_word",
                                                                          100)))
    elif kind == "Unigram":
        vocab = [(str(p), float(sc)) for p, sc in model.get("vocab") or []]
        if not vocab:
            raise InvalidModelDir(f"{tj}: the Unigram vocabulary is empty")
        unk = model.get("unk_id")
        if unk is None:
            raise _refuse(tj, "a Unigram model without unk_id")
        n_model = len(vocab)
        texts = dict(enumerate(p for p, _ in vocab))
        meta["tokenizer.unk_id"] = str(int(unk))
        meta["tokenizer.byte_fallback"] = _yes(model.get("byte_fallback", False))
        tensors.append(("tokenizer.scores", np.asarray([sc for _, sc in vocab], dtype=np.float64)))
        token_id = {p: i for i, (p, _) in enumerate(vocab)}  # a repeated piece: the later id
    else:
        if model.get("dropout") not in (None, 0, 0.0):
            raise _refuse(tj, f"BPE dropout {model['dropout']}")
        for opt in ("continuing_subword_prefix", "end_of_word_suffix"):
            if model.get(opt):
                raise _refuse(tj, f"BPE {opt} {model[opt]!r}")
        if model.get("byte_fallback"):
            meta["tokenizer.byte_fallback"] = "true"
        token_id = {str(t): int(i) for t, i in (model.get("vocab") or {}).items()}
        if not token_id:
            raise InvalidModelDir(f"{tj}: the BPE vocabulary is empty")
        n_model = max(token_id.values()) + 1
        texts = {i: t for t, i in token_id.items()}
        if model.get("unk_token") is not None:
            if model["unk_token"] not in token_id:
                raise InvalidModelDir(
                    f"{tj}: the unk_token {model['unk_token']!r} is not in the vocabulary"
                )
            meta["tokenizer.unk_id"] = str(token_id[model["unk_token"]])
        meta["tokenizer.fuse_unk"] = _yes(model.get("fuse_unk", False))
        meta["tokenizer.ignore_merges"] = _yes(model.get("ignore_merges", False))
        merges = []
        for m in model.get("merges") or []:
            a, b = m.split(" ", 1) if isinstance(m, str) else m
            try:
                merges.append((token_id[a], token_id[b], token_id[a + b]))
            except KeyError as e:
                raise InvalidModelDir(
                    f"{tj}: the merge {a!r} {b!r} names a token not in the vocabulary: {e}"
                ) from None
        if merges:
            tensors.append(("tokenizer.merges", _i32(merges).reshape(-1, 3)))
    meta["tokenizer.n_model"] = str(n_model)

    # added tokens: matched on the raw text, or (normalized) on the normalized text
    added_rows, added_text = [], b""
    normalizer = None
    for a in spec.get("added_tokens") or []:
        ident, content = int(a["id"]), str(a["content"])
        if a.get("single_word"):
            raise _refuse(tj, f"the added token {content!r} with single_word")
        if not content:
            continue
        flags = sum(v for k, v in _ADDED_FLAGS.items() if a.get(k, k == "normalized"))
        match = content
        if flags & _ADDED_FLAGS["normalized"] and spec.get("normalizer"):
            if normalizer is None:
                from tokenizers import Tokenizer

                normalizer = Tokenizer.from_file(str(tj)).normalizer
            match = normalizer.normalize_str(content) if normalizer is not None else content
            if not match:
                continue
        if ident >= n_model or ident not in texts:
            texts[ident] = content
        data = match.encode("utf-8")
        added_rows.append((ident, flags, len(added_text), len(added_text) + len(data)))
        added_text += data
        token_id.setdefault(content, ident)
    if added_rows:
        tensors += [("tokenizer.added", _i32(added_rows).reshape(-1, 4)),
                    ("tokenizer.added_text", _u8(added_text))]

    n_vocab = max(texts) + 1
    blob, offsets = bytearray(), [0]
    for i in range(n_vocab):
        blob += texts.get(i, "").encode("utf-8")
        offsets.append(len(blob))
    if len(blob) >= 2**31:
        raise _refuse(tj, "a vocabulary of 2 GiB or more")
    tensors[:0] = [("tokenizer.vocab", _u8(bytes(blob))),
                   ("tokenizer.vocab_offsets", _i32(offsets))]

    _normalizer_tables(tj, spec, meta, tensors)
    _pre_tokenizer_tables(tj, spec, meta, tensors)
    _post_processor_tables(tj, spec, token_id, meta, tensors)
    trunc = spec.get("truncation") or {}
    strategy = str(trunc.get("strategy", "LongestFirst"))
    meta["tokenizer.truncation"] = {"LongestFirst": "longest_first", "OnlyFirst": "only_first",
                                    "OnlySecond": "only_second"}.get(strategy, "")
    if not meta["tokenizer.truncation"]:
        raise _refuse(tj, f"the truncation strategy {strategy!r}")
    meta["tokenizer.truncation_side"] = "left" if trunc.get("direction") == "Left" else "right"
    return meta, tensors, n_vocab
