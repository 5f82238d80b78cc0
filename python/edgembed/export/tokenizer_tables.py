"""The engine tokenizer's tables in a bundle, from a model's tokenizer.json (or vocab.txt).

``tokenizer_tables`` turns the Hugging Face tokenizer of a model directory into the bundle's
``tokenizer`` / ``tokenizer.*`` metadata strings and ``tokenizer.*`` tensors, as the engine's
``emb_tokenizer_from_bundle`` reads them (layout: the top of ``runtime/include/edgembed.h``).
A component or option the engine does not implement is refused here, by name, never
approximated: the engine must give exactly the ids of Hugging Face ``tokenizers``.
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
    words, flags = _read_tokenizer(hf_dir)
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
