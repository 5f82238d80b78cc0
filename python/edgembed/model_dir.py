"""The one reader of a model directory: files in, one frozen :class:`ModelDescription` out.

Everything that needs to know about a model — the ONNX graph builder, the engine bundle writer,
the manifest, the catalog, the Embedder — reads the description made here; nothing else opens
``config.json``, ``modules.json`` or a module's config. The reader understands a Hugging Face
encoder checkpoint laid out as sentence-transformers saves it::

    config.json                       the encoder (model_type, sizes, positions, norms, ...)
    model.safetensors                 its weights
    tokenizer.json, tokenizer_config.json
    modules.json                      Transformer, Pooling, Dense..., Normalize (in this order)
    1_Pooling/config.json             pooling modes, include_prompt
    2_Dense/config.json, model.safetensors
    sentence_bert_config.json         max_seq_length, do_lower_case
    config_sentence_transformers.json prompts, default_prompt_name, similarity_fn_name

Anything it does not understand is an error naming the file and the field
(:class:`~edgembed.errors.InvalidModelDir` for a broken or self-contradicting directory,
:class:`~edgembed.errors.UnsupportedArchitecture` for a valid one edgembed does not run, with
the list of what it does run); there are no silent defaults beyond the ones
sentence-transformers itself applies, each stated where it is applied.

``load_weights(description)`` returns the weights as float32 arrays under the canonical names of
``docs/architectures.md``, whatever the checkpoint calls them, after checking every shape
against the configuration.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .errors import InvalidModelDir, ModelNotFound, UnsupportedArchitecture

if TYPE_CHECKING:  # numpy is imported where weights are read: Pyodide reads no model dirs
    import numpy as np
    import numpy.typing as npt

    Array = npt.NDArray[Any]
    F32 = npt.NDArray[np.float32]

__all__ = [
    "Activation",
    "DenseModule",
    "EncoderConfig",
    "Family",
    "FfnKind",
    "Head",
    "HeadKind",
    "ModelDescription",
    "NormPlacement",
    "PoolingConfig",
    "PoolingMode",
    "PositionKind",
    "Similarity",
    "Task",
    "TokenizerInfo",
    "TokenizerKind",
    "load_weights",
    "read_model_dir",
    "read_safetensors",
    "relative_position_bucket",
]


# --- vocabulary of the description -------------------------------------------------------------


class Family(str, Enum):
    """Encoder families, by ``config.json`` ``model_type``."""

    BERT = "bert"
    DISTILBERT = "distilbert"
    MPNET = "mpnet"
    ROBERTA = "roberta"
    XLM_ROBERTA = "xlm-roberta"
    CAMEMBERT = "camembert"
    MODERNBERT = "modernbert"


class PositionKind(str, Enum):
    ABSOLUTE = "absolute"  # a learned table, row ``position_offset + i`` for token i
    ROTARY = "rotary"  # rotary embeddings applied to queries and keys


class NormPlacement(str, Enum):
    POST = "post"  # x = norm(x + f(x))           (BERT)
    PRE = "pre"  # x = x + f(norm(x)), final norm  (ModernBERT)


class FfnKind(str, Enum):
    MLP = "mlp"  # down(act(up(x)))
    GLU = "glu"  # down(act(u) * g), (u, g) = up(x) split in halves


class Activation(str, Enum):
    """Activation functions. ``gelu`` is the exact erf form; ``gelu_tanh`` the tanh
    approximation (``gelu_new``, ``gelu_pytorch_tanh``, ``gelu_fast``)."""

    GELU = "gelu"
    GELU_TANH = "gelu_tanh"
    RELU = "relu"
    SILU = "silu"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    IDENTITY = "identity"


class Task(str, Enum):
    EMBEDDING = "embedding"  # sentence-transformers: pooling, Dense, Normalize
    RERANK = "rerank"  # sequence classification (cross-encoder)
    SPARSE = "sparse"  # masked-LM logits pooled over tokens (SPLADE)


class HeadKind(str, Enum):
    NONE = "none"  # the encoder's token states go to pooling
    CLASSIFICATION = "classification"  # a sequence-classification head
    MLM = "mlm"  # a masked-LM head (vocabulary logits per token)


class PoolingMode(str, Enum):
    """sentence-transformers' pooling modes, with its names."""

    CLS = "cls"
    MEAN = "mean"
    MAX = "max"
    LASTTOKEN = "lasttoken"
    MEAN_SQRT_LEN_TOKENS = "mean_sqrt_len_tokens"
    WEIGHTEDMEAN = "weightedmean"


class TokenizerKind(str, Enum):
    """``tokenizer.json`` ``model.type``: WordPiece, SentencePiece Unigram, (byte-level) BPE."""

    WORDPIECE = "wordpiece"
    UNIGRAM = "unigram"
    BPE = "bpe"


class Similarity(str, Enum):
    COSINE = "cosine"
    DOT = "dot"
    EUCLIDEAN = "euclidean"
    MANHATTAN = "manhattan"


# --- the description ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EncoderConfig:
    """The encoder's architecture, as feature values (see docs/architectures.md).

    ``max_positions`` is the number of usable positions (tokens per sequence), already net
    of ``position_offset``; an absolute position table has ``position_table_rows`` rows.
    Local attention (ModernBERT): token i attends to token j iff ``|i - j| <= local_window // 2``;
    layer l is global iff ``global_every == 0`` or ``l % global_every == 0``.
    """

    family: Family
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    position_kind: PositionKind
    position_offset: int
    relative_buckets: int
    relative_max_distance: int
    rope_theta: float
    rope_theta_local: float
    local_window: int
    global_every: int
    type_vocab_size: int
    norm_placement: NormPlacement
    layer_norm_eps: float
    norm_bias: bool
    attention_bias: bool
    ffn_bias: bool
    final_norm: bool
    ffn_kind: FfnKind
    activation: Activation
    pad_token_id: int

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def linear_bias(self) -> bool:
        """True when every linear layer has a bias (False for ModernBERT's defaults)."""
        return self.attention_bias and self.ffn_bias

    @property
    def position_table_rows(self) -> int:
        """Rows of the absolute position table (0 for rotary positions)."""
        if self.position_kind is PositionKind.ABSOLUTE:
            return self.max_positions + self.position_offset
        return 0

    def layer_is_global(self, layer: int) -> bool:
        """Whether ``layer`` attends to the whole sequence (else a sliding window)."""
        return self.global_every == 0 or layer % self.global_every == 0


@dataclass(frozen=True)
class PoolingConfig:
    """sentence-transformers' Pooling module. Several modes are concatenated in this order.
    ``include_prompt=False``: the prompt's tokens (special tokens before it included) are left
    out of pooling, as sentence-transformers does."""

    modes: tuple[PoolingMode, ...]
    include_prompt: bool = True

    @property
    def mode(self) -> PoolingMode:
        """The pooling mode of a model that uses one (nearly all do)."""
        if len(self.modes) != 1:
            raise UnsupportedArchitecture(
                f"pooling concatenates {len(self.modes)} modes "
                f"({', '.join(m.value for m in self.modes)}); this part of edgembed handles one"
            )
        return self.modes[0]


@dataclass(frozen=True)
class DenseModule:
    """A sentence-transformers Dense module: ``y = act(x W^T + b)`` (+ ``x`` or ``x R^T`` with
    ``residual``). Its weights are ``dense.{i}.weight``/``.bias``/``.residual`` in
    ``load_weights``."""

    in_features: int
    out_features: int
    bias: bool
    activation: Activation
    weights_path: Path
    residual: bool = False


@dataclass(frozen=True)
class Head:
    """What sits on the encoder. ``NONE`` for embedding models (pooling, Dense and Normalize
    are described apart).

    ``CLASSIFICATION`` (a cross-encoder): ``num_labels`` logits from the first token
    (``pooling`` "cls") or the mean over the sequence (ModernBERT's ``classifier_pooling``
    "mean"), through ``activation`` inside the head (tanh for BERT's pooler and RoBERTa's dense
    layer, relu for DistilBERT, ModernBERT's ``classifier_activation``); ``score_activation``
    is what the cross-encoder applies to the logits to make its scores (sigmoid for one label
    unless the model says otherwise); ``labels`` are ``id2label`` in id order.

    ``MLM`` (SPLADE): vocabulary logits per token, turned into one vector per text by
    ``pooling`` ("max" or "sum" over the text's tokens) of ``activation``: "relu" is
    log(1 + relu(x)), "log1p_relu" log(1 + log(1 + relu(x))) (sentence-transformers'
    SpladePooling). ``max_active_dims``: keep only that many largest entries (None: all).
    ``transform_activation``: the activation of the masked-LM head's dense layer (BERT's and
    DistilBERT's hidden activation, GELU for RoBERTa-likes and MPNet, ModernBERT's
    ``classifier_activation``).
    """

    kind: HeadKind = HeadKind.NONE
    num_labels: int = 0
    labels: tuple[str, ...] = ()
    pooling: str = ""
    activation: Activation | str = Activation.IDENTITY
    score_activation: Activation = Activation.IDENTITY
    max_active_dims: int | None = None
    transform_activation: Activation = Activation.GELU  # the MLM head's dense layer


