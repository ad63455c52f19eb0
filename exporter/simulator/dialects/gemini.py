"""Gemini `generateContent` / `streamGenerateContent?alt=sse` (Developer API and Vertex AI paths).

Each SSE event (`data: …` with CRLF line ends, as Google writes them) is a whole
`GenerateContentResponse`: `candidates[0].content.parts` holds the chunk's text, a `thought: true`
part for reasoning (only when `thinkingConfig.includeThoughts` is set; otherwise thinking is
hidden and only counted), or one whole `functionCall` part (Gemini does not stream arguments).
Every chunk carries `usageMetadata` with running counts (`promptTokenCount`,
`candidatesTokenCount` without thoughts, `thoughtsTokenCount`, `totalTokenCount`); the last one
carries `finishReason` (`STOP`, `MAX_TOKENS`). Shapes as google-genai's `types.py` reads them and
as real streams look (e.g. simonw/llm-gemini#97). Auth: `x-goog-api-key` (or `?key=`), or
`Authorization: Bearer` as Vertex AI sends it. A wrong API key is a 400 `API_KEY_INVALID`, as
Google answers it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..answers import ToolChoice, ToolMode, ToolSpec
from ..framing import sse_crlf
from ..plan import Finish, Kind
from ..text import estimate_tokens
from .base import (
    IMAGE_TOKENS,
    AuthRequest,
    BadRequest,
    Credentials,
    Dialect,
    ParsedRequest,
    Provider,
    Refusal,
    ServerTimings,
    StreamContext,
    StreamEncoder,
    Usage,
    bearer_token,
    checked_choice,
    require_object,
    same_key,
    schema_param,
)

_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
           404: "NOT_FOUND", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED",
           500: "INTERNAL", 501: "NOT_IMPLEMENTED", 503: "UNAVAILABLE",
           504: "DEADLINE_EXCEEDED"}
_MESSAGES = {
    429: "Resource has been exhausted (e.g. check quota).",
    500: "An internal error has occurred. Please retry or report in "
         "https://developers.generativeai.google/guide/troubleshooting",
    503: "The model is overloaded. Please try again later.",
}
_FINISH = {Finish.STOP: "STOP", Finish.LENGTH: "MAX_TOKENS", Finish.TOOL_CALLS: "STOP"}
API_KEY_INVALID = "API_KEY_INVALID"


def proto_get(obj: Mapping[str, Any], camel: str) -> Any:
    """`obj[camel]`, or its snake_case spelling (proto JSON accepts both)."""
    if camel in obj:
        return obj[camel]
    return obj.get("".join("_" + c.lower() if c.isupper() else c for c in camel))


def parts_tokens(content: Any) -> int:
    """Prompt tokens of a `Content` (`{role, parts: [{text} | {inlineData} | …]}`)."""
    if not isinstance(content, Mapping):
        return 0
    total = 0
    for part in content.get("parts") or ():
        if not isinstance(part, Mapping):
            continue
        if isinstance(part.get("text"), str):
            total += estimate_tokens(part["text"])
        elif proto_get(part, "inlineData") is not None or proto_get(part, "fileData") is not None:
            total += IMAGE_TOKENS
    return total


class GeminiProvider(Provider):
    """Google's auth and `{"error": {"code", "message", "status"}}` bodies."""

    def authorize(self, request: AuthRequest, credentials: Credentials) -> Refusal | None:
        """`x-goog-api-key` or `?key=` (Gemini API), or `Authorization: Bearer` (Vertex AI)."""
        if credentials.api_key is None:
            return None
        token = bearer_token(request.headers)
        if token is not None:
            if same_key(token, credentials.api_key):
                return None
            return Refusal(401, "Request had invalid authentication credentials. Expected OAuth "
                                "2 access token, login cookie or other valid authentication "
                                "credential.")
        given = request.headers.get("x-goog-api-key")
        if given is None:
            keys = parse_qs(urlsplit(request.url).query).get("key")
            given = keys[0] if keys else None
        if given is None:
            return Refusal(403, "Method doesn't allow unregistered callers (callers without "
                                "established identity). Please use API Key or other form of "
                                "API consumer identity to call this API.")
        if same_key(given.strip(), credentials.api_key):
            return None
        return Refusal(400, "API key not valid. Please pass a valid API key.", API_KEY_INVALID)

    def error_body(self, status: int, message: str | None = None, *, code: str | None = None,
                   param: str | None = None, request_id: str = "") -> dict[str, Any]:
        """`{"error": {"code", "message", "status"[, "details"]}}`."""
        error: dict[str, Any] = {
            "code": status,
            "message": message or _MESSAGES.get(status, f"Request failed with status {status}."),
            "status": _STATUS.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION"),
        }
        if code is not None:
            error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                 "reason": code, "domain": "googleapis.com",
                                 "metadata": {"service": "generativelanguage.googleapis.com"}}]
        return {"error": error}

    def model_not_found(self, model: str) -> Refusal:
        """Google's message for a model it does not serve."""
        return Refusal(404, f"models/{model} is not found for API version v1beta, or is not "
                            "supported for generateContent. Call ListModels to see the list of "
                            "available models and their supported methods.")


