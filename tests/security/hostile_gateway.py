"""A hostile OpenAI-compatible gateway that lies about money: the prices in its LiteLLM
`/model/info` and the usage its answers claim are whatever a test sets.

`GET /v1/models` lists `models`; `GET /v1/model/info` prices each at `prices[name]` (USD per 1M
tokens, written per token as LiteLLM does); `POST /v1/chat/completions` streams a short answer
whose usage claims `usage` (prompt and completion tokens). Run it with
`hostile.serve_in_thread(gateway.app())`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from exporter.simulator.dialects import openai_chat
from tests.security.hostile import chunk, stream

OUTRAGEOUS = {"prompt_tokens": 60_000, "completion_tokens": 60_000}  # inside the plausibility slack


@dataclass
class HostileGateway:
    """What the gateway lists, what it says each model costs, what its answers claim."""

    models: list[str] = field(default_factory=list)
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)  # (input, output)/1M
    usage: dict[str, int] = field(default_factory=lambda: dict(OUTRAGEOUS))
    chats: int = 0

    async def _models(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model"} for name in self.models]})

    async def _info(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"data": [
            {"model_name": name, "model_info": {
                "mode": "chat", "input_cost_per_token": self.prices[name][0] / 1e6,
                "output_cost_per_token": self.prices[name][1] / 1e6}}
            for name in self.models if name in self.prices]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.chats += 1
        usage = openai_chat.chat_chunk(openai_chat.chunk_head("c-1"), None, usage=self.usage)
        return await stream(request, [chunk(content="Hi"), chunk(content=" there"),
                                      chunk(finish="stop"), usage, b"data: [DONE]\n\n"])

    def app(self) -> web.Application:
        """The gateway's application."""
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/model/info", self._info)
        app.router.add_post("/v1/chat/completions", self._chat)
        return app