@dataclass(frozen=True)
class TokenizerInfo:
    kind: TokenizerKind
    path: Path  # tokenizer.json
    config_path: Path | None  # tokenizer_config.json, when present
    max_token_id: int  # the largest id tokenizer.json can produce


@dataclass(frozen=True)
class ModelDescription:
    """Everything edgembed knows about one model directory. Made by :func:`read_model_dir`.

    ``output_dim``: the width of the sentence vector (after pooling and Dense modules).
    ``normalize``: the model ends with a Normalize module (sentence-transformers L2-normalizes
    its vectors only then). ``max_seq_length``: tokens per text, special tokens included, at
    most ``encoder.max_positions``. ``do_lower_case``: sentence-transformers lower-cases the
    text first (a Lowercase normalizer placed before the tokenizer's own).
    ``files``: the paths, relative to ``source_dir``, that the description and weights come
    from (what a manifest should hash).
    """

    name: str
    source_dir: Path
    architectures: tuple[str, ...]
    encoder: EncoderConfig
    task: Task
    head: Head
    pooling: PoolingConfig | None
    dense: tuple[DenseModule, ...]
    normalize: bool
    output_dim: int
    max_seq_length: int
    do_lower_case: bool
    prompts: Mapping[str, str]
    default_prompt_name: str | None
    similarity_fn_name: Similarity
    tokenizer: TokenizerInfo
    weights_path: Path
    files: tuple[str, ...] = field(default=())

    def prompt(self, name: str) -> str:
        """The prompt called ``name``; the error lists the model's prompt names."""
        try:
            return self.prompts[name]
        except KeyError:
            known = ", ".join(sorted(self.prompts)) or "none"
            raise UnsupportedArchitecture(
                f"model {self.name!r} has no prompt named {name!r} (its prompts: {known})"
            ) from None

    @property
    def default_prompt(self) -> str:
        """The prompt ``embed`` applies when none is asked for ("" without a default)."""
        return self.prompts.get(self.default_prompt_name, "") if self.default_prompt_name else ""

    @property
    def query_prompt_name(self) -> str | None:
        """The prompt ``embed_query`` uses: "query" when the model has one
        (sentence-transformers' ``encode_query``); None: no prompt (not the default one)."""
        return "query" if "query" in self.prompts else None

    @property
    def document_prompt_name(self) -> str | None:
        """The prompt ``embed_document`` uses: the first of "document", "passage", "corpus"
        the model saves (sentence-transformers' ``encode_document`` as documented; its 6.2
        loader adds an empty "document" that hides "passage"); None: no prompt."""
        return next((n for n in ("document", "passage", "corpus") if n in self.prompts), None)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary (for manifests and ``embed info``)."""
        enc = self.encoder
        return {
            "name": self.name,
            "family": enc.family.value,
            "task": self.task.value,
            "hidden_size": enc.hidden_size,
            "num_layers": enc.num_layers,
            "num_heads": enc.num_heads,
            "max_positions": enc.max_positions,
            "output_dim": self.output_dim,
            "max_seq_length": self.max_seq_length,
            "pooling": [m.value for m in self.pooling.modes] if self.pooling else [],
            "include_prompt": self.pooling.include_prompt if self.pooling else True,
            "dense": [[d.in_features, d.out_features, d.activation.value] for d in self.dense],
            "normalize": self.normalize,
            "do_lower_case": self.do_lower_case,
            "prompts": dict(self.prompts),
            "default_prompt_name": self.default_prompt_name,
            "similarity_fn_name": self.similarity_fn_name.value,
            "tokenizer": self.tokenizer.kind.value,
            **({"head": self._head_summary()} if self.head.kind is not HeadKind.NONE else {}),
        }

    def _head_summary(self) -> dict[str, Any]:
        h = self.head
        if h.kind is HeadKind.CLASSIFICATION:
            return {"kind": h.kind.value, "num_labels": h.num_labels, "labels": list(h.labels),
                    "pooling": h.pooling, "score_activation": h.score_activation.value}
        return {"kind": h.kind.value, "pooling": h.pooling, "activation": str(h.activation),
                "max_active_dims": h.max_active_dims}


# --- small readers -----------------------------------------------------------------------------


def _read_json(path: Path, *, want: type = dict) -> Any:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidModelDir(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidModelDir(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, want):
        raise InvalidModelDir(f"{path} should hold a JSON {want.__name__}")
    return data


class _Fields:
    """Typed access to one JSON object, naming the file and field in every error."""

    def __init__(self, path: Path, data: Mapping[str, Any]) -> None:
        self.path = path
        self.data = data

    def _bad(self, key: str, what: str) -> InvalidModelDir:
        return InvalidModelDir(f"{self.path}: field {key!r} {what}")

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def int(self, key: str, default: int | None = None, *, minimum: int = 0) -> int:
        if not self.has(key):
            if default is None:
                raise self._bad(key, "is missing")
            return default
        v = self.data[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._bad(key, f"should be an integer, not {v!r}")
        if v < minimum:
            raise self._bad(key, f"should be at least {minimum}, not {v}")
        return v

    def float(self, key: str, default: float | None = None) -> float:
        if not self.has(key):
            if default is None:
                raise self._bad(key, "is missing")
            return default
        v = self.data[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self._bad(key, f"should be a number, not {v!r}")
        return float(v)

    def bool(self, key: str, default: bool | None = None) -> bool:
        if not self.has(key):
            if default is None:
                raise self._bad(key, "is missing")
            return default
        v = self.data[key]
        if not isinstance(v, bool):
            raise self._bad(key, f"should be true or false, not {v!r}")
        return v

    def str(self, key: str, default: str | None = None) -> str:
        if not self.has(key):
            if default is None:
                raise self._bad(key, "is missing")
            return default
        v = self.data[key]
        if not isinstance(v, str):
            raise self._bad(key, f"should be a string, not {v!r}")
        return v


# --- config.json -------------------------------------------------------------------------------

_FAMILY_OF_MODEL_TYPE = {
    "bert": Family.BERT,
    "distilbert": Family.DISTILBERT,
    "mpnet": Family.MPNET,
    "roberta": Family.ROBERTA,
    "xlm-roberta": Family.XLM_ROBERTA,
    "camembert": Family.CAMEMBERT,
    "modernbert": Family.MODERNBERT,
}
SUPPORTED_MODEL_TYPES = tuple(_FAMILY_OF_MODEL_TYPE)

# transformers' ACT2FN names → the activation they compute.
_HIDDEN_ACTS = {
    "gelu": Activation.GELU,
    "gelu_python": Activation.GELU,
    "gelu_new": Activation.GELU_TANH,
    "gelu_pytorch_tanh": Activation.GELU_TANH,
    "gelu_fast": Activation.GELU_TANH,
    "relu": Activation.RELU,
    "silu": Activation.SILU,
    "swish": Activation.SILU,
}

# MPNet's relative attention: transformers always computes 32 buckets up to distance 128.
MPNET_BUCKETS = 32
MPNET_MAX_DISTANCE = 128


def _activation(f: _Fields, key: str, default: str) -> Activation:
    name = f.str(key, default)
    try:
        return _HIDDEN_ACTS[name]
    except KeyError:
        raise UnsupportedArchitecture(
            f"{f.path}: field {key!r} is {name!r}; supported: {', '.join(_HIDDEN_ACTS)}"
        ) from None


def _read_encoder(path: Path) -> tuple[EncoderConfig, tuple[str, ...], _Fields]:
    f = _Fields(path, _read_json(path))
    model_type = f.str("model_type", "")
    if not model_type:
        raise InvalidModelDir(
            f"{path}: field 'model_type' is missing; a Hugging Face config.json names its "
            f"model type (supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    archs = f.data.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise InvalidModelDir(f"{path}: field 'architectures' should be a list of strings")
    family = _FAMILY_OF_MODEL_TYPE.get(model_type)
    if family is None:
        named = f" ({', '.join(archs)})" if archs else ""
        raise UnsupportedArchitecture(
            f"{path}: model_type {model_type!r}{named} is not supported; "
            f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if family is Family.DISTILBERT:
        enc = _distilbert(f)
    elif family is Family.MODERNBERT:
        enc = _modernbert(f)
    else:
        enc = _bert_like(f, family)
    if enc.hidden_size % enc.num_heads:
        raise InvalidModelDir(
            f"{path}: hidden size {enc.hidden_size} is not a multiple of the "
            f"{enc.num_heads} attention heads"
        )
    return enc, tuple(archs), f


def _bert_like(f: _Fields, family: Family) -> EncoderConfig:
    pos_type = f.str("position_embedding_type", "absolute")
    if pos_type != "absolute":
        raise UnsupportedArchitecture(
            f"{f.path}: field 'position_embedding_type' is {pos_type!r}; supported: 'absolute'"
        )
    table = f.int("max_position_embeddings", minimum=1)
    pad = f.int("pad_token_id", 1 if family is not Family.BERT else 0)
    if family is Family.BERT:
        offset = 0
        types = f.int("type_vocab_size", 2)
    elif family is Family.MPNET:
        offset = 2  # transformers' MPNetEmbeddings: padding_idx is 1 whatever the config says
        types = 0
        buckets = f.int("relative_attention_num_buckets", MPNET_BUCKETS)
        if buckets != MPNET_BUCKETS:
            raise UnsupportedArchitecture(
                f"{f.path}: field 'relative_attention_num_buckets' is {buckets}; transformers "
                f"computes {MPNET_BUCKETS} buckets whatever the table size, so only "
                f"{MPNET_BUCKETS} is supported"
            )
    else:  # RoBERTa, XLM-RoBERTa, CamemBERT: positions start after padding_idx
        offset = pad + 1
        types = f.int("type_vocab_size", 1)
    if table <= offset + 1:
        raise InvalidModelDir(
            f"{f.path}: max_position_embeddings {table} leaves no positions after the "
            f"offset {offset}"
        )
    mpnet = family is Family.MPNET
    return EncoderConfig(
        family=family,
        vocab_size=f.int("vocab_size", minimum=1),
        hidden_size=f.int("hidden_size", minimum=1),
        num_layers=f.int("num_hidden_layers", minimum=1),
        num_heads=f.int("num_attention_heads", minimum=1),
        intermediate_size=f.int("intermediate_size", minimum=1),
        max_positions=table - offset,
        position_kind=PositionKind.ABSOLUTE,
        position_offset=offset,
        relative_buckets=MPNET_BUCKETS if mpnet else 0,
        relative_max_distance=MPNET_MAX_DISTANCE if mpnet else 0,
        rope_theta=0.0,
        rope_theta_local=0.0,
        local_window=0,
        global_every=0,
        type_vocab_size=types,
        norm_placement=NormPlacement.POST,
        layer_norm_eps=f.float("layer_norm_eps", 1e-12),
        norm_bias=True,
        attention_bias=True,
        ffn_bias=True,
        final_norm=False,
        ffn_kind=FfnKind.MLP,
        activation=_activation(f, "hidden_act", "gelu"),
        pad_token_id=pad,
    )


def _distilbert(f: _Fields) -> EncoderConfig:
    return EncoderConfig(
        family=Family.DISTILBERT,
        vocab_size=f.int("vocab_size", minimum=1),
        hidden_size=f.int("dim", minimum=1),
        num_layers=f.int("n_layers", minimum=1),
        num_heads=f.int("n_heads", minimum=1),
        intermediate_size=f.int("hidden_dim", minimum=1),
        max_positions=f.int("max_position_embeddings", minimum=2),
        position_kind=PositionKind.ABSOLUTE,
        position_offset=0,
        relative_buckets=0,
        relative_max_distance=0,
        rope_theta=0.0,
        rope_theta_local=0.0,
        local_window=0,
        global_every=0,
        type_vocab_size=0,
        norm_placement=NormPlacement.POST,
        layer_norm_eps=1e-12,  # fixed in transformers' DistilBERT
        norm_bias=True,
        attention_bias=True,
        ffn_bias=True,
        final_norm=False,
        ffn_kind=FfnKind.MLP,
        activation=_activation(f, "activation", "gelu"),
        pad_token_id=f.int("pad_token_id", 0),
    )


def _modernbert(f: _Fields) -> EncoderConfig:
    layers = f.int("num_hidden_layers", minimum=1)
    # Two ways to state the attention pattern: transformers 5's ``layer_types`` list, or the
    # older ``global_attn_every_n_layers`` (layer l global iff l % n == 0).
    if f.has("layer_types"):
        types = f.data["layer_types"]
        if (not isinstance(types, list) or len(types) != layers
                or any(t not in ("full_attention", "sliding_attention") for t in types)):
            raise InvalidModelDir(
                f"{f.path}: field 'layer_types' should list 'full_attention' or "
                f"'sliding_attention' for each of the {layers} layers"
            )
        global_every = _global_every(types)
        if global_every < 0:
            raise UnsupportedArchitecture(
                f"{f.path}: field 'layer_types' {types} is not a pattern of one global layer "
                "every n layers (l % n == 0), the only one supported"
            )
    else:
        global_every = f.int("global_attn_every_n_layers", 3, minimum=1)
        if global_every == 1 or layers == 1:
            global_every = 0
    rope = f.data.get("rope_parameters") if f.has("rope_parameters") else None
    if rope is not None:
        if not isinstance(rope, dict):
            raise InvalidModelDir(f"{f.path}: field 'rope_parameters' should be an object")
        theta_g = _rope_theta(f, rope, "full_attention")
        theta_l = _rope_theta(f, rope, "sliding_attention")
    else:
        if f.has("rope_scaling"):
            raise UnsupportedArchitecture(
                f"{f.path}: field 'rope_scaling' is set; only default rotary embeddings are "
                "supported"
            )
        theta_g = f.float("global_rope_theta", 160_000.0)
        theta_l = f.float("local_rope_theta", 10_000.0)
    if f.has("head_dim") and f.int("head_dim") * f.int("num_attention_heads") != f.int(
            "hidden_size"):
        raise UnsupportedArchitecture(
            f"{f.path}: field 'head_dim' {f.int('head_dim')} differs from hidden_size / "
            "num_attention_heads; supported: head_dim = hidden_size / num_attention_heads"
        )
    window = f.int("local_attention", 128, minimum=2)
    attn_bias = f.bool("attention_bias", False)
    mlp_bias = f.bool("mlp_bias", False)
    return EncoderConfig(
        family=Family.MODERNBERT,
        vocab_size=f.int("vocab_size", minimum=1),
        hidden_size=f.int("hidden_size", minimum=1),
        num_layers=layers,
        num_heads=f.int("num_attention_heads", minimum=1),
        intermediate_size=f.int("intermediate_size", minimum=1),
        max_positions=f.int("max_position_embeddings", minimum=2),
        position_kind=PositionKind.ROTARY,
        position_offset=0,
        relative_buckets=0,
        relative_max_distance=0,
        rope_theta=theta_g,
        rope_theta_local=theta_l,
        local_window=window if global_every else 0,
        global_every=global_every,
        type_vocab_size=0,
        norm_placement=NormPlacement.PRE,
        layer_norm_eps=f.float("norm_eps", 1e-5),
        norm_bias=f.bool("norm_bias", False),
        attention_bias=attn_bias,
        ffn_bias=mlp_bias,
        final_norm=True,
        ffn_kind=FfnKind.GLU,
        activation=_activation(f, "hidden_activation", "gelu"),
        pad_token_id=f.int("pad_token_id", 50283),
    )


def _global_every(types: list[str]) -> int:
    """n such that layer l is global iff l % n == 0 (0: all global), or -1 for no such n."""
    if all(t == "full_attention" for t in types):
        return 0
    for n in range(2, len(types) + 1):
        if all((t == "full_attention") == (i % n == 0) for i, t in enumerate(types)):
            return n
    return -1


def _rope_theta(f: _Fields, rope: Mapping[str, Any], kind: str) -> float:
    params = rope.get(kind)
    if not isinstance(params, dict):
        raise InvalidModelDir(f"{f.path}: field 'rope_parameters.{kind}' should be an object")
    if params.get("rope_type", "default") != "default":
        raise UnsupportedArchitecture(
            f"{f.path}: field 'rope_parameters.{kind}.rope_type' is "
            f"{params.get('rope_type')!r}; supported: 'default'"
        )
    theta = params.get("rope_theta")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
        raise InvalidModelDir(f"{f.path}: field 'rope_parameters.{kind}.rope_theta' is {theta!r}")
    return float(theta)


# --- sentence-transformers modules -------------------------------------------------------------

_LEGACY_POOLING_KEYS = {  # sentence-transformers' concatenation order
    "pooling_mode_cls_token": PoolingMode.CLS,
    "pooling_mode_max_tokens": PoolingMode.MAX,
    "pooling_mode_mean_tokens": PoolingMode.MEAN,
    "pooling_mode_mean_sqrt_len_tokens": PoolingMode.MEAN_SQRT_LEN_TOKENS,
    "pooling_mode_weightedmean_tokens": PoolingMode.WEIGHTEDMEAN,
    "pooling_mode_lasttoken": PoolingMode.LASTTOKEN,
}
_DENSE_ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": Activation.IDENTITY,
    "torch.nn.modules.activation.Tanh": Activation.TANH,
    "torch.nn.modules.activation.ReLU": Activation.RELU,
    "torch.nn.modules.activation.GELU": Activation.GELU,
    "torch.nn.modules.activation.Sigmoid": Activation.SIGMOID,
    "torch.nn.modules.activation.SiLU": Activation.SILU,
}
_MODULE_KINDS = ("Transformer", "Pooling", "Dense", "Normalize")


def _pooling_mode(path: Path, value: Any) -> PoolingMode:
    try:
        return PoolingMode(value)
    except ValueError:
        known = ", ".join(m.value for m in PoolingMode)
        raise UnsupportedArchitecture(
            f"{path}: pooling mode {value!r} is not supported; supported: {known}"
        ) from None


def _read_pooling(path: Path, hidden: int) -> PoolingConfig:
    f = _Fields(path, _read_json(path))
    known = {"embedding_dimension", "word_embedding_dimension", "pooling_mode", "include_prompt",
             *_LEGACY_POOLING_KEYS}
    for key in f.data:
        if key not in known:
            raise UnsupportedArchitecture(
                f"{path}: field {key!r} is not a Pooling option edgembed knows "
                f"(known: {', '.join(sorted(known))})"
            )
    dim_key = "embedding_dimension" if f.has("embedding_dimension") else "word_embedding_dimension"
    if f.has(dim_key) and f.int(dim_key) != hidden:
        raise InvalidModelDir(
            f"{path}: field {dim_key!r} is {f.int(dim_key)}, but the encoder's hidden size "
            f"is {hidden}"
        )
    if f.has("pooling_mode"):
        raw = f.data["pooling_mode"]
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, list) or not items:
            raise InvalidModelDir(f"{path}: field 'pooling_mode' should be a mode or a list")
        modes = tuple(_pooling_mode(path, m) for m in items)
    else:
        modes = tuple(m for k, m in _LEGACY_POOLING_KEYS.items() if f.bool(k, False))
        if not modes:  # sentence-transformers' own default for a config that names no mode
            modes = (PoolingMode.MEAN,)
    return PoolingConfig(modes=modes, include_prompt=f.bool("include_prompt", True))


def _read_dense(path: Path, index: int, in_features: int) -> DenseModule:
    cfg = path / "config.json"
    f = _Fields(cfg, _read_json(cfg))
    for key in ("module_input_name", "module_output_name"):
        if f.str(key, "sentence_embedding") != "sentence_embedding":
            raise UnsupportedArchitecture(
                f"{cfg}: field {key!r} is {f.str(key)!r}; supported: 'sentence_embedding'"
            )
    act_name = f.str("activation_function", "torch.nn.modules.activation.Tanh")
    act = _DENSE_ACTIVATIONS.get(act_name)
    if act is None:
        raise UnsupportedArchitecture(
            f"{cfg}: field 'activation_function' is {act_name!r}; supported: "
            f"{', '.join(_DENSE_ACTIVATIONS)}"
        )
    n_in, n_out = f.int("in_features", minimum=1), f.int("out_features", minimum=1)
    if n_in != in_features:
        raise InvalidModelDir(
            f"{cfg}: field 'in_features' is {n_in}, but the vector reaching Dense module "
            f"{index} has {in_features} dimensions"
        )
    weights = path / "model.safetensors"
    if not weights.is_file():
        legacy = [p.name for p in (path / "pytorch_model.bin", path / "model.pt") if p.is_file()]
        if legacy:
            raise UnsupportedArchitecture(
                f"{path}: the Dense weights are in {legacy[0]}, a torch pickle edgembed does not "
                "read; convert them once with sentence-transformers (load the model and "
                "`model.save(dir)`, which writes model.safetensors)"
            )
        raise InvalidModelDir(f"{weights} is missing")
    return DenseModule(in_features=n_in, out_features=n_out, bias=f.bool("bias", True),
                       activation=act, weights_path=weights,
                       residual=f.bool("use_residual", False))


def _module_kind(path: Path, entry: Any, i: int) -> tuple[str, str]:
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        raise InvalidModelDir(f"{path}: entry {i} should be an object with a 'type'")
    kind = entry["type"].rsplit(".", 1)[-1]
    sub = entry.get("path", "")
    if not isinstance(sub, str) or ".." in Path(sub).parts or Path(sub).is_absolute():
        raise InvalidModelDir(f"{path}: entry {i} has a bad 'path' {sub!r}")
    return kind, sub


# What sentence_bert_config.json says of the Transformer module, per task: its transformer
# task, the model output it reads and the feature it writes (sentence-transformers >= 5.4).
_TRANSFORMER_TASKS = {
    "feature-extraction": ("last_hidden_state", "token_embeddings"),
    "sequence-classification": ("logits", "scores"),
    "fill-mask": ("logits", "token_embeddings"),
}


def _read_sentence_bert_config(path: Path) -> tuple[_Fields, str]:
    """The file's fields and its transformer task (``feature-extraction`` when it names none,
    as sentence-transformers assumes)."""
    f = _Fields(path, _read_json(path) if path.is_file() else {})
    task = f.str("transformer_task", "feature-extraction")
    if task not in _TRANSFORMER_TASKS:
        raise UnsupportedArchitecture(f"{path}: field 'transformer_task' is {task!r}; "
                                      f"supported: {', '.join(_TRANSFORMER_TASKS)}")
    method_output, module_output = _TRANSFORMER_TASKS[task]
    if f.str("module_output_name", module_output) != module_output:
        raise UnsupportedArchitecture(f"{path}: field 'module_output_name' is "
                                      f"{f.str('module_output_name')!r}; supported with "
                                      f"transformer_task {task!r}: {module_output!r}")
    mc = f.data.get("modality_config")
    if mc is not None and mc != {"text": {"method": "forward",
                                          "method_output_name": method_output}}:
        raise UnsupportedArchitecture(
            f"{path}: field 'modality_config' is {mc!r}; supported: text through the "
            f"encoder's forward ({method_output})"
        )
    return f, task


@dataclass(frozen=True)
class _StConfig:
    """config_sentence_transformers.json."""

    prompts: dict[str, str]
    default_prompt_name: str | None
    similarity: Similarity | None  # None: the file names none
    model_type: str
    fields: _Fields


_ST_MODEL_TYPES = ("SentenceTransformer", "SparseEncoder", "CrossEncoder")


def _read_st_config(path: Path) -> _StConfig:
    if not path.is_file():
        return _StConfig({}, None, None, "", _Fields(path, {}))
    f = _Fields(path, _read_json(path))
    raw = f.data.get("prompts") or {}
    if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise InvalidModelDir(f"{path}: field 'prompts' should map names to strings")
    default = f.data.get("default_prompt_name")
    if default is not None and (not isinstance(default, str) or default not in raw):
        raise InvalidModelDir(
            f"{path}: field 'default_prompt_name' is {default!r}, which is not one of its "
            f"prompts ({', '.join(sorted(raw)) or 'none'})"
        )
    sim = f.data.get("similarity_fn_name")
    similarity: Similarity | None = None
    if sim is not None:
        try:
            similarity = Similarity(sim)
        except ValueError:
            raise UnsupportedArchitecture(
                f"{path}: field 'similarity_fn_name' is {sim!r}; supported: "
                f"{', '.join(s.value for s in Similarity)}"
            ) from None
    model_type = f.str("model_type", "")
    if model_type and model_type not in _ST_MODEL_TYPES:
        raise UnsupportedArchitecture(
            f"{path}: field 'model_type' is {model_type!r}; supported: "
            f"{', '.join(_ST_MODEL_TYPES)}"
        )
    return _StConfig(dict(raw), default, similarity, model_type, f)


def _read_tokenizer(source: Path) -> tuple[TokenizerInfo, int | None]:
    path = source / "tokenizer.json"
    data = _read_json(path)
    model = data.get("model")
    if not isinstance(model, dict):
        raise InvalidModelDir(f"{path}: field 'model' is missing")
    kinds = {"WordPiece": TokenizerKind.WORDPIECE, "Unigram": TokenizerKind.UNIGRAM,
             "BPE": TokenizerKind.BPE}
    kind = kinds.get(model.get("type"))  # type: ignore[arg-type]
    if kind is None:
        raise UnsupportedArchitecture(
            f"{path}: field 'model.type' is {model.get('type')!r}; supported: "
            f"{', '.join(kinds)}"
        )
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        ids = [v for v in vocab.values() if isinstance(v, int)]
        top = max(ids, default=-1)
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...] by id
        top = len(vocab) - 1
    else:
        raise InvalidModelDir(f"{path}: field 'model.vocab' is missing")
    for tok in data.get("added_tokens") or []:
        if isinstance(tok, dict) and isinstance(tok.get("id"), int):
            top = max(top, tok["id"])
    cfg_path = source / "tokenizer_config.json"
    model_max: int | None = None
    if cfg_path.is_file():
        cfg = _Fields(cfg_path, _read_json(cfg_path))
        v = cfg.data.get("model_max_length")
        # transformers writes 1e30 ("no limit") when a tokenizer has none.
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 40:
            model_max = v
    return TokenizerInfo(kind=kind, path=path,
                         config_path=cfg_path if cfg_path.is_file() else None,
                         max_token_id=top), model_max


_SPLADE_KEYS = ("pooling_strategy", "activation_function", "embedding_dimension",
                "word_embedding_dimension", "chunk_size")


def _score_activation(cfg: _Fields, st: _StConfig, n_labels: int) -> Activation:
    """What a cross-encoder applies to its logits, where sentence-transformers 6 looks for it:
    ``activation_fn`` in config_sentence_transformers.json (what it writes), else
    ``sentence_transformers.activation_fn`` in config.json (what earlier versions wrote), else
    ``sbert_ce_default_activation_function`` there (the oldest), else sigmoid for one label and
    identity for more (its default)."""
    found: tuple[Path, str, Any] | None = None
    if st.fields.has("activation_fn"):
        found = (st.fields.path, "activation_fn", st.fields.data["activation_fn"])
    else:
        legacy = cfg.data.get("sentence_transformers")
        if isinstance(legacy, dict) and legacy.get("activation_fn") is not None:
            found = (cfg.path, "sentence_transformers.activation_fn", legacy["activation_fn"])
        elif cfg.has("sbert_ce_default_activation_function"):
            found = (cfg.path, "sbert_ce_default_activation_function",
                     cfg.data["sbert_ce_default_activation_function"])
    if found is None:
        return Activation.SIGMOID if n_labels == 1 else Activation.IDENTITY
    where, key, name = found
    if not isinstance(name, str) or name not in _DENSE_ACTIVATIONS:
        raise UnsupportedArchitecture(
            f"{where}: field {key!r} is {name!r}; supported: {', '.join(_DENSE_ACTIVATIONS)}")
    return _DENSE_ACTIVATIONS[name]


def _read_splade(path: Path, vocab_size: int) -> tuple[str, str]:
    p = _Fields(path, _read_json(path))
    for key in p.data:
        if key not in _SPLADE_KEYS:
            raise UnsupportedArchitecture(
                f"{path}: field {key!r} is not a SpladePooling option edgembed knows "
                f"(known: {', '.join(_SPLADE_KEYS)})")
    strategy = p.str("pooling_strategy", "max")
    act = p.str("activation_function", "relu")
    if strategy not in ("max", "sum") or act not in ("relu", "log1p_relu"):
        raise UnsupportedArchitecture(
            f"{path}: SPLADE pooling {strategy!r} / activation {act!r}; supported: max or sum, "
            "relu or log1p_relu")
    for key in ("embedding_dimension", "word_embedding_dimension"):
        if p.has(key) and p.int(key) != vocab_size:
            raise InvalidModelDir(f"{path}: field {key!r} is {p.int(key)}, but the vocabulary "
                                  f"(config.json vocab_size) has {vocab_size} entries")
    p.int("chunk_size", 0)  # memory only: the result does not depend on it
    return strategy, act


def _mlm_activation(cfg: _Fields, enc: EncoderConfig) -> Activation:
    """The activation of the masked-LM head's dense layer, as transformers builds each head."""
    if enc.family in (Family.BERT, Family.DISTILBERT):
        return enc.activation  # BertPredictionHeadTransform, DistilBERT's vocab_transform
    if enc.family is Family.MODERNBERT:
        return _activation(cfg, "classifier_activation", "gelu")
    return Activation.GELU  # RobertaLMHead, MPNetLMHead: exact GELU whatever hidden_act says


