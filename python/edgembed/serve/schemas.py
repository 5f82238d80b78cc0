"""Request and response bodies: the OpenAI embeddings API and the Hugging Face TEI ``/embed``.

Requests validate strictly (``"true"`` is not a boolean, ``1.5`` is not a dimension count) so
that what the OpenAPI document promises is exactly what the server accepts. The server's
limits (inputs per request, characters per input, dimensions) are written into the OpenAPI
document by the app, from its settings; here the models stay independent of them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    Tag,
)

__all__ = [
    "DecodeRequest",
    "DecodeResponse",
    "EmbedAllRequest",
    "EmbedAllResponse",
    "EmbedRequest",
    "EmbedResponse",
    "EmbeddingObject",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "Health",
    "Info",
    "ModelList",
    "ModelObject",
    "OpenAIError",
    "OpenAIErrorResponse",
    "Readiness",
    "RootRequest",
    "SimilarityInput",
    "SimilarityParameters",
    "SimilarityRequest",
    "SimilarityResponse",
    "SimpleToken",
    "TEIErrorResponse",
    "TokenizeRequest",
    "TokenizeResponse",
    "Usage",
]

_STRICT = ConfigDict(strict=True)


def _integral(value: Any) -> Any:
    # JSON has one number type: 256.0 is the integer 256 (as JSON Schema says), 256.5 is not.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Dimensions = Annotated[int | None, BeforeValidator(_integral)]


# ----------------------------------------- OpenAI ----------------------------------------------


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings``, as OpenAI's ``client.embeddings.create`` sends it."""

    model_config = _STRICT

    input: str | list[str] = Field(
        description="A text, or a list of texts, to embed. Token arrays are not accepted.",
    )
    model: str | None = Field(
        default=None,
        description="The served model's name (GET /v1/models); omit it to use the served model.",
    )
    encoding_format: Literal["float", "base64"] = Field(
        default="float",
        description="`float`: JSON numbers; `base64`: little-endian float32 bytes, base64.",
    )
    dimensions: Dimensions = Field(
        default=None, ge=1,
        description="Keep only the first `dimensions` values (Matryoshka), then renormalize.",
    )
    user: str | None = Field(default=None, description="Accepted and ignored.")


class EmbeddingObject(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int = Field(description="Position of the text in `input`.")
    embedding: list[float] | str = Field(
        description="The vector: a list of floats, or a base64 string for `base64`.",
    )


class Usage(BaseModel):
    prompt_tokens: int = Field(description="Tokens the model read, after truncation.")
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingObject]
    model: str
    usage: Usage


class ModelObject(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(description="Unix time the server started.")
    owned_by: str = "edgembed"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelObject]


class OpenAIError(BaseModel):
    message: str = Field(description="What went wrong and, for limits, the limit's value.")
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorResponse(BaseModel):
    error: OpenAIError


# ------------------------------------------ TEI ------------------------------------------------


Direction = Literal["right", "Right", "left", "Left"]

_TRUNCATE = Field(
    default=None,
    description="Cut texts longer than the model's max length; `false` answers 413 instead. "
                "Default: the server's setting (on unless started with --no-truncate).",
)
_DIRECTION: Any = Field(
    default="right",
    description="Which end of a long text truncation keeps: `right` keeps the start, `left` "
                "the end (the model's special tokens stay either way).",
)
_PROMPT = Field(
    default=None,
    description="A prompt of the model (see /info, GET /openapi.json) put before every text; "
                "none given: the model's default prompt, if it has one.",
)


class EmbedRequest(BaseModel):
    """``POST /embed``, as Hugging Face TEI and ``InferenceClient.feature_extraction`` send it."""

    model_config = _STRICT

    inputs: str | list[str] = Field(description="A text, or a list of texts, to embed.")
    normalize: bool = Field(default=True, description="L2-normalize each vector.")
    truncate: bool | None = _TRUNCATE
    truncation_direction: Direction = _DIRECTION
    prompt_name: str | None = _PROMPT
    dimensions: Dimensions = Field(
        default=None, ge=1,
        description="Keep only the first `dimensions` values (Matryoshka), then renormalize if "
                    "`normalize`.",
    )


class EmbedResponse(RootModel[list[list[float]]]):
    """One vector per input, in input order (a single string input gives a list of one)."""


