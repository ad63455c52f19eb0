"""The API styles a target can speak, and what the rest of the exporter knows of each: one row.

Config validates probes against a row's features, the protocols take their path and framing from
it, the prober reads rate limits and request ids from the headers it names, hints and docs quote
its words, and the simulator serves its path. Adding an API style is a row here, a protocol in
`exporter.protocols` and a dialect in `exporter.simulator.dialects` (both keyed by `Api`, and
checked complete against this table when they are imported).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class Api(StrEnum):
    """API styles a target can speak (`targets[].api`)."""

    OPENAI_CHAT = "openai-chat"
    OPENAI_COMPLETIONS = "openai-completions"
    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC_MESSAGES = "anthropic-messages"
    GEMINI = "gemini"
    BEDROCK_CONVERSE = "bedrock-converse"
    OLLAMA_CHAT = "ollama-chat"

    @property
    def spec(self) -> ApiSpec:
        """This API style's row."""
        return APIS[self]

    @property
    def features(self) -> frozenset[Feature]:
        """What probes of this API style may ask for."""
        return APIS[self].features


class Feature(StrEnum):
    """What a probe may need from an API style."""

    IMAGE = "image"
    TOOLS = "tools"
    RESPONSE_FORMAT = "response_format"
    EMBEDDING = "kind: embedding"
    REASONING = "reasoning"


class Framing(StrEnum):
    """How a response stream is framed into events."""

    SSE = "sse"                  # text/event-stream
    NDJSON = "ndjson"            # one JSON object per line (Ollama)
    EVENTSTREAM = "eventstream"  # AWS binary event stream (Bedrock)

    @property
    def words(self) -> str:
        """The framing in words, for "expected …, got <content type>"."""
        return {Framing.SSE: "an event stream", Framing.NDJSON: "an NDJSON stream",
                Framing.EVENTSTREAM: "an AWS event stream"}[self]


class RateLimit(StrEnum):
    """What a remaining-quota header counts (`llm_probe_ratelimit_remaining_*`)."""

    REQUESTS = "requests"
    TOKENS = "tokens"


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One API style: what it needs and how it answers."""

    api: Api
    path: str                 # appended to base_url ({model}: the model, one path segment)
    framing: Framing
    features: frozenset[Feature]
    auth: str                 # how the API key travels, in words (docs, hints)
    embeddings_path: str | None = None  # `kind: embedding` (Feature.EMBEDDING)
    ratelimit_headers: Mapping[str, RateLimit] = field(default_factory=dict)
    request_id_headers: tuple[str, ...] = ()


_OPENAI_RATELIMITS = MappingProxyType({
    "x-ratelimit-remaining-requests": RateLimit.REQUESTS,
    "x-ratelimit-remaining-tokens": RateLimit.TOKENS,
})
_ALL = frozenset(Feature)

APIS: Mapping[Api, ApiSpec] = MappingProxyType({spec.api: spec for spec in (
    ApiSpec(Api.OPENAI_CHAT, "/chat/completions", Framing.SSE, _ALL,
            "Authorization: Bearer", "/embeddings", _OPENAI_RATELIMITS, ("x-request-id",)),
    # Legacy completions: no reasoning control either.
    ApiSpec(Api.OPENAI_COMPLETIONS, "/completions", Framing.SSE, frozenset({Feature.EMBEDDING}),
            "Authorization: Bearer", "/embeddings", _OPENAI_RATELIMITS, ("x-request-id",)),
    ApiSpec(Api.OPENAI_RESPONSES, "/responses", Framing.SSE, _ALL,
            "Authorization: Bearer", "/embeddings", _OPENAI_RATELIMITS, ("x-request-id",)),
    ApiSpec(Api.ANTHROPIC_MESSAGES, "/messages", Framing.SSE, _ALL - {Feature.EMBEDDING},
            "x-api-key", None, MappingProxyType({
                "anthropic-ratelimit-requests-remaining": RateLimit.REQUESTS,
                "anthropic-ratelimit-tokens-remaining": RateLimit.TOKENS}), ("request-id",)),
    ApiSpec(Api.GEMINI, "/models/{model}:streamGenerateContent?alt=sse", Framing.SSE, _ALL,
            "x-goog-api-key (Vertex AI: Authorization: Bearer)", "/models/{model}:embedContent"),
    ApiSpec(Api.BEDROCK_CONVERSE, "/model/{model}/converse-stream", Framing.EVENTSTREAM,
            _ALL - {Feature.EMBEDDING}, "AWS SigV4 (aws_sigv4), or a Bedrock API key as Bearer",
            request_id_headers=("x-amzn-requestid",)),
    ApiSpec(Api.OLLAMA_CHAT, "/api/chat", Framing.NDJSON,
            frozenset({Feature.IMAGE, Feature.TOOLS, Feature.RESPONSE_FORMAT,
                       Feature.REASONING}),
            "Authorization: Bearer (optional)"),
)})

# A gateway answers in the headers of whatever sits behind it, so every API's are read.
RATELIMIT_HEADERS: Mapping[str, RateLimit] = MappingProxyType(
    {header: kind for spec in APIS.values() for header, kind in spec.ratelimit_headers.items()})
REQUEST_ID_HEADERS: tuple[str, ...] = tuple(dict.fromkeys(
    header for spec in APIS.values() for header in spec.request_id_headers))