def _read_head(cfg: _Fields, enc: EncoderConfig, archs: tuple[str, ...], source: Path,
               modules: list[tuple[str, str]], sb_task: str, st: _StConfig,
               task_hint: Task | None) -> tuple[Task, Head, list[str]]:
    """The model's task and head, and the extra files they were read from.

    Sparse: modules Transformer (transformer_task fill-mask) or the legacy MLMTransformer,
    then SpladePooling; or, when the caller knows the model is sparse (``task_hint``, a catalog
    entry), a bare ``*ForMaskedLM`` checkpoint, which sentence-transformers' SparseEncoder
    reads as max pooling of log(1 + relu). Rerank: a ``*ForSequenceClassification`` checkpoint
    without modules.json (cross-encoders before sentence-transformers 5.4), or one Transformer
    module whose transformer_task is sequence-classification.
    """
    kinds = [k for k, _ in modules]
    mod_path = source / "modules.json"
    is_mlm = any(a.endswith("ForMaskedLM") for a in archs)
    is_cls = any(a.endswith("ForSequenceClassification") for a in archs)
    if "SpladePooling" in kinds or "MLMTransformer" in kinds or sb_task == "fill-mask":
        if (len(kinds) != 2 or kinds[0] not in ("Transformer", "MLMTransformer")
                or kinds[1] != "SpladePooling"):
            raise UnsupportedArchitecture(
                f"{mod_path}: sparse encoder modules {', '.join(kinds) or 'none'}; supported: "
                "Transformer (fill-mask) or MLMTransformer, then SpladePooling")
        if kinds[0] == "Transformer" and sb_task != "fill-mask":
            raise UnsupportedArchitecture(
                f"{source / 'sentence_bert_config.json'}: transformer_task is {sb_task!r}; a "
                "SpladePooling model's Transformer is 'fill-mask'")
        if modules[0][1] not in ("", "."):
            raise UnsupportedArchitecture(
                f"{mod_path}: the Transformer module lives in {modules[0][1]!r}; supported: "
                "the model directory itself")
        pool_path = source / modules[1][1] / "config.json"
        strategy, splade_act = _read_splade(pool_path, enc.vocab_size)
        if not is_mlm:
            raise UnsupportedArchitecture(
                f"{cfg.path}: SPLADE pooling needs a masked-LM checkpoint (*ForMaskedLM); "
                f"architectures are {', '.join(archs) or 'not named'}")
        top = st.fields.int("max_active_dims", 0, minimum=1) or None
        return (Task.SPARSE, Head(kind=HeadKind.MLM, pooling=strategy, activation=splade_act,
                                  max_active_dims=top,
                                  transform_activation=_mlm_activation(cfg, enc)),
                [str(pool_path.relative_to(source))])
    if not modules and is_mlm and task_hint is Task.SPARSE:
        return Task.SPARSE, Head(kind=HeadKind.MLM, pooling="max", activation="relu",
                                 transform_activation=_mlm_activation(cfg, enc)), []
    if sb_task == "sequence-classification" or (not modules and is_cls) or (
            st.model_type == "CrossEncoder"):
        if modules and kinds != ["Transformer"]:
            raise UnsupportedArchitecture(
                f"{mod_path}: cross-encoder modules {', '.join(kinds)}; supported: one "
                "Transformer (transformer_task sequence-classification)")
        if modules and modules[0][1] not in ("", "."):
            raise UnsupportedArchitecture(
                f"{mod_path}: the Transformer module lives in {modules[0][1]!r}; supported: "
                "the model directory itself")
        if not is_cls:
            raise UnsupportedArchitecture(
                f"{cfg.path}: a cross-encoder needs a sequence-classification checkpoint "
                f"(*ForSequenceClassification); architectures are "
                f"{', '.join(archs) or 'not named'}")
        labels_raw = cfg.data.get("id2label") or {}
        if not isinstance(labels_raw, dict):
            raise InvalidModelDir(f"{cfg.path}: field 'id2label' should be an object")
        n = cfg.int("num_labels", len(labels_raw) or 2, minimum=1)
        try:
            labels = tuple(str(labels_raw[k]) for k in sorted(labels_raw, key=int))
        except ValueError:
            raise InvalidModelDir(f"{cfg.path}: field 'id2label' keys should be integers") from None
        if labels and len(labels) != n:
            raise InvalidModelDir(f"{cfg.path}: id2label names {len(labels)} labels but "
                                  f"num_labels is {n}")
        score = _score_activation(cfg, st, n)
        if enc.family is Family.MODERNBERT:
            pooling = cfg.str("classifier_pooling", "cls")
            act: Activation | str = _activation(cfg, "classifier_activation", "gelu")
        elif enc.family is Family.DISTILBERT:
            pooling, act = "cls", Activation.RELU
        else:
            pooling, act = "cls", Activation.TANH
        if pooling not in ("cls", "mean"):
            raise UnsupportedArchitecture(
                f"{cfg.path}: field 'classifier_pooling' is {pooling!r}; supported: cls, mean")
        return Task.RERANK, Head(kind=HeadKind.CLASSIFICATION, num_labels=n, labels=labels,
                                 pooling=pooling, activation=act, score_activation=score), []
    if sb_task != "feature-extraction":
        raise UnsupportedArchitecture(
            f"{source / 'sentence_bert_config.json'}: transformer_task {sb_task!r} with "
            f"modules {', '.join(kinds)}; supported: feature-extraction (embeddings), "
            "sequence-classification (cross-encoders), fill-mask with SpladePooling (sparse)")
    return Task.EMBEDDING, Head(), []