def _tools(body: Mapping[str, Any]) -> tuple[ToolSpec, ...]:
    tools = body.get("tools")
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise BadRequest("Invalid 'tools': expected an array.", "tools")
    specs: list[ToolSpec] = []
    for index, tool in enumerate(tools):
        declarations = proto_get(require_object(tool, f"tools[{index}]"), "functionDeclarations")
        for declaration in declarations or ():
            declaration = require_object(declaration, f"tools[{index}].functionDeclarations")
            name = declaration.get("name")
            if not isinstance(name, str) or not name:
                raise BadRequest("Invalid function declaration: a name is required.", "tools")
            parameters = proto_get(declaration, "parametersJsonSchema")
            if parameters is None:
                parameters = declaration.get("parameters")
            specs.append(ToolSpec(name, schema_param(parameters, "tools")))
    return tuple(specs)


def _tool_choice(body: Mapping[str, Any], tools: tuple[ToolSpec, ...]) -> ToolChoice:
    """`toolConfig.functionCallingConfig`: mode AUTO / ANY / NONE / VALIDATED, allowed names."""
    config = proto_get(body, "toolConfig")
    calling = proto_get(config, "functionCallingConfig") if isinstance(config, Mapping) else None
    if not isinstance(calling, Mapping):
        return ToolChoice()
    mode = str(calling.get("mode", "AUTO")).upper()
    modes = {"AUTO": ToolMode.AUTO, "VALIDATED": ToolMode.AUTO, "ANY": ToolMode.REQUIRED,
             "NONE": ToolMode.NONE, "MODE_UNSPECIFIED": ToolMode.AUTO}
    if mode not in modes:
        raise BadRequest(f"Invalid value at 'tool_config.function_calling_config.mode' "
                         f"({mode})", "toolConfig")
    allowed = proto_get(calling, "allowedFunctionNames")
    name = allowed[0] if isinstance(allowed, list) and allowed else None
    return checked_choice(tools, ToolChoice(modes[mode], name), "toolConfig")