class EmbedAllRequest(BaseModel):
    """``POST /embed_all``: every token's vector (the encoder's last hidden states)."""

    model_config = _STRICT

    inputs: str | list[str] = Field(description="A text, or a list of texts.")
    truncate: bool | None = _TRUNCATE
    truncation_direction: Direction = _DIRECTION
    prompt_name: str | None = _PROMPT


class EmbedAllResponse(RootModel[list[list[list[float]]]]):
    """Per input, one vector per token, special tokens included (not pooled, not normalized)."""


class SimilarityInput(BaseModel):
    model_config = _STRICT

    source_sentence: str = Field(description="The text the others are compared with.")
    sentences: list[str] = Field(description="The texts compared with `source_sentence`.")


class SimilarityParameters(BaseModel):
    model_config = _STRICT

    truncate: bool | None = _TRUNCATE
    truncation_direction: Direction = _DIRECTION
    prompt_name: str | None = _PROMPT


class SimilarityRequest(BaseModel):
    """``POST /similarity``, as ``InferenceClient.sentence_similarity`` sends it."""

    model_config = _STRICT

    inputs: SimilarityInput
    parameters: SimilarityParameters | None = None


class SimilarityResponse(RootModel[list[float]]):
    """The cosine similarity of `source_sentence` to each of `sentences`, in their order."""


def _root_kind(value: Any) -> str:
    inputs = value.get("inputs") if isinstance(value, dict) else getattr(value, "inputs", None)
    return "similarity" if isinstance(inputs, (dict, SimilarityInput)) else "embed"


RootRequest = Annotated[
    Annotated[EmbedRequest, Tag("embed")] | Annotated[SimilarityRequest, Tag("similarity")],
    Discriminator(_root_kind),
]


class TokenizeRequest(BaseModel):
    """``POST /tokenize``."""

    model_config = _STRICT

    inputs: str | list[str] = Field(description="A text, or a list of texts, to tokenize.")
    add_special_tokens: bool = Field(
        default=True, description="Include the model's special tokens (`[CLS]`, `[SEP]`).")
    prompt_name: str | None = _PROMPT


class SimpleToken(BaseModel):
    id: int
    text: str = Field(description="The input text the token covers; a special token's own "
                                  "string.")
    special: bool
    start: int | None = Field(description="Byte offset (UTF-8) of the token's first byte in "
                                          "the prompt + text; null for special tokens.")
    stop: int | None = Field(description="Byte offset just past its last byte.")


class TokenizeResponse(RootModel[list[list[SimpleToken]]]):
    """Per input, its tokens, not truncated."""


TokenId = Annotated[int, Field(ge=0), BeforeValidator(_integral)]


class DecodeRequest(BaseModel):
    """``POST /decode``."""

    model_config = _STRICT

    ids: list[TokenId] | list[list[TokenId]] = Field(
        description="Token ids, or a list of token-id lists.")
    skip_special_tokens: bool = Field(default=True,
                                      description="Leave out `[CLS]`, `[SEP]` and the like.")


class DecodeResponse(RootModel[list[str]]):
    """One text per id list."""


class TEIErrorResponse(BaseModel):
    error: str
    error_type: str = Field(
        description="validation, overloaded, unhealthy, backend or unauthorized.",
    )


# ----------------------------------------- probes ----------------------------------------------


class EmbeddingModelType(BaseModel):
    pooling: str = Field(description="The model's pooling: mean, cls, max, last_token, ...")


class ModelType(BaseModel):
    embedding: EmbeddingModelType


class Info(BaseModel):
    """``GET /info``, in TEI's shape."""

    model_id: str
    model_sha: str | None = Field(description="The hub commit the model was pulled from.")
    model_dtype: str = Field(description="The weights that run: int8, float32, float16, int4.")
    served_model_name: str
    model_type: ModelType
    max_concurrent_requests: int = Field(description="Requests that may wait (--max-queue).")
    max_input_length: int = Field(description="The model's max length in tokens.")
    max_batch_tokens: int
    max_batch_requests: int | None = None
    max_client_batch_size: int = Field(description="Texts per request (--max-inputs).")
    auto_truncate: bool = Field(description="Whether long texts are cut by default.")
    tokenization_workers: int
    version: str
    sha: str | None = None
    docker_label: str | None = None


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready", "starting", "draining", "degraded"]
    model: str
    problems: list[str] | None = Field(
        default=None, description="With `degraded`: what is not working (the batch worker).",
    )
