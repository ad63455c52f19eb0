"""OpenAI Responses (`POST /v1/responses`): typed SSE events with sequence numbers.

Events as the openai library's `ResponseStreamEvent` union reads them (`openai/types/responses`):
`response.created`, `response.in_progress`; per output item `response.output_item.added` ...
`response.output_item.done`. Reasoning is a `reasoning` item streamed as
`response.reasoning_text.delta` (open-weight servers: vLLM, gpt-oss) or, when the request sets
`reasoning.summary`, as `response.reasoning_summary_text.delta` (OpenAI's summaries); text is a
`message` item (`response.content_part.added`, `response.output_text.delta`); a tool call is a
`function_call` item whose `output_item.added` names the tool, then
`response.function_call_arguments.delta` / `.done`. The end is `response.completed` (or
`response.incomplete` when max_output_tokens cut it) with `usage` (`input_tokens`,
`input_tokens_details.cached_tokens`, `output_tokens`, `output_tokens_details.reasoning_tokens`);
an in-stream failure is an `error` event followed by `response.failed`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from ..answers import ToolChoice, ToolMode, ToolSpec
from ..framing import sse
from ..plan import Finish, Kind
from ..text import estimate_tokens
from .base import (
    MESSAGE_OVERHEAD,
    BadRequest,
    Dialect,
    ParsedRequest,
    ServerTimings,
    StreamContext,
    StreamEncoder,
    Usage,
    bool_param,
    check_temperature,
    checked_choice,
    content_tokens,
    function_tools,
    int_param,
    model_param,
    optional_object,
    require_object,
    schema_param,
)
from .openai_chat import OpenAIProvider

# Request fields a Response object repeats, with the value it shows when they were not sent.
_ECHOED: dict[str, Any] = {
    "instructions": None, "max_output_tokens": None, "metadata": {},
    "parallel_tool_calls": True, "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None}, "store": True, "temperature": 1.0,
    "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": 1.0,
    "truncation": "disabled", "user": None,
}


def _input_tokens(value: Any) -> int:
    """Prompt tokens of `input`: a string or a list of message / function-call items."""
    if isinstance(value, str):
        return estimate_tokens(value) + MESSAGE_OVERHEAD
    if not isinstance(value, list) or not value:
        raise BadRequest("Invalid 'input': expected a string or a non-empty array of items.",
                         "input")
    total = 0
    for index, item in enumerate(value):
        item = require_object(item, f"input[{index}]")
        kind = item.get("type", "message")
        if kind == "message":
            total += content_tokens(item.get("content")) + MESSAGE_OVERHEAD
        elif kind == "function_call":
            total += estimate_tokens(str(item.get("arguments", "")))
        elif kind == "function_call_output":
            total += estimate_tokens(str(item.get("output", "")))
    return total


def _tool(item: Mapping[str, Any]) -> tuple[Any, Any] | None:
    if item.get("type") != "function":
        return None  # built-in tools: web_search, file_search, …
    return item.get("name"), item.get("parameters")


def _tool_choice(value: Any, tools: tuple[ToolSpec, ...]) -> ToolChoice:
    """`"none" | "auto" | "required" | {"type": "function", "name"}`."""
    if value is None:
        return ToolChoice()
    if isinstance(value, str):
        try:
            return checked_choice(tools, ToolChoice(ToolMode(value)), "tool_choice")
        except ValueError:
            raise BadRequest("Invalid 'tool_choice'.", "tool_choice") from None
    value = require_object(value, "tool_choice")
    name = value.get("name")
    if value.get("type") != "function" or not isinstance(name, str):
        raise BadRequest("Invalid 'tool_choice': expected {type: function, name}.",
                         "tool_choice")
    return checked_choice(tools, ToolChoice(ToolMode.REQUIRED, name), "tool_choice")


def _text_format(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The schema asked for by `text.format` (json_schema, or {} for json_object)."""
    fmt = optional_object(optional_object(body, "text"), "format")
    kind = fmt.get("type", "text")
    if kind == "json_schema":
        return schema_param(fmt.get("schema"), "text.format.schema")
    if kind == "json_object":
        return {}
    if kind == "text":
        return None
    raise BadRequest("Invalid 'text.format.type'.", "text.format.type")


