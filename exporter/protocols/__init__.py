"""API styles: each turns a probe into an HTTP request and its event stream into token events.

One module per style; `protocol_for(api)` picks it (`embedding_protocol_for(api)` for
`kind: embedding`). What they share (prompts, framings, token kinds, the parser base) lives in
`.base`.
"""

from __future__ import annotations

from exporter.apis import APIS, Api, Feature, Framing
from exporter.protocols.anthropic_messages import AnthropicMessages
from exporter.protocols.base import (
    ANSWER,
    LIMIT_REASONS,
    MAX_CHOICES,
    MAX_EVENT_VALUES,
    OUTPUT,
    REASONING,
    TOOL_CALL,
    ApiProtocol,
    Decoder,
    Embedding,
    EmbeddingProtocol,
    HttpRequest,
    Prompt,
    RequestSigner,
    SignerFactory,
    StreamParser,
    embedding_input,
    load_event,
    make_prompt,
    new_decoder,
    quote_event,
)
from exporter.protocols.bedrock_converse import BedrockConverse
from exporter.protocols.embeddings import GeminiEmbeddings, OpenAIEmbeddings
from exporter.protocols.gemini import Gemini
from exporter.protocols.ollama_chat import OllamaChat
from exporter.protocols.openai_chat import OpenAIChat
from exporter.protocols.openai_completions import OpenAICompletions
from exporter.protocols.openai_responses import OpenAIResponses

_PROTOCOLS: dict[Api, type[ApiProtocol]] = {
    Api.OPENAI_CHAT: OpenAIChat,
    Api.OPENAI_COMPLETIONS: OpenAICompletions,
    Api.OPENAI_RESPONSES: OpenAIResponses,
    Api.ANTHROPIC_MESSAGES: AnthropicMessages,
    Api.GEMINI: Gemini,
    Api.BEDROCK_CONVERSE: BedrockConverse,
    Api.OLLAMA_CHAT: OllamaChat,
}
# OpenAI-compatible servers answer `/embeddings` whichever generation API a target names.
_EMBEDDINGS: dict[Api, type[EmbeddingProtocol]] = {
    Api.OPENAI_CHAT: OpenAIEmbeddings,
    Api.OPENAI_COMPLETIONS: OpenAIEmbeddings,
    Api.OPENAI_RESPONSES: OpenAIEmbeddings,
    Api.GEMINI: GeminiEmbeddings,
}

# Every API style has a protocol, and every one with embeddings an embeddings protocol.
assert set(_PROTOCOLS) == set(Api), set(Api) - set(_PROTOCOLS)
assert set(_EMBEDDINGS) == {a for a, s in APIS.items() if Feature.EMBEDDING in s.features}
assert all(cls.api is api for api, cls in _PROTOCOLS.items())


def protocol_for(api: Api) -> ApiProtocol:
    """The protocol implementation for an API style."""
    return _PROTOCOLS[api]()


def embedding_protocol_for(api: Api) -> EmbeddingProtocol:
    """The embeddings protocol of an API style (config validation allows only these)."""
    return _EMBEDDINGS[api]()


__all__ = [
    "ANSWER",
    "LIMIT_REASONS",
    "MAX_CHOICES",
    "MAX_EVENT_VALUES",
    "OUTPUT",
    "REASONING",
    "TOOL_CALL",
    "ApiProtocol",
    "Decoder",
    "Embedding",
    "EmbeddingProtocol",
    "Framing",
    "HttpRequest",
    "Prompt",
    "RequestSigner",
    "SignerFactory",
    "StreamParser",
    "embedding_input",
    "embedding_protocol_for",
    "load_event",
    "make_prompt",
    "new_decoder",
    "protocol_for",
    "quote_event",
]