def _schema(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The schema of a JSON answer (`responseMimeType: application/json`)."""
    if proto_get(config, "responseMimeType") != "application/json":
        return None
    schema = proto_get(config, "responseJsonSchema")
    if schema is None:
        schema = proto_get(config, "responseSchema")
    return schema_param(schema, "generationConfig.responseSchema")


class GenerateContentDialect(GeminiProvider, Dialect):
    """`POST …/models/{model}:streamGenerateContent?alt=sse` and `…:generateContent`."""

    name = "gemini"
    id_prefix = ""
    streams_tool_arguments = False
    content_type = "text/event-stream"

    def __init__(self, *, stream: bool) -> None:
        self.stream = stream

    def parse(self, body: Any, path_model: str | None) -> ParsedRequest:
        """Read contents, systemInstruction, generationConfig, tools and toolConfig."""
        body = require_object(body)
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise BadRequest("* GenerateContentRequest.contents: contents is not specified",
                             "contents")
        prompt_tokens = sum(parts_tokens(c) for c in contents)
        prompt_tokens += parts_tokens(proto_get(body, "systemInstruction"))
        config = proto_get(body, "generationConfig") or {}
        config = require_object(config, "generationConfig")
        max_tokens = proto_get(config, "maxOutputTokens")
        if max_tokens is not None and (isinstance(max_tokens, bool)
                                       or not isinstance(max_tokens, int) or max_tokens < 1):
            raise BadRequest("Invalid 'generationConfig.maxOutputTokens'.", "generationConfig")
        thinking = proto_get(config, "thinkingConfig")
        show = isinstance(thinking, Mapping) and proto_get(thinking, "includeThoughts") is True
        tools = _tools(body)
        return ParsedRequest(path_model or "", self.stream, max_tokens, True, prompt_tokens,
                             show_reasoning=show, tools=tools,
                             tool_choice=_tool_choice(body, tools), json_schema=_schema(config))

    def new_id(self) -> str:
        """A `responseId`-like id (23 URL-safe characters)."""
        return secrets.token_urlsafe(17)

    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """`GenerateContentResponse` chunks."""
        return _GeminiStream(ctx)

    def body(self, ctx: StreamContext, reasoning: str, answer: str, finish: Finish,
             timings: ServerTimings) -> dict[str, Any]:
        """One `GenerateContentResponse`."""
        parts: list[dict[str, Any]] = []
        if reasoning:
            parts.append({"text": reasoning, "thought": True})
        parts.append(_answer_part(ctx, answer))
        return _response(ctx, parts, _usage(ctx.usage, ctx.usage.reasoning, ctx.usage.answer),
                         _FINISH[finish])


def _answer_part(ctx: StreamContext, text: str) -> dict[str, Any]:
    if ctx.tool_call is not None:
        return {"functionCall": {"name": ctx.tool_call.name, "args": ctx.tool_call.value()}}
    return {"text": text}


def _usage(usage: Usage, thoughts: int, candidates: int) -> dict[str, Any]:
    out: dict[str, Any] = {"promptTokenCount": usage.prompt}
    if candidates:
        out["candidatesTokenCount"] = candidates
    out["totalTokenCount"] = usage.prompt + thoughts + candidates
    out["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": usage.prompt}]
    if usage.cached:  # implicit caching: part of promptTokenCount
        out["cachedContentTokenCount"] = usage.cached
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    return out


def _response(ctx: StreamContext, parts: list[dict[str, Any]], usage: dict[str, Any],
              finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
    if finish is not None:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": ctx.model,
            "responseId": ctx.request_id}


class _GeminiStream(StreamEncoder):
    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        self._thoughts = 0
        self._answer = 0

    def opening(self) -> list[bytes]:
        return []

    def delta(self, kind: Kind, text: str, count: int) -> bytes:
        if kind is Kind.REASONING:
            self._thoughts += count
            part: dict[str, Any] = {"text": text, "thought": True}
        else:
            self._thoughts = self.ctx.usage.reasoning  # all thinking comes before the answer
            self._answer += count
            part = _answer_part(self.ctx, text)
        usage = _usage(self.ctx.usage, self._thoughts, self._answer)
        return sse_crlf(_response(self.ctx, [part], usage))

    def closing(self, finish: Finish, timings: ServerTimings) -> list[bytes]:
        usage = _usage(self.ctx.usage, self.ctx.usage.reasoning, self.ctx.usage.answer)
        return [sse_crlf(_response(self.ctx, [{"text": ""}], usage, _FINISH[finish]))]

    def error(self) -> list[bytes]:
        return [sse_crlf({"error": {"code": 500, "message": _MESSAGES[500],
                                    "status": "INTERNAL"}})]