def read_model_dir(path: str | Path, name: str | None = None, *,
                   task: Task | None = None) -> ModelDescription:
    """Describe the model in directory ``path`` (see the module docstring for its files).

    ``name`` defaults to the directory's name, lower-cased. ``task``: what the caller knows the
    model to be (a catalog entry's task), for the one case the files leave open: a bare
    ``*ForMaskedLM`` checkpoint is a SPLADE model when ``task`` is sparse, an embedding model
    (mean pooling, as sentence-transformers wraps it) otherwise. Reads the JSON files
    (tokenizer.json included), never the weights: ``load_weights`` does that.
    """
    source = Path(path).expanduser()
    if not source.is_dir():
        raise ModelNotFound(f"{source} is not a directory")
    missing = [f for f in ("config.json", "model.safetensors", "tokenizer.json")
               if not (source / f).is_file()]
    if missing:
        hint = ""
        if "model.safetensors" in missing and (source / "pytorch_model.bin").is_file():
            hint = (" (the weights are in pytorch_model.bin, a torch pickle edgembed does not "
                    "read: save the model again with `save_pretrained(dir)`, which writes "
                    "model.safetensors)")
        raise InvalidModelDir(
            f"{source} is not a model directory: missing {', '.join(missing)}{hint}; a Hugging "
            "Face model directory has config.json, model.safetensors and tokenizer.json"
        )
    files = ["config.json", "model.safetensors", "tokenizer.json"]
    enc, archs, cfg = _read_encoder(source / "config.json")
    tokenizer, tok_max = _read_tokenizer(source)
    if tokenizer.config_path is not None:
        files.append("tokenizer_config.json")
    if tokenizer.max_token_id >= enc.vocab_size:
        raise InvalidModelDir(
            f"{tokenizer.path}: the tokenizer produces ids up to {tokenizer.max_token_id}, but "
            f"config.json has vocab_size {enc.vocab_size} (embedding rows)"
        )

    # modules.json: Transformer, Pooling, Dense..., Normalize. Without it, sentence-transformers
    # wraps a plain checkpoint in Transformer + mean Pooling (no Normalize); so does edgembed.
    modules: list[tuple[str, str]] = []
    mod_path = source / "modules.json"
    if mod_path.is_file():
        files.append("modules.json")
        entries = _read_json(mod_path, want=list)
        modules = [_module_kind(mod_path, e, i) for i, e in enumerate(entries)]
    sb_path = source / "sentence_bert_config.json"
    sb, sb_task = _read_sentence_bert_config(sb_path)
    if sb_path.is_file():
        files.append(sb_path.name)
    st_path = source / "config_sentence_transformers.json"
    st = _read_st_config(st_path)
    if st_path.is_file():
        files.append(st_path.name)
    task_read, head, head_files = _read_head(cfg, enc, archs, source, modules, sb_task, st, task)
    task = task_read
    files += head_files
    pooling: PoolingConfig | None = None
    dense: list[DenseModule] = []
    normalize = False
    output_dim = enc.hidden_size
    if task is Task.EMBEDDING:
        kinds = [k for k, _ in modules]
        if not modules:
            pooling = PoolingConfig(modes=(PoolingMode.MEAN,))
        else:
            unknown = [k for k in kinds if k not in _MODULE_KINDS]
            middle = kinds[2:-1] if kinds[-1] == "Normalize" else kinds[2:]
            order_ok = (kinds[:2] == ["Transformer", "Pooling"]
                        and all(k == "Dense" for k in middle))
            if unknown or not order_ok:
                raise UnsupportedArchitecture(
                    f"{mod_path}: modules {', '.join(kinds)}; supported: "
                    "Transformer, Pooling, any Dense modules, then an optional Normalize"
                    + (f" (unknown: {', '.join(unknown)})" if unknown else "")
                )
            if modules[0][1] not in ("", "."):
                raise UnsupportedArchitecture(
                    f"{mod_path}: the Transformer module lives in {modules[0][1]!r}; "
                    "supported: the model directory itself"
                )
            pool_cfg = source / modules[1][1] / "config.json"
            pooling = _read_pooling(pool_cfg, enc.hidden_size)
            files.append(str(pool_cfg.relative_to(source)))
            output_dim = enc.hidden_size * len(pooling.modes)
            for kind, sub in modules[2:]:
                if kind == "Dense":
                    d = _read_dense(source / sub, len(dense), output_dim)
                    dense.append(d)
                    output_dim = d.out_features
                    files += [str((source / sub / "config.json").relative_to(source)),
                              str(d.weights_path.relative_to(source))]
                elif kind == "Normalize":
                    normalize = True
                    ncfg = source / sub / "config.json"
                    if sub and ncfg.is_file():
                        nf = _Fields(ncfg, _read_json(ncfg))
                        for key in ("module_input_name", "module_output_name"):
                            if nf.str(key, "sentence_embedding") != "sentence_embedding":
                                raise UnsupportedArchitecture(
                                    f"{ncfg}: field {key!r} is {nf.str(key)!r}; supported: "
                                    "'sentence_embedding'")
                        files.append(str(ncfg.relative_to(source)))

    if task is Task.RERANK:
        output_dim = head.num_labels
    elif task is Task.SPARSE:
        output_dim = enc.vocab_size
    # max_seq_length: sentence_bert_config.json, else (sentence-transformers >= 5 keeps it
    # there) tokenizer_config.json's model_max_length; never more than the usable positions.
    if sb.has("max_seq_length"):
        max_len = sb.int("max_seq_length", minimum=2)
    elif tok_max is not None:
        max_len = tok_max
    else:
        max_len = enc.max_positions
    max_len = min(max_len, enc.max_positions)
    if max_len < 2:
        raise InvalidModelDir(f"{source}: max_seq_length {max_len} leaves no room for text")
    # sentence-transformers' default similarity: dot product for sparse vectors, else cosine
    similarity = st.similarity or (Similarity.DOT if task is Task.SPARSE else Similarity.COSINE)

    return ModelDescription(
        name=(name or source.resolve().name).lower(),
        source_dir=source,
        architectures=archs,
        encoder=enc,
        task=task,
        head=head,
        pooling=pooling,
        dense=tuple(dense),
        normalize=normalize,
        output_dim=output_dim,
        max_seq_length=max_len,
        do_lower_case=sb.bool("do_lower_case", False),
        prompts=MappingProxyType(dict(st.prompts)),
        default_prompt_name=st.default_prompt_name,
        similarity_fn_name=similarity,
        tokenizer=tokenizer,
        weights_path=source / "model.safetensors",
        files=tuple(dict.fromkeys(files)),
    )


