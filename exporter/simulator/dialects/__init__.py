"""Every API style the simulator speaks, one module each, mirroring the client's `protocols`.

`ROUTES` maps each endpoint to the dialect that answers it. The stream framing (SSE, NDJSON, AWS
event stream) lives in `..framing`; what the dialects share lives in `.base`.
"""

from __future__ import annotations

from dataclasses import dataclass

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

# Gemini Developer API (`/v1beta/models/…`) and Vertex AI (`/v1/projects/…/publishers/google/
# models/…`, or `/v1/publishers/google/models/…` with an express-mode API key).
_GEMINI_BASES = (
    "/{version:v1|v1beta}/models/{model}",
    "/{version:v1|v1beta1}/projects/{project}/locations/{location}/publishers/google/models/"
    "{model}",
    "/{version:v1|v1beta1}/publishers/google/models/{model}",
)
_GEMINI_METHODS: tuple[tuple[str, Dialect | EmbeddingDialect], ...] = (
    (":streamGenerateContent", GenerateContentDialect(stream=True)),
    (":generateContent", GenerateContentDialect(stream=False)),
    (":embedContent", EmbedContentDialect(batch=False)),
    (":batchEmbedContents", EmbedContentDialect(batch=True)),
)

ROUTES: tuple[Route, ...] = (
    Route("/v1/chat/completions", CHAT),
    Route("/v1/completions", CompletionsDialect()),
    Route("/v1/messages", MESSAGES),
    Route("/v1/responses", ResponsesDialect()),
    Route("/v1/embeddings", EmbeddingsDialect()),
    *(Route(base + method, dialect) for base in _GEMINI_BASES
      for method, dialect in _GEMINI_METHODS),
    Route("/model/{model}/converse-stream", ConverseDialect(stream=True)),
    Route("/model/{model}/converse", ConverseDialect(stream=False)),
    Route("/api/chat", OllamaChatDialect()),
)

__all__ = [
    "CHAT",
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
