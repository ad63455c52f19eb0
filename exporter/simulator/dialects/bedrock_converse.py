"""Amazon Bedrock Converse (`POST /model/{modelId}/converse-stream` and `/converse`).

The stream is the AWS binary event stream (`application/vnd.amazon.eventstream`), one frame per
event as botocore's `bedrock-runtime` service model (`ConverseStreamOutput`) defines them:
`messageStart`, `contentBlockDelta` (`text`, `reasoningContent.text` then `.signature`,
`toolUse.input` pieces), `contentBlockStart` (only for `toolUse`: id and name), `contentBlockStop`,
`messageStop` (`stopReason`: end_turn, max_tokens, tool_use) and `metadata` (`usage`, and
`metrics.latencyMs`: the server's own latency). Payloads carry Bedrock's `p` padding field. A
failure mid-stream is an exception frame (`:message-type: exception`,
`:exception-type: modelStreamErrorException`). Errors before the stream are JSON `{"message"}`
with the type in `x-amzn-ErrorType`, as botocore's rest-json parser reads them.

Auth is `Authorization: Bearer <Bedrock API key>` or SigV4 (`AWS4-HMAC-SHA256 Credential=…,
SignedHeaders=…, Signature=…` with `X-Amz-Date`). With AWS keys the signature is recomputed
with botocore's own `SigV4Auth` over the request as received; without them a SigV4 header only
has to be well-formed.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from ..answers import ToolChoice, ToolMode, ToolSpec
from ..framing import aws_event, aws_exception
from ..plan import Finish, Kind
from ..text import estimate_tokens
from .base import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    AuthRequest,
    AwsKeys,
    BadRequest,
    Credentials,
    Dialect,
    ParsedRequest,
    Refusal,
    ServerTimings,
    StreamContext,
    StreamEncoder,
    Usage,
    bearer_token,
    checked_choice,
    optional_object,
    require_object,
    same_key,
    schema_param,
)

_ERROR_TYPES = {400: "ValidationException", 403: "AccessDeniedException",
                404: "ResourceNotFoundException", 408: "ModelTimeoutException",
                424: "ModelErrorException", 429: "ThrottlingException",
                500: "InternalServerException", 503: "ServiceUnavailableException"}
_MESSAGES = {429: "Too many requests, please wait before trying again.",
             500: "The system encountered an unexpected error during processing. Try your "
                  "request again.",
             503: "Bedrock is unable to process your request."}
_STOP = {Finish.STOP: "end_turn", Finish.LENGTH: "max_tokens", Finish.TOOL_CALLS: "tool_use"}
# SigV4 requests older or newer than this are refused, as AWS does.
MAX_CLOCK_SKEW = 15 * 60
_SIGV4 = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/,\s]+)/"
    r"(?P<service>[^/,\s]+)/aws4_request\s*,\s*SignedHeaders=(?P<headers>[a-z0-9;_.-]+)\s*,"
    r"\s*Signature=(?P<signature>[0-9a-f]{64})\s*$")
_UNSIGNED = {"UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"}
_PAD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def sigv4_supported() -> bool:
    """Whether botocore is installed, so that SigV4 signatures can be verified (without
    importing it: only a request to verify pays for it)."""
    try:
        return importlib.util.find_spec("botocore") is not None
    except (ImportError, ValueError):  # ValueError: an entry of None in sys.modules
        return False


def _recompute(request: AuthRequest, keys: AwsKeys, match: re.Match[str], amz_date: str) -> str:
    """The signature botocore computes for this request, with the signer's own parts."""
    try:  # botocore is an optional dependency: only verifying signatures needs it
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials as BotoCredentials
    except ImportError:  # pragma: no cover - sigv4_supported() said it is installed
        raise AssertionError("botocore vanished") from None
    signed = match["headers"].split(";")
    aws_request = AWSRequest(method=request.method, url=request.url,
                             headers={name: request.headers.get(name, "") for name in signed},
                             data=request.body)
    aws_request.context["timestamp"] = amz_date
    signer = SigV4Auth(BotoCredentials(keys.access_key_id, keys.secret_access_key),
                       match["service"], match["region"])
    canonical = signer.canonical_request(aws_request)
    return str(signer.signature(signer.string_to_sign(aws_request, canonical), aws_request))


