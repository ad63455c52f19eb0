"""OpenAI legacy completions (`POST /v1/completions`); reasoning, if any, only spends time.

Chunks are `text_completion` objects with `choices[0].text`; the last carries `finish_reason`,
then the usage chunk (`choices: []`, when asked for) and `data: [DONE]`.
"""

from __future__ import annotations

from typing import Any

from ..framing import DONE, sse
from ..plan import Finish, Kind
from ..text import estimate_tokens
from .base import (
    BadRequest,
    Dialect,
    ParsedRequest,
    ServerTimings,
    StreamContext,
    StreamEncoder,
    check_temperature,
    int_param,
    model_param,
    require_object,
)
from .openai_chat import SERVER_ERROR, OpenAIProvider, stream_params


class CompletionsDialect(OpenAIProvider, Dialect):
    """`POST /v1/completions`."""

    name = "openai-completions"
    id_prefix = "cmpl-"

    def parse(self, body: Any, path_model: str | None) -> ParsedRequest:
        """Read model, prompt, max_tokens, stream and stream_options."""
        body = require_object(body)
        model = model_param(body)
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt_tokens = estimate_tokens(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            prompt_tokens = sum(estimate_tokens(p) for p in prompt)
        elif isinstance(prompt, list) and prompt and all(
                isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            prompt_tokens = len(prompt)
        else:
            raise BadRequest("Invalid 'prompt': expected a string or an array of strings.",
                             "prompt")
        max_tokens = int_param(body, "max_tokens")
        check_temperature(body)
        stream, include_usage = stream_params(body)
        return ParsedRequest(model, stream, max_tokens, include_usage, prompt_tokens,
                             show_reasoning=False)

    def encoder(self, ctx: StreamContext) -> StreamEncoder:
        """Text completion chunks."""
        return _CompletionsStream(ctx)

    def body(self, ctx: StreamContext, reasoning: str, answer: str, finish: Finish,
             timings: ServerTimings) -> dict[str, Any]:
        """A `text_completion` object."""
        return {
            "id": ctx.request_id, "object": "text_completion", "created": ctx.created,
            "model": ctx.model, "system_fingerprint": ctx.fingerprint,
            "choices": [{"text": answer, "index": 0, "logprobs": None,
                         "finish_reason": finish.value}],
            "usage": self.usage(ctx.usage),
        }


class _CompletionsStream(StreamEncoder):
    def __init__(self, ctx: StreamContext) -> None:
        super().__init__(ctx)
        self._head = {"id": ctx.request_id, "object": "text_completion",
                      "created": ctx.created, "model": ctx.model,
                      "system_fingerprint": ctx.fingerprint}

    def _chunk(self, text: str, finish: Finish | None = None) -> bytes:
        obj: dict[str, Any] = {**self._head, "choices": [{
            "text": text, "index": 0, "logprobs": None,
            "finish_reason": finish.value if finish else None}]}
        if self.ctx.include_usage:
            obj["usage"] = None
        return sse(obj)

    def opening(self) -> list[bytes]:
        return []

    def delta(self, kind: Kind, text: str, count: int) -> bytes:
        return self._chunk(text)

    def closing(self, finish: Finish, timings: ServerTimings) -> list[bytes]:
        out = [self._chunk("", finish)]
        if self.ctx.include_usage:
            out.append(sse({**self._head, "choices": [],
                            "usage": OpenAIProvider.usage(self.ctx.usage)}))
        out.append(DONE)
        return out

    def error(self) -> list[bytes]:
        return [sse({"error": SERVER_ERROR}), DONE]
