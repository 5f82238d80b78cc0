"""Request and response bodies: the OpenAI embeddings API and the Hugging Face TEI ``/embed``.

Requests validate strictly (``"true"`` is not a boolean, ``1.5`` is not a dimension count) so
that what the OpenAPI document promises is exactly what the server accepts. The server's
limits (inputs per request, characters per input, dimensions) are written into the OpenAPI
document by the app, from its settings; here the models stay independent of them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, RootModel

__all__ = [
    "EmbedRequest",
    "EmbedResponse",
    "EmbeddingObject",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "Health",
    "ModelList",
    "ModelObject",
    "OpenAIError",
    "OpenAIErrorResponse",
    "Readiness",
    "TEIErrorResponse",
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


class EmbedRequest(BaseModel):
    """``POST /embed``, as Hugging Face TEI and ``InferenceClient.feature_extraction`` send it."""

    model_config = _STRICT

    inputs: str | list[str] = Field(description="A text, or a list of texts, to embed.")
    normalize: bool = Field(default=True, description="L2-normalize each vector.")
    truncate: bool | None = Field(
        default=None,
        description="Cut texts longer than the model's max length; `false` answers 413 instead. "
                    "Default: the server's setting (on unless started with --no-truncate).",
    )
    truncation_direction: Literal["right", "Right"] = Field(
        default="right", description="Only right truncation (keep the start) is supported.",
    )
    prompt_name: str | None = Field(
        default=None,
        description="A named prompt of the model (`query`, `document`) whose prefix is "
                    "prepended to every text.",
    )
    dimensions: Dimensions = Field(
        default=None, ge=1,
        description="Keep only the first `dimensions` values (Matryoshka), then renormalize if "
                    "`normalize`.",
    )


class EmbedResponse(RootModel[list[list[float]]]):
    """One vector per input, in input order (a single string input gives a list of one)."""


class TEIErrorResponse(BaseModel):
    error: str
    error_type: str = Field(
        description="validation, overloaded, unhealthy, backend or unauthorized.",
    )


# ----------------------------------------- probes ----------------------------------------------


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready", "starting", "draining", "degraded"]
    model: str
    problems: list[str] | None = Field(
        default=None, description="With `degraded`: what is not working (the batch worker).",
    )