# --- safetensors -------------------------------------------------------------------------------

_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8",
              "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_safetensors(path: Path, *, remedy: str = "") -> dict[str, Array]:
    """Every tensor of a safetensors file, as numpy arrays (BF16 widened to float32).

    Read here rather than with the ``safetensors`` package so BF16 checkpoints load without
    torch, and so a damaged file gets an error that names it.
    """
    import numpy as np

    def bad(why: str) -> InvalidModelDir:
        return InvalidModelDir(f"{path} is not a readable safetensors file ({why}){remedy}")

    try:
        raw = np.memmap(path, dtype=np.uint8, mode="r")
    except FileNotFoundError:
        raise InvalidModelDir(f"{path} is missing") from None
    except (OSError, ValueError) as exc:
        raise bad(str(exc)) from None
    if raw.size < 8:
        raise bad("truncated: no header")
    (hlen,) = struct.unpack("<Q", raw[:8].tobytes())
    if hlen > raw.size - 8 or hlen > 100_000_000:
        raise bad(f"header length {hlen} exceeds the file")
    try:
        header = json.loads(raw[8:8 + hlen].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"header: {exc}") from None
    if not isinstance(header, dict):
        raise bad("header is not an object")
    data = raw[8 + hlen:]
    out: dict[str, Array] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(_ST_DTYPES[entry["dtype"]])
            shape = tuple(int(s) for s in entry["shape"])
            start, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise bad(f"tensor {name!r} has a bad or unsupported entry {entry!r}") from None
        count = math.prod(shape)
        if not 0 <= start <= end <= data.size or end - start != count * dtype.itemsize:
            raise bad(f"tensor {name!r} lies outside the file (truncated?)")
        arr = np.frombuffer(data, dtype=dtype, count=count, offset=start).reshape(shape)
        if entry["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return out


# --- canonical weight names --------------------------------------------------------------------

_PREFIXES = ("bert.", "roberta.", "distilbert.", "mpnet.", "model.", "camembert.")
# A masked-LM head holds two vocabulary biases in transformers 5 (BERT's cls.predictions.bias
# and cls.predictions.decoder.bias, RoBERTa's lm_head.bias and lm_head.decoder.bias): tied (the
# default) they are one tensor and a checkpoint stores one of them; with tie_word_embeddings
# false both are stored, and the forward pass adds only the decoder's own (nn.Linear's bias), the
# head's staying unused. So when a checkpoint has both, mlm.decoder.bias is the decoder's.
_IGNORED = re.compile(r"(^|\.)position_ids$|^cls\.seq_relationship\.|(^|\.)token_type_ids$")


def _rename_bert_like(name: str, family: Family) -> str | None:
    """Checkpoint name (prefix removed) → canonical name, for BERT, RoBERTa-likes, MPNet."""
    name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", name)
    name = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name)
    fixed = {
        "embeddings.word_embeddings.weight": "embeddings.word",
        "embeddings.position_embeddings.weight": "embeddings.position",
        "embeddings.token_type_embeddings.weight": "embeddings.token_type",
        "embeddings.LayerNorm.weight": "embeddings.norm.weight",
        "embeddings.LayerNorm.bias": "embeddings.norm.bias",
        "encoder.relative_attention_bias.weight": "encoder.relative_bias",
        "pooler.dense.weight": "pooler.dense.weight",
        "pooler.dense.bias": "pooler.dense.bias",
        # masked-LM heads: BERT's cls.predictions, RoBERTa's and MPNet's lm_head
        "cls.predictions.transform.dense.weight": "mlm.transform.weight",
        "cls.predictions.transform.dense.bias": "mlm.transform.bias",
        "cls.predictions.transform.LayerNorm.weight": "mlm.norm.weight",
        "cls.predictions.transform.LayerNorm.bias": "mlm.norm.bias",
        "cls.predictions.decoder.weight": "mlm.decoder.weight",
        "cls.predictions.decoder.bias": "mlm.decoder.bias",
        "cls.predictions.bias": "mlm.decoder.bias",
        "lm_head.dense.weight": "mlm.transform.weight",
        "lm_head.dense.bias": "mlm.transform.bias",
        "lm_head.layer_norm.weight": "mlm.norm.weight",
        "lm_head.layer_norm.bias": "mlm.norm.bias",
        "lm_head.decoder.weight": "mlm.decoder.weight",
        "lm_head.decoder.bias": "mlm.decoder.bias",
        "lm_head.bias": "mlm.decoder.bias",
        # classification heads
        "classifier.weight": "classifier.out.weight",
        "classifier.bias": "classifier.out.bias",
        "classifier.dense.weight": "classifier.dense.weight",
        "classifier.dense.bias": "classifier.dense.bias",
        "classifier.out_proj.weight": "classifier.out.weight",
        "classifier.out_proj.bias": "classifier.out.bias",
    }
    if name in fixed:
        return fixed[name]
    m = re.match(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$", name)
    if not m:
        return None
    layer, part, kind = m.groups()
    if family is Family.MPNET:
        parts = {"attention.attn.q": "attention.q", "attention.attn.k": "attention.k",
                 "attention.attn.v": "attention.v", "attention.attn.o": "attention.o",
                 "attention.LayerNorm": "attention.norm"}
    else:
        parts = {"attention.self.query": "attention.q", "attention.self.key": "attention.k",
                 "attention.self.value": "attention.v", "attention.output.dense": "attention.o",
                 "attention.output.LayerNorm": "attention.norm"}
    parts |= {"intermediate.dense": "ffn.up", "output.dense": "ffn.down",
              "output.LayerNorm": "ffn.norm"}
    return f"layers.{layer}.{parts[part]}.{kind}" if part in parts else None


def _rename_distilbert(name: str) -> str | None:
    fixed = {
        "embeddings.word_embeddings.weight": "embeddings.word",
        "embeddings.position_embeddings.weight": "embeddings.position",
        "embeddings.LayerNorm.weight": "embeddings.norm.weight",
        "embeddings.LayerNorm.bias": "embeddings.norm.bias",
        "vocab_transform.weight": "mlm.transform.weight",
        "vocab_transform.bias": "mlm.transform.bias",
        "vocab_layer_norm.weight": "mlm.norm.weight",
        "vocab_layer_norm.bias": "mlm.norm.bias",
        "vocab_projector.weight": "mlm.decoder.weight",
        "vocab_projector.bias": "mlm.decoder.bias",
        "pre_classifier.weight": "classifier.dense.weight",
        "pre_classifier.bias": "classifier.dense.bias",
        "classifier.weight": "classifier.out.weight",
        "classifier.bias": "classifier.out.bias",
    }
    if name in fixed:
        return fixed[name]
    m = re.match(r"transformer\.layer\.(\d+)\.(.+)\.(weight|bias)$", name)
    if not m:
        return None
    layer, part, kind = m.groups()
    parts = {"attention.q_lin": "attention.q", "attention.k_lin": "attention.k",
             "attention.v_lin": "attention.v", "attention.out_lin": "attention.o",
             "sa_layer_norm": "attention.norm", "ffn.lin1": "ffn.up", "ffn.lin2": "ffn.down",
             "output_layer_norm": "ffn.norm"}
    return f"layers.{layer}.{parts[part]}.{kind}" if part in parts else None


def _rename_modernbert(name: str, mlm: bool) -> str | None:
    head = "mlm" if mlm else "classifier"
    fixed = {
        "embeddings.tok_embeddings.weight": "embeddings.word",
        "embeddings.norm.weight": "embeddings.norm.weight",
        "embeddings.norm.bias": "embeddings.norm.bias",
        "final_norm.weight": "final_norm.weight",
        "final_norm.bias": "final_norm.bias",
        "head.dense.weight": f"{head}.{'transform' if mlm else 'dense'}.weight",
        "head.dense.bias": f"{head}.{'transform' if mlm else 'dense'}.bias",
        "head.norm.weight": f"{head}.norm.weight",
        "head.norm.bias": f"{head}.norm.bias",
        "decoder.weight": "mlm.decoder.weight",
        "decoder.bias": "mlm.decoder.bias",
        "classifier.weight": "classifier.out.weight",
        "classifier.bias": "classifier.out.bias",
    }
    if name in fixed:
        return fixed[name]
    m = re.match(r"layers\.(\d+)\.(.+)\.(weight|bias)$", name)
    if not m:
        return None
    layer, part, kind = m.groups()
    parts = {"attn_norm": "attention.norm", "attn.Wqkv": "attention.qkv", "attn.Wo": "attention.o",
             "mlp_norm": "ffn.norm", "mlp.Wi": "ffn.up", "mlp.Wo": "ffn.down"}
    return f"layers.{layer}.{parts[part]}.{kind}" if part in parts else None


def _expected_shapes(desc: ModelDescription) -> dict[str, tuple[int, ...]]:
    """Canonical name → shape of every tensor the encoder needs."""
    e = desc.encoder
    c, ff = e.hidden_size, e.intermediate_size
    up_rows = 2 * ff if e.ffn_kind is FfnKind.GLU else ff
    want: dict[str, tuple[int, ...]] = {"embeddings.word": (e.vocab_size, c),
                                        "embeddings.norm.weight": (c,)}
    if e.norm_bias:
        want["embeddings.norm.bias"] = (c,)
    if e.position_kind is PositionKind.ABSOLUTE:
        want["embeddings.position"] = (e.position_table_rows, c)
    if e.type_vocab_size:
        want["embeddings.token_type"] = (e.type_vocab_size, c)
    if e.relative_buckets:
        want["encoder.relative_bias"] = (e.relative_buckets, e.num_heads)
    for layer in range(e.num_layers):
        p = f"layers.{layer}."
        lin = {"attention.q": (c, c), "attention.k": (c, c), "attention.v": (c, c),
               "attention.o": (c, c), "ffn.up": (up_rows, c), "ffn.down": (c, ff)}
        for n, shape in lin.items():
            want[p + n + ".weight"] = shape
            if (e.attention_bias if n.startswith("attention") else e.ffn_bias):
                want[p + n + ".bias"] = (shape[0],)
        norms = ["ffn.norm"] if (e.norm_placement is NormPlacement.PRE and layer == 0) else [
            "attention.norm", "ffn.norm"]
        for n in norms:
            want[p + n + ".weight"] = (c,)
            if e.norm_bias:
                want[p + n + ".bias"] = (c,)
    if e.final_norm:
        want["final_norm.weight"] = (c,)
        if e.norm_bias:
            want["final_norm.bias"] = (c,)
    return want


def _optional_shapes(desc: ModelDescription) -> dict[str, tuple[int, ...]]:
    """Shapes of the head tensors a checkpoint may carry (checked when present)."""
    e = desc.encoder
    c = e.hidden_size
    n = desc.head.num_labels or 0
    shapes: dict[str, tuple[int, ...]] = {
        "pooler.dense.weight": (c, c), "pooler.dense.bias": (c,),
        "mlm.transform.weight": (c, c), "mlm.transform.bias": (c,),
        "mlm.norm.weight": (c,), "mlm.norm.bias": (c,),
        "mlm.decoder.weight": (e.vocab_size, c), "mlm.decoder.bias": (e.vocab_size,),
        "classifier.dense.weight": (c, c), "classifier.dense.bias": (c,),
        "classifier.norm.weight": (c,), "classifier.norm.bias": (c,),
    }
    if n:
        shapes |= {"classifier.out.weight": (n, c), "classifier.out.bias": (n,)}
    return shapes


def _head_shapes(desc: ModelDescription, present: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The head tensors a rerank or sparse model must have (biases where its family has them,
    or, for ModernBERT's optional ones, where the checkpoint carries them)."""
    e = desc.encoder
    c = e.hidden_size
    fam = e.family
    want: dict[str, tuple[int, ...]] = {}

    def add(name: str, shape: tuple[int, ...], bias: bool | None = True) -> None:
        want[name + ".weight"] = shape
        if bias or (bias is None and name + ".bias" in present):
            want[name + ".bias"] = (shape[0],)

    modern = fam is Family.MODERNBERT
    if desc.task is Task.RERANK:
        if fam is Family.BERT:
            add("pooler.dense", (c, c))
        else:
            add("classifier.dense", (c, c), None if modern else True)
        if modern:
            add("classifier.norm", (c,), e.norm_bias)
        add("classifier.out", (desc.head.num_labels, c))
    elif desc.task is Task.SPARSE:
        add("mlm.transform", (c, c), None if modern else True)
        add("mlm.norm", (c,), e.norm_bias if modern else True)
        add("mlm.decoder", (e.vocab_size, c), None if modern else True)
    return want


def load_weights(desc: ModelDescription) -> dict[str, F32]:
    """The model's weights as float32 arrays under the canonical names (docs/architectures.md).

    Checks that every tensor the encoder needs is present with the shape the configuration
    implies, that biases exist exactly where the configuration says, and refuses tensors it
    cannot place. Dense modules come as ``dense.{i}.weight`` / ``.bias`` / ``.residual``.
    """
    import numpy as np

    remedy = f"; it may be truncated: run `embed pull --force {desc.name}`"
    raw = read_safetensors(desc.weights_path, remedy=remedy)
    fam = desc.encoder.family
    mlm = desc.head.kind is HeadKind.MLM or any(a.endswith("ForMaskedLM")
                                                  for a in desc.architectures)
    where = desc.weights_path
    out: dict[str, F32] = {}
    head_bias: set[str] = set()  # mlm.decoder.bias taken from the head's bias, not the decoder's
    for ck_name, arr in raw.items():
        if _IGNORED.search(ck_name):
            continue
        bare = next((ck_name[len(p):] for p in _PREFIXES if ck_name.startswith(p)), ck_name)
        if fam is Family.DISTILBERT:
            canon = _rename_distilbert(bare)
        elif fam is Family.MODERNBERT:
            canon = _rename_modernbert(bare, mlm)
        else:
            canon = _rename_bert_like(bare, fam)
        if canon is None:
            raise UnsupportedArchitecture(
                f"{where}: tensor {ck_name!r} is not part of a {fam.value} encoder edgembed "
                "knows (is config.json's model_type right?)"
            )
        if arr.dtype.kind != "f":
            raise InvalidModelDir(f"{where}: tensor {ck_name!r} has dtype {arr.dtype}, not float")
        if canon in out:
            if canon == "mlm.decoder.bias" and not ck_name.endswith("decoder.bias"):
                continue  # the head's bias beside the decoder's own: see _HEAD_BIASES
            if canon != "mlm.decoder.bias" or canon not in head_bias:
                raise InvalidModelDir(
                    f"{where}: tensors {ck_name!r} and another both map to {canon}")
        elif canon == "mlm.decoder.bias" and not ck_name.endswith("decoder.bias"):
            head_bias.add(canon)
        out[canon] = np.ascontiguousarray(arr, dtype=np.float32)

    # ModernBERT fuses q, k and v into one (3C, C) matrix: split it.
    for layer in range(desc.encoder.num_layers):
        for kind in ("weight", "bias"):
            fused = out.pop(f"layers.{layer}.attention.qkv.{kind}", None)
            if fused is not None:
                c = desc.encoder.hidden_size
                if fused.shape[0] != 3 * c:
                    raise InvalidModelDir(
                        f"{where}: layer {layer}'s Wqkv.{kind} has shape {fused.shape}, "
                        f"config.json implies ({3 * c}, ...)")
                for i, part in enumerate("qkv"):
                    out[f"layers.{layer}.attention.{part}.{kind}"] = np.ascontiguousarray(
                        fused[i * c:(i + 1) * c])
    if "mlm.decoder.weight" not in out and mlm and "embeddings.word" in out:
        out["mlm.decoder.weight"] = out["embeddings.word"]  # tied to the word embeddings

    want = _expected_shapes(desc) | _head_shapes(desc, out)
    for canon, shape in want.items():
        if canon not in out:
            raise InvalidModelDir(
                f"{where} has no tensor for {canon} (shape {shape}); is this a "
                f"{fam.value} checkpoint matching its config.json?"
            )
    optional = _optional_shapes(desc)
    for canon, arr in out.items():
        expected = want.get(canon) or optional.get(canon)
        if expected is None:
            if canon.endswith(".bias") and canon[:-5] + ".weight" in want:
                raise InvalidModelDir(
                    f"{where} has a bias {canon} but config.json says this layer has none "
                    "(attention_bias / mlp_bias / norm_bias)")
            if canon.startswith("classifier.out."):
                continue  # a head's label count is checked by the task that uses it
            raise UnsupportedArchitecture(
                f"{where}: tensor {canon} does not fit a {fam.value} encoder of this config")
        if tuple(arr.shape) != expected:
            what = ("vocab_size" if canon == "embeddings.word" and arr.shape[1:] == expected[1:]
                    else "config.json")
            raise InvalidModelDir(
                f"{where}: tensor {canon} has shape {tuple(arr.shape)}, but {what} implies "
                f"{expected}"
            )

    for i, d in enumerate(desc.dense):
        dw = read_safetensors(d.weights_path, remedy=remedy)
        allowed: dict[str, tuple[int, ...]] = {"linear.weight": (d.out_features,
                                                                 d.in_features)}
        if d.bias:
            allowed["linear.bias"] = (d.out_features,)
        if d.residual and d.in_features != d.out_features:
            allowed["residual.weight"] = (d.out_features, d.in_features)
        for key, shape in allowed.items():
            if key not in dw:
                raise InvalidModelDir(f"{d.weights_path} has no tensor {key!r} (shape {shape})")
            if tuple(dw[key].shape) != shape:
                raise InvalidModelDir(
                    f"{d.weights_path}: tensor {key!r} has shape {tuple(dw[key].shape)}, but "
                    f"its config.json implies {shape}")
        extra = sorted(set(dw) - set(allowed))
        if extra:
            raise InvalidModelDir(f"{d.weights_path}: unexpected tensors {extra} "
                                  "(does its config.json say bias or use_residual?)")
        out[f"dense.{i}.weight"] = np.ascontiguousarray(dw["linear.weight"], dtype=np.float32)
        if d.bias:
            out[f"dense.{i}.bias"] = np.ascontiguousarray(dw["linear.bias"], dtype=np.float32)
        if "residual.weight" in dw:
            out[f"dense.{i}.residual"] = np.ascontiguousarray(dw["residual.weight"],
                                                              dtype=np.float32)
    return out


# --- MPNet's relative position buckets ---------------------------------------------------------


def relative_position_bucket(
    relative_position: npt.NDArray[np.int64],
    num_buckets: int = MPNET_BUCKETS,
    max_distance: int = MPNET_MAX_DISTANCE,
) -> npt.NDArray[np.int64]:
    """transformers' ``MPNetEncoder.relative_position_bucket`` in numpy, same float32 steps.

    ``relative_position`` = key position - query position. Exact to transformers: the float32
    logarithm is the only inexact step, and its result is truncated, so the table is checked
    against torch's (tests/fixtures/models/README.md).
    """
    import numpy as np

    n = -np.asarray(relative_position, dtype=np.int64)
    half = num_buckets // 2
    ret = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    max_exact = half // 2
    is_small = n < max_exact
    with np.errstate(divide="ignore"):
        scaled = (np.log(n.astype(np.float32) / np.float32(max_exact))
                  / np.float32(math.log(max_distance / max_exact))
                  * np.float32(half - max_exact))
    val_if_large = max_exact + np.where(is_small, 0, scaled).astype(np.int64)
    val_if_large = np.minimum(val_if_large, half - 1)
    return ret + np.where(is_small, n, val_if_large)
