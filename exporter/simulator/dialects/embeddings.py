"""Embeddings: OpenAI `POST /v1/embeddings` and Gemini `:embedContent` / `:batchEmbedContents`.

OpenAI: `input` is a string, a list of strings or token arrays; `dimensions` shortens the
vector; `encoding_format: base64` (what the openai library asks for by default) answers each
vector as little-endian float32 bytes in base64. Gemini: `content.parts[].text` and
`outputDimensionality` per request (google-genai sends `batchEmbedContents` with one request per
input); the answer is `{"embedding": {"values"}}` or `{"embeddings": [{"values"}]}`. Vectors are
unit length and depend only on the text, as a real model's do.
"""

from __future__ import annotations

import array
import base64
import hashlib
import math
import random
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..text import estimate_tokens
from .base import BadRequest, EmbeddingDialect, EmbedRequest, int_param, model_param, require_object
from .gemini import GeminiProvider, parts_tokens, proto_get
from .openai_chat import OpenAIProvider


def embed(text: str, dimensions: int) -> list[float]:
    """A unit vector of `dimensions` floats that depends only on `text` (and the size).

    Seeded bytes as int8 components, normalised: ~0.3 ms for 1536 dimensions, cheap enough for
    the event loop that also times token writes (Gaussian draws took ~2 ms).
    """
    seed = hashlib.sha256(f"{dimensions}:{text}".encode()).digest()
    values = array.array("b", random.Random(seed).randbytes(dimensions))
    norm = math.hypot(*values) or 1.0
    return [v / norm for v in values]


def _float32_base64(vector: Sequence[float]) -> str:
    packed = array.array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode()


_BAD_INPUT = ("'input' : input must be a non-empty string, an array of strings or an array of "
              "token arrays")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class EmbeddingsDialect(OpenAIProvider, EmbeddingDialect):
    """`POST /v1/embeddings`."""

    name = "openai-embeddings"

    def parse(self, body: Any, path_model: str | None) -> EmbedRequest:
        """Read model, input, dimensions and encoding_format."""
        body = require_object(body)
        model = model_param(body)
        raw = body.get("input")
        if isinstance(raw, str) or (isinstance(raw, list) and raw and all(map(_is_int, raw))):
            raw = [raw]  # one string, or one token array
        if not isinstance(raw, list) or not raw:
            raise BadRequest(_BAD_INPUT, "input")
        inputs: list[str] = []
        tokens = 0
        for item in raw:
            if isinstance(item, str) and item:
                inputs.append(item)
                tokens += estimate_tokens(item)
            elif isinstance(item, list) and item and all(map(_is_int, item)):
                inputs.append(" ".join(map(str, item)))
                tokens += len(item)
            else:
                raise BadRequest(_BAD_INPUT, "input")
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64", None):
            raise BadRequest("Invalid 'encoding_format': expected float or base64.",
                             "encoding_format")
        return EmbedRequest(model, tuple(inputs), int_param(body, "dimensions"), tokens,
                            base64=fmt == "base64")

    def body(self, request: EmbedRequest, vectors: Sequence[Sequence[float]]) -> dict[str, Any]:
        """A `list` of `embedding` objects, with usage."""
        data = [{"object": "embedding", "index": i,
                 "embedding": _float32_base64(v) if request.base64 else list(v)}
                for i, v in enumerate(vectors)]
        return {"object": "list", "data": data, "model": request.model,
                "usage": {"prompt_tokens": request.prompt_tokens,
                          "total_tokens": request.prompt_tokens}}


def _dimensions(obj: Mapping[str, Any], where: str) -> int | None:
    value = proto_get(obj, "outputDimensionality")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"Invalid '{where}outputDimensionality'.", "outputDimensionality")
    return value


def _content_text(content: Any, where: str) -> str:
    content = require_object(content, where)
    texts = [p["text"] for p in content.get("parts") or () if isinstance(p, Mapping)
             and isinstance(p.get("text"), str)]
    if not texts:
        raise BadRequest(f"* {where}: content must have text parts", where)
    return " ".join(texts)


class EmbedContentDialect(GeminiProvider, EmbeddingDialect):
    """`POST …/models/{model}:embedContent` and `…:batchEmbedContents`."""

    name = "gemini-embeddings"

    def __init__(self, *, batch: bool) -> None:
        self.batch = batch

    def parse(self, body: Any, path_model: str | None) -> EmbedRequest:
        """Read `content` (or `requests[].content`) and `outputDimensionality`."""
        body = require_object(body)
        if not self.batch:
            text = _content_text(body.get("content"), "content")
            return EmbedRequest(path_model or "", (text,), _dimensions(body, ""),
                                parts_tokens(body["content"]))
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            raise BadRequest("* BatchEmbedContentsRequest.requests: requests is empty",
                             "requests")
        texts, tokens, dimensions = [], 0, None
        for index, item in enumerate(requests):
            item = require_object(item, f"requests[{index}]")
            texts.append(_content_text(item.get("content"), f"requests[{index}].content"))
            tokens += parts_tokens(item["content"])
            dimensions = _dimensions(item, f"requests[{index}].") or dimensions
        return EmbedRequest(path_model or "", tuple(texts), dimensions, tokens)

    def body(self, request: EmbedRequest, vectors: Sequence[Sequence[float]]) -> dict[str, Any]:
        """`{"embedding": {"values"}}`, or `{"embeddings": [...]}` for a batch."""
        if not self.batch:
            return {"embedding": {"values": list(vectors[0])}}
        return {"embeddings": [{"values": list(v)} for v in vectors]}
