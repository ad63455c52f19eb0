"""Embeddings (`kind: embedding`): one plain JSON request and response, no stream.

OpenAI-compatible (`POST {base_url}/embeddings`, for openai-chat, openai-completions and
openai-responses targets): `{model, input, encoding_format: "float"}` → `data[0].embedding` and
`usage.prompt_tokens`. Gemini (`POST {base_url}/models/{model}:embedContent`):
`{content: {parts: [{text}]}}` → `embedding.values`; it reports no usage, so the prober
estimates the input tokens. An `error` object in a 200 body is `upstream`; anything that is not
an embedding is `stream`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from exporter.apis import Api
from exporter.config import Secret, Series
from exporter.config.reasoning import merge_patch
from exporter.errors import StreamError, UpstreamError
from exporter.protocols.base import (
    Embedding,
    EmbeddingProtocol,
    HttpRequest,
    as_object,
    bearer,
    count,
    error_message,
    json_headers,
)
from exporter.protocols.gemini import gemini_auth, model_path


def _load(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise StreamError("the embedding response is not JSON") from None
    if not isinstance(data, dict):
        raise StreamError("the embedding response is not a JSON object")
    if data.get("error"):
        raise UpstreamError(error_message(data["error"]))
    return data


def dimensions(vector: Any) -> int:
    """The size of a vector: a list of numbers, or base64 little-endian float32s."""
    if isinstance(vector, str):
        try:
            size = len(base64.b64decode(vector, validate=True))
        except (binascii.Error, ValueError):
            raise StreamError("the embedding is neither numbers nor base64") from None
        if size % 4:
            raise StreamError("a base64 embedding is not a whole number of float32s")
        return size // 4
    if not isinstance(vector, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in vector):
        raise StreamError("the embedding is not a list of numbers")
    return len(vector)


class OpenAIEmbeddings(EmbeddingProtocol):
    """`POST {base_url}/embeddings`."""

    api = Api.OPENAI_CHAT  # any OpenAI style: the same /embeddings

    def build_request(self, series: Series, text: str, api_key: Secret | None) -> HttpRequest:
        """One input, floats asked for."""
        body = {"model": series.model, "input": text, "encoding_format": "float"}
        return HttpRequest(self.url(series),
                           json_headers(series, "application/json", bearer(api_key)),
                           orjson.dumps(merge_patch(body, series.params)))

    def parse(self, body: bytes) -> Embedding:
        """`data[0].embedding` and `usage.prompt_tokens`."""
        data = _load(body)
        items = data.get("data")
        if not isinstance(items, list) or not items:
            raise StreamError("the embedding response has no `data`")
        vector = as_object(items[0]).get("embedding")
        return Embedding(dimensions(vector),
                         count(as_object(data.get("usage")).get("prompt_tokens")))


class GeminiEmbeddings(EmbeddingProtocol):
    """`POST {base_url}/models/{model}:embedContent`."""

    api = Api.GEMINI

    def path(self, series: Series) -> str:
        """The model is part of the path."""
        return self.default_path.replace("{model}", model_path(series.model))

    def build_request(self, series: Series, text: str, api_key: Secret | None) -> HttpRequest:
        """One text part."""
        body = {"content": {"parts": [{"text": text}]}}
        return HttpRequest(self.url(series), json_headers(
            series, "application/json", gemini_auth(series, api_key)),
            orjson.dumps(merge_patch(body, series.params)))

    def parse(self, body: bytes) -> Embedding:
        """`embedding.values` (Gemini reports no tokens)."""
        data = _load(body)
        vector = as_object(data.get("embedding")).get("values")
        if vector is None:
            raise StreamError("the embedding response has no `embedding.values`")
        return Embedding(dimensions(vector))