def _usage(usage: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "input_tokens": usage.prompt,
        "input_tokens_details": {"cached_tokens": usage.cached,
                                 "cache_write_tokens": usage.cache_write},
        "output_tokens": usage.completion,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning},
        "total_tokens": usage.prompt + usage.completion}
    if usage.cost is not None:  # a gateway's bill (OpenRouter)
        out["cost"] = usage.cost
    return out


def _item_id(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


class ResponsesDialect(OpenAIProvider, Dialect):
    """`POST /v1/responses`."""

    name = "openai-responses"
    id_prefix = "resp_"

    def parse(self, body: Any, path_model: str | None) -> ParsedRequest:
        """Read model, input, instructions, max_output_tokens, stream, tools, text.format and
        reasoning."""
        body = require_object(body)
        model = model_param(body)
        prompt_tokens = _input_tokens(body.get("input"))
        instructions = body.get("instructions")
        if isinstance(instructions, str):
            prompt_tokens += estimate_tokens(instructions)
        max_tokens = int_param(body, "max_output_tokens")
        check_temperature(body)
        stream = bool_param(body, "stream")
        tools = function_tools(body.get("tools"), "tools", _tool)
        echo = {name: body[name] if body.get(name) is not None else default
                for name, default in _ECHOED.items()}
        return ParsedRequest(model, stream, max_tokens, True, prompt_tokens, tools=tools,
                             tool_choice=_tool_choice(body.get("tool_choice"), tools),
                             json_schema=_text_format(body), echo=echo)

    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """Responses stream events."""
        return _ResponsesStream(ctx)

    def body(self, ctx: StreamContext, reasoning: str, answer: str, finish: Finish,
             timings: ServerTimings) -> dict[str, Any]:
        """A `response` object."""
        items = _Items(ctx)
        output = []
        if reasoning:
            output.append(items.done_item(items.new_item(Kind.REASONING), reasoning))
        kind = Kind.TOOL_CALL if ctx.tool_call is not None else Kind.ANSWER
        output.append(items.done_item(items.new_item(kind), answer))
        return items.response(finish, output)


class _Items:
    """Builds the output items and Response objects of one answer."""

    def __init__(self, ctx: StreamContext) -> None:
        self.ctx = ctx
        reasoning = ctx.echo.get("reasoning")
        self.summary = isinstance(reasoning, Mapping) and reasoning.get("summary") is not None

    def new_item(self, kind: Kind) -> dict[str, Any]:
        if kind is Kind.REASONING:
            item: dict[str, Any] = {"id": _item_id("rs_"), "type": "reasoning", "summary": []}
            if not self.summary:
                item["content"] = []
            return item
        if kind is Kind.TOOL_CALL and self.ctx.tool_call is not None:
            call = self.ctx.tool_call
            return {"id": _item_id("fc_"), "type": "function_call", "status": "in_progress",
                    "arguments": "", "call_id": call.id, "name": call.name}
        return {"id": _item_id("msg_"), "type": "message", "status": "in_progress",
                "role": "assistant", "content": []}

    @staticmethod
    def part(item: Mapping[str, Any], text: str) -> dict[str, Any]:
        """The content (or summary) part of an item holding `text`."""
        if item["type"] == "reasoning":
            kind = "reasoning_text" if "content" in item else "summary_text"
            return {"type": kind, "text": text}
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def done_item(self, item: dict[str, Any], text: str) -> dict[str, Any]:
        """`item` completed with its whole `text` (the arguments, for a function call)."""
        done = dict(item)
        if item["type"] == "function_call":
            done.update(status="completed", arguments=text)
        elif item["type"] == "reasoning":
            done["content" if "content" in item else "summary"] = [self.part(item, text)]
        else:
            done.update(status="completed", content=[self.part(item, text)])
        return done

    def response(self, finish: Finish | None, output: list[dict[str, Any]],
                 error: dict[str, Any] | None = None) -> dict[str, Any]:
        """The Response object: in progress (no finish), completed, incomplete or failed."""
        ctx = self.ctx
        if error is not None:
            status = "failed"
        elif finish is None:
            status = "in_progress"
        else:
            status = "incomplete" if finish is Finish.LENGTH else "completed"
        return {
            "id": ctx.request_id, "object": "response", "created_at": ctx.created,
            "status": status, "background": False, "error": error,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete" else None,
            "model": ctx.model, "output": output, **ctx.echo,
            "usage": _usage(ctx.usage) if status in ("completed", "incomplete") else None,
        }


class _ResponsesStream(StreamEncoder):
    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        self._items = _Items(ctx)
        self._seq = 0
        self._output: list[dict[str, Any]] = []  # finished items
        self._item: dict[str, Any] | None = None  # the open item
        self._text: list[str] = []

    def _event(self, kind: str, **fields: Any) -> bytes:
        obj = {"type": kind, **fields, "sequence_number": self._seq}
        self._seq += 1
        return sse(obj, kind)

    def _where(self) -> dict[str, Any]:
        assert self._item is not None
        return {"item_id": self._item["id"], "output_index": len(self._output)}

    def _open(self, kind: Kind) -> bytes:
        item = self._item = self._items.new_item(kind)
        self._text = []
        out = self._event("response.output_item.added", output_index=len(self._output),
                          item=item)
        if item["type"] == "reasoning" and "content" not in item:
            out += self._event("response.reasoning_summary_part.added", **self._where(),
                               summary_index=0, part=self._items.part(item, ""))
        elif item["type"] != "function_call":
            out += self._event("response.content_part.added", **self._where(), content_index=0,
                               part=self._items.part(item, ""))
        return out

    def _close(self) -> bytes:
        item = self._item
        if item is None:
            return b""
        text = "".join(self._text)
        where = self._where()
        part = self._items.part(item, text)
        if item["type"] == "function_call":
            assert self.ctx.tool_call is not None
            out = self._event("response.function_call_arguments.done", **where, arguments=text,
                              name=self.ctx.tool_call.name)
        elif "content" not in item and item["type"] == "reasoning":
            out = self._event("response.reasoning_summary_text.done", **where, summary_index=0,
                              text=text)
            out += self._event("response.reasoning_summary_part.done", **where, summary_index=0,
                               part=part)
        else:
            done = "response.reasoning_text.done" if item["type"] == "reasoning" \
                else "response.output_text.done"
            extra: dict[str, list[object]] = {} if item["type"] == "reasoning" \
                else {"logprobs": []}
            out = self._event(done, **where, content_index=0, text=text, **extra)
            out += self._event("response.content_part.done", **where, content_index=0,
                               part=part)
        finished = self._items.done_item(item, text)
        out += self._event("response.output_item.done", output_index=len(self._output),
                           item=finished)
        self._output.append(finished)
        self._item = None
        return out

    def _kind(self) -> Kind | None:
        if self._item is None:
            return None
        return {"reasoning": Kind.REASONING, "function_call": Kind.TOOL_CALL}.get(
            self._item["type"], Kind.ANSWER)

    def opening(self) -> list[bytes]:
        created = self._items.response(None, [])
        out = [self._event("response.created", response=created),
               self._event("response.in_progress", response=created)]
        if self.ctx.first_kind is not Kind.TOOL_CALL:
            out.append(self._open(self.ctx.first_kind))
        return out

    def delta(self, kind: Kind, text: str, count: int) -> bytes:
        out = b""
        if kind is not self._kind():
            out += self._close() + self._open(kind)
        self._text.append(text)
        where = self._where()
        if kind is Kind.TOOL_CALL:
            return out + self._event("response.function_call_arguments.delta", **where,
                                     delta=text) if text else out
        if kind is Kind.REASONING:
            if self._items.summary:
                return out + self._event("response.reasoning_summary_text.delta", **where,
                                         summary_index=0, delta=text)
            return out + self._event("response.reasoning_text.delta", **where, content_index=0,
                                     delta=text)
        return out + self._event("response.output_text.delta", **where, content_index=0,
                                 delta=text, logprobs=[])

    def closing(self, finish: Finish, timings: ServerTimings) -> list[bytes]:
        out = self._close()
        kind = "response.incomplete" if finish is Finish.LENGTH else "response.completed"
        return [out + self._event(kind, response=self._items.response(finish, self._output))]

    def error(self) -> list[bytes]:
        message = "The server had an error while processing your request. Sorry about that!"
        failed = self._items.response(None, self._output,
                                      error={"code": "server_error", "message": message})
        return [self._event("error", code="server_error", message=message, param=None)
                + self._event("response.failed", response=failed)]