def _check_sigv4(request: AuthRequest, header: str, keys: AwsKeys | None) -> Refusal | None:
    match = _SIGV4.match(header)
    if match is None:
        return Refusal(400, "Authorization header requires 'Credential', 'SignedHeaders' and "
                            "'Signature' parameters.", "IncompleteSignatureException")
    amz_date = request.headers.get("X-Amz-Date", "")
    try:
        signed_at = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return Refusal(400, "Authorization header requires existence of either a 'X-Amz-Date' "
                            "or a 'Date' header.", "IncompleteSignatureException")
    if "host" not in match["headers"].split(";") or not amz_date.startswith(match["date"]):
        return Refusal(400, "The request signature does not cover 'host', or its credential "
                            "date is not the request date.", "IncompleteSignatureException")
    if keys is None:
        return None
    if not same_key(match["key"], keys.access_key_id):
        return Refusal(403, "The security token included in the request is invalid.",
                       "UnrecognizedClientException")
    skew = abs((datetime.now(UTC) - signed_at).total_seconds())
    if skew > MAX_CLOCK_SKEW:
        return Refusal(403, f"Signature expired: {amz_date} is now earlier or later than "
                            "15 min from the current time.", "InvalidSignatureException")
    content_hash = request.headers.get("X-Amz-Content-SHA256")
    if content_hash is not None and content_hash not in _UNSIGNED \
            and content_hash != hashlib.sha256(request.body).hexdigest():
        return Refusal(400, "The provided 'x-amz-content-sha256' header does not match what "
                            "was computed.", "InvalidSignatureException")
    if not hmac.compare_digest(_recompute(request, keys, match, amz_date), match["signature"]):
        return Refusal(403, "The request signature we calculated does not match the signature "
                            "you provided. Check your AWS Secret Access Key and signing method. "
                            "Consult the service documentation for details.",
                       "InvalidSignatureException")
    return None


def _content_tokens(content: Any) -> int:
    total = 0
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        if isinstance(block.get("text"), str):
            total += estimate_tokens(block["text"])
        elif "image" in block or "document" in block:
            total += IMAGE_TOKENS
    return total


def _tools(config: Mapping[str, Any]) -> tuple[ToolSpec, ...]:
    tools = config.get("tools")
    if tools is None:
        return ()
    if not isinstance(tools, list) or not tools:
        raise BadRequest("toolConfig.tools: expected a non-empty list", "toolConfig")
    specs = []
    for tool in tools:
        spec = require_object(tool, "toolConfig.tools").get("toolSpec")
        if spec is None:
            continue  # cachePoint / systemTool entries
        spec = require_object(spec, "toolConfig.tools.toolSpec")
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest("toolSpec.name: a name is required", "toolConfig")
        schema = optional_object(spec, "inputSchema").get("json")
        specs.append(ToolSpec(name, schema_param(schema, "toolSpec.inputSchema.json")))
    return tuple(specs)


def _tool_choice(config: Mapping[str, Any], tools: tuple[ToolSpec, ...]) -> ToolChoice:
    """`{"auto": {}} | {"any": {}} | {"tool": {"name"}}`."""
    choice = config.get("toolChoice")
    if choice is None:
        return ToolChoice()
    choice = require_object(choice, "toolConfig.toolChoice")
    if "tool" in choice:
        name = require_object(choice["tool"], "toolChoice.tool").get("name")
        if not isinstance(name, str):
            raise BadRequest("toolChoice.tool.name: a name is required", "toolConfig")
        return checked_choice(tools, ToolChoice(ToolMode.REQUIRED, name), "toolConfig")
    mode = ToolMode.REQUIRED if "any" in choice else ToolMode.AUTO
    return checked_choice(tools, ToolChoice(mode), "toolConfig")


