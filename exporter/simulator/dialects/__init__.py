"""Every API style the simulator speaks, one module each, mirroring the client's `protocols`.

`ROUTES` maps each endpoint to the dialect that answers it. The stream framing (SSE, NDJSON, AWS
event stream) lives in `..framing`; what the dialects share lives in `.base`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...apis import APIS, Api
from .anthropic_messages import MessagesDialect
from .base import (
    AuthRequest,
    AwsKeys,
    BadRequest,
    Credentials,
    Dialect,
    EmbeddingDialect,
    EmbedRequest,
    ParsedRequest,
    RateLimitSnapshot,
    Refusal,
    ServerTimings,
    StreamContext,
    StreamEncoder,
    Usage,
)
from .bedrock_converse import ConverseDialect, sigv4_supported
from .embeddings import EmbedContentDialect, EmbeddingsDialect, embed
from .gemini import GenerateContentDialect
from .ollama_chat import OllamaChatDialect
from .openai_chat import ChatDialect
from .openai_completions import CompletionsDialect
from .openai_responses import ResponsesDialect


@dataclass(frozen=True)
class Route:
    """One POST endpoint and the dialect that answers it."""

    path: str
    dialect: Dialect | EmbeddingDialect


CHAT = ChatDialect()
MESSAGES = MessagesDialect()
GEMINI_STREAM = GenerateContentDialect(stream=True)

# Gemini Developer API (`/v1beta/models/…`) and Vertex AI (`/v1/projects/…/publishers/google/
# models/…`, or `/v1/publishers/google/models/…` with an express-mode API key).
_GEMINI_BASES = (
    "/{version:v1|v1beta}/models/{model}",
    "/{version:v1|v1beta1}/projects/{project}/locations/{location}/publishers/google/models/"
    "{model}",
    "/{version:v1|v1beta1}/publishers/google/models/{model}",
)
_GEMINI_METHODS: tuple[tuple[str, Dialect | EmbeddingDialect], ...] = (
    (":streamGenerateContent", GEMINI_STREAM),
    (":generateContent", GenerateContentDialect(stream=False)),
    (":embedContent", EmbedContentDialect(batch=False)),
    (":batchEmbedContents", EmbedContentDialect(batch=True)),
)

# The dialect answering each API style's streaming path (`exporter.apis`), under the base the
# SDKs default to (`/v1` for the OpenAI and Anthropic styles, none for Bedrock and Ollama).
DIALECTS: dict[Api, Dialect] = {
    Api.OPENAI_CHAT: CHAT,
    Api.OPENAI_COMPLETIONS: CompletionsDialect(),
    Api.OPENAI_RESPONSES: ResponsesDialect(),
    Api.ANTHROPIC_MESSAGES: MESSAGES,
    Api.GEMINI: GEMINI_STREAM,
    Api.BEDROCK_CONVERSE: ConverseDialect(stream=True),
    Api.OLLAMA_CHAT: OllamaChatDialect(),
}
assert set(DIALECTS) == set(Api), set(Api) - set(DIALECTS)
_V1 = (Api.OPENAI_CHAT, Api.OPENAI_COMPLETIONS, Api.OPENAI_RESPONSES, Api.ANTHROPIC_MESSAGES)

ROUTES: tuple[Route, ...] = (
    *(Route("/v1" + APIS[api].path, DIALECTS[api]) for api in _V1),
    Route("/v1" + str(APIS[Api.OPENAI_CHAT].embeddings_path), EmbeddingsDialect()),
    *(Route(base + method, dialect) for base in _GEMINI_BASES
      for method, dialect in _GEMINI_METHODS),
    Route(APIS[Api.BEDROCK_CONVERSE].path, DIALECTS[Api.BEDROCK_CONVERSE]),
    Route("/model/{model}/converse", ConverseDialect(stream=False)),
    Route(APIS[Api.OLLAMA_CHAT].path, DIALECTS[Api.OLLAMA_CHAT]),
)

__all__ = [
    "CHAT",
    "DIALECTS",
    "MESSAGES",
    "ROUTES",
    "AuthRequest",
    "AwsKeys",
    "BadRequest",
    "Credentials",
    "Dialect",
    "EmbedRequest",
    "EmbeddingDialect",
    "ParsedRequest",
    "RateLimitSnapshot",
    "Refusal",
    "Route",
    "ServerTimings",
    "StreamContext",
    "StreamEncoder",
    "Usage",
    "embed",
    "sigv4_supported",
]