def _output_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """`outputConfig.textFormat.structure.jsonSchema.schema`: a JSON schema as a string."""
    fmt = optional_object(optional_object(body, "outputConfig"), "textFormat")
    if not fmt:
        return None
    definition = optional_object(optional_object(fmt, "structure"), "jsonSchema")
    raw = definition.get("schema")
    if not isinstance(raw, str):
        raise BadRequest("outputConfig.textFormat.structure.jsonSchema.schema: expected a JSON "
                         "schema string", "outputConfig")
    try:
        return schema_param(orjson.loads(raw), "outputConfig")
    except orjson.JSONDecodeError:
        raise BadRequest("outputConfig: the JSON schema does not parse", "outputConfig") from None


class ConverseDialect(Dialect):
    """`POST /model/{modelId}/converse-stream` (event stream) and `/converse` (JSON)."""

    name = "bedrock-converse"
    id_prefix = ""
    call_id_prefix = "tooluse_"
    request_id_header = "x-amzn-RequestId"
    content_type = "application/vnd.amazon.eventstream"

    def __init__(self, *, stream: bool) -> None:
        self.stream = stream

    def authorize(self, request: AuthRequest, credentials: Credentials) -> Refusal | None:
        """A Bedrock API key as Bearer token, or a SigV4 signature (verified with AWS keys)."""
        header = request.headers.get("Authorization")
        if not header:
            return Refusal(403, "Missing Authentication Token",
                           "MissingAuthenticationTokenException")
        token = bearer_token(request.headers)
        if token is not None:
            if credentials.api_key is None or same_key(token, credentials.api_key):
                return None
            return Refusal(403, "Invalid API Key format: Must start with pre-defined prefix",
                           "UnrecognizedClientException")
        return _check_sigv4(request, header.strip(), credentials.aws)

    def error_body(self, status: int, message: str | None = None, *, code: str | None = None,
                   param: str | None = None, request_id: str = "") -> dict[str, Any]:
        """`{"message": …}` (the type travels in `x-amzn-ErrorType`)."""
        return {"message": message or _MESSAGES.get(status, f"Request failed with status "
                                                            f"{status}.")}

    def error_headers(self, status: int, code: str | None) -> dict[str, str]:
        """`x-amzn-ErrorType: <Exception>:http://internal.amazon.com/coral/…`."""
        kind = code or _ERROR_TYPES.get(
            status, "InternalServerException" if status >= 500 else "ValidationException")
        return {"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}

    def model_not_found(self, model: str) -> Refusal:
        """Bedrock answers an unknown model id with a validation error."""
        return Refusal(400, "The provided model identifier is invalid.", "ValidationException")

    def parse(self, body: Any, path_model: str | None) -> ParsedRequest:
        """Read messages, system, inferenceConfig, toolConfig and outputConfig."""
        body = require_object(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("A conversation must start with a user message.", "messages")
        prompt_tokens = 0
        for message in messages:
            message = require_object(message, "messages")
            if message.get("role") not in ("user", "assistant"):
                raise BadRequest("messages.role: expected user or assistant", "messages")
            prompt_tokens += _content_tokens(message.get("content")) + MESSAGE_OVERHEAD
        prompt_tokens += _content_tokens(body.get("system"))
        inference = optional_object(body, "inferenceConfig")
        max_tokens = inference.get("maxTokens")
        if max_tokens is not None and (isinstance(max_tokens, bool)
                                       or not isinstance(max_tokens, int) or max_tokens < 1):
            raise BadRequest("inferenceConfig.maxTokens: expected an integer >= 1",
                             "inferenceConfig")
        temperature = inference.get("temperature")
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(
                temperature, int | float) or not 0 <= temperature <= 1):
            raise BadRequest("inferenceConfig.temperature: expected a number in 0..1",
                             "inferenceConfig")
        config = optional_object(body, "toolConfig")
        tools = _tools(config)
        return ParsedRequest(path_model or "", self.stream, max_tokens, True, prompt_tokens,
                             tools=tools, tool_choice=_tool_choice(config, tools),
                             json_schema=_output_schema(body))

    def server_timings(self, timings: ServerTimings) -> dict[str, float]:
        """`metrics.latencyMs`, in seconds."""
        return {"total": _latency_ms(timings) / 1000}

    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """Converse stream events."""
        return _ConverseStream(ctx)

    def body(self, ctx: StreamContext, reasoning: str, answer: str, finish: Finish,
             timings: ServerTimings) -> dict[str, Any]:
        """A `ConverseResponse`."""
        content: list[dict[str, Any]] = []
        if reasoning:
            content.append({"reasoningContent": {"reasoningText": {
                "text": reasoning, "signature": _signature(ctx)}}})
        if ctx.tool_call is not None:
            call = ctx.tool_call
            content.append({"toolUse": {"toolUseId": call.id, "name": call.name,
                                        "input": call.value()}})
        else:
            content.append({"text": answer})
        return {"output": {"message": {"role": "assistant", "content": content}},
                "stopReason": _STOP[finish], "usage": _usage(ctx.usage),
                "metrics": {"latencyMs": _latency_ms(timings)}}


def _latency_ms(timings: ServerTimings) -> int:
    return round(timings.total * 1000)


def _usage(usage: Usage) -> dict[str, int]:
    return {"inputTokens": usage.uncached, "outputTokens": usage.completion,
            "totalTokens": usage.prompt + usage.completion,
            "cacheReadInputTokens": usage.cached, "cacheWriteInputTokens": usage.cache_write}


def _signature(ctx: StreamContext) -> str:
    return hashlib.sha256(ctx.request_id.encode()).hexdigest()


class _ConverseStream(StreamEncoder):
    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        self._index = 0
        self._kind: Kind | None = None  # kind of the open content block
        self._events = 0

    def _event(self, kind: str, obj: dict[str, Any]) -> bytes:
        # Bedrock pads every payload with a `p` field of varying length (hides token lengths).
        self._events += 1
        return aws_event(kind, {**obj, "p": _PAD[:1 + (self._events * 7) % len(_PAD)]})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return self._event("contentBlockDelta", {"contentBlockIndex": self._index,
                                                 "delta": delta})

    def _stop_block(self) -> bytes:
        out = b""
        if self._kind is Kind.REASONING:
            out += self._delta({"reasoningContent": {"signature": _signature(self.ctx)}})
        return out + self._event("contentBlockStop", {"contentBlockIndex": self._index})

    def opening(self) -> list[bytes]:
        return [self._event("messageStart", {"role": "assistant"})]

    def delta(self, kind: Kind, text: str, count: int) -> bytes:
        out = b""
        if kind is not self._kind:
            if self._kind is not None:
                out += self._stop_block()
                self._index += 1
            self._kind = kind
            if kind is Kind.TOOL_CALL and self.ctx.tool_call is not None:
                call = self.ctx.tool_call
                out += self._event("contentBlockStart", {
                    "contentBlockIndex": self._index,
                    "start": {"toolUse": {"toolUseId": call.id, "name": call.name}}})
        if kind is Kind.REASONING:
            return out + self._delta({"reasoningContent": {"text": text}})
        if kind is Kind.TOOL_CALL:
            return out + self._delta({"toolUse": {"input": text}}) if text else out
        return out + self._delta({"text": text})

    def closing(self, finish: Finish, timings: ServerTimings) -> list[bytes]:
        out = self._stop_block() if self._kind is not None else b""
        out += self._event("messageStop", {"stopReason": _STOP[finish]})
        return [out + self._event("metadata", {
            "usage": _usage(self.ctx.usage), "metrics": {"latencyMs": _latency_ms(timings)}})]

    def error(self) -> list[bytes]:
        return [aws_exception("modelStreamErrorException", {
            "message": "An error occurred while streaming the response. Retry your request.",
            "originalStatusCode": 500, "originalMessage": "Internal server error"})]
