"""The simulator's discovery routes: model lists (OpenAI's and Anthropic's shapes, Ollama's
tags), one model, and health."""

from __future__ import annotations

import hashlib
from typing import Any

from aiohttp import web

from exporter.config import SimulatedModel

from .dialects import CHAT, MESSAGES, AuthRequest, Dialect
from .dialects.base import Usage
from .state import STATE, json_response


def add_discovery_routes(app: web.Application) -> None:
    """Register the discovery routes on `app`."""
    app.router.add_get("/v1/models", _list_models)
    app.router.add_get("/v1/models/{model}", _get_model)
    app.router.add_get("/api/tags", _ollama_tags)
    app.router.add_get("/model/info", _model_info)
    app.router.add_get("/v1/model/info", _model_info)
    app.router.add_get("/health", _health)


def _models_dialect(request: web.Request) -> Dialect:
    """Anthropic clients send `anthropic-version`; everyone else gets OpenAI's shape."""
    return MESSAGES if "anthropic-version" in request.headers else CHAT


def bill(model: SimulatedModel, usage: Usage) -> float | None:
    """What a gateway bills for one answer at the model's listed price, in USD (its `usage.cost`;
    None for a model without a price): cache reads and writes at their own rates."""
    price = model.price
    if price is None:
        return None
    read = price.input if price.cached_input is None else price.cached_input
    write = price.input if price.cache_write is None else price.cache_write
    return (usage.uncached * price.input + usage.cached * read + usage.cache_write * write
            + usage.completion * price.output) / 1_000_000


def _per_token(price: float) -> str:
    """USD per 1M tokens as OpenRouter writes it: USD per token, a decimal string."""
    return f"{price / 1_000_000:.12f}".rstrip("0").rstrip(".") or "0"


def _model_entry(dialect: Dialect, name: str, model: SimulatedModel | None) -> dict[str, Any]:
    if dialect is MESSAGES:
        return {"type": "model", "id": name, "display_name": name,
                "created_at": "2025-01-01T00:00:00Z"}
    entry: dict[str, Any] = {"id": name, "object": "model", "created": 1735689600,
                             "owned_by": "llm-probe-sim"}
    if model is None:
        return entry
    # OpenRouter's shape: what discovery reads of a gateway that describes its models.
    embedding = model.mode == "embedding"
    entry["architecture"] = {"input_modalities": ["text", "image"],
                             "output_modalities": ["embeddings"] if embedding else ["text"]}
    entry["supported_parameters"] = [
        "max_tokens", "temperature", "stream", "response_format", "structured_outputs",
        "reasoning", *(("tools", "tool_choice") if model.tools else ())]
    if model.retires is not None:
        entry["expiration_date"] = model.retires.isoformat()
    if model.price is not None:
        entry["pricing"] = {"prompt": _per_token(model.price.input),
                            "completion": _per_token(model.price.output)}
        if model.price.cached_input is not None:
            entry["pricing"]["input_cache_read"] = _per_token(model.price.cached_input)
        if model.price.cache_write is not None:
            entry["pricing"]["input_cache_write"] = _per_token(model.price.cache_write)
    return entry


def _check_key(request: web.Request, dialect: Dialect) -> web.Response | None:
    refusal = dialect.authorize(
        AuthRequest(request.method, str(request.url), request.headers, b""),
        request.app[STATE].credentials)
    if refusal is None:
        return None
    return json_response(dialect.error_body(refusal.status, refusal.message), refusal.status)


async def _list_models(request: web.Request) -> web.Response:
    """`GET /v1/models`: the configured models."""
    dialect = _models_dialect(request)
    if (denied := _check_key(request, dialect)) is not None:
        return denied
    models = request.app[STATE].models
    data = [_model_entry(dialect, name, models[name]) for name in models]
    if dialect is MESSAGES:
        return json_response({"data": data, "has_more": False,
                      "first_id": data[0]["id"] if data else None,
                      "last_id": data[-1]["id"] if data else None})
    return json_response({"object": "list", "data": data})


async def _get_model(request: web.Request) -> web.Response:
    """`GET /v1/models/{model}`."""
    dialect = _models_dialect(request)
    if (denied := _check_key(request, dialect)) is not None:
        return denied
    name = request.match_info["model"]
    if name not in request.app[STATE].models:
        refusal = dialect.model_not_found(name)
        body = dialect.error_body(404, refusal.message, code=refusal.code, param="model")
        return json_response(body, 404)
    return json_response(_model_entry(dialect, name, request.app[STATE].models[name]))


async def _model_info(request: web.Request) -> web.Response:
    """`GET /model/info`: LiteLLM's description of each model (mode, prices per token, and
    `deprecation_date` where the model retires)."""
    if (denied := _check_key(request, CHAT)) is not None:
        return denied
    data = []
    for name, model in request.app[STATE].models.items():
        info: dict[str, Any] = {"mode": model.mode,
                                "supports_function_calling": model.tools,
                                "deprecation_date": model.retires.isoformat()
                                if model.retires else None}
        if model.price is not None:
            info["input_cost_per_token"] = model.price.input / 1_000_000
            info["output_cost_per_token"] = model.price.output / 1_000_000
            if model.price.cached_input is not None:
                info["cache_read_input_token_cost"] = model.price.cached_input / 1_000_000
            if model.price.cache_write is not None:
                info["cache_creation_input_token_cost"] = model.price.cache_write / 1_000_000
        data.append({"model_name": name, "litellm_params": {"model": name},
                     "model_info": info})
    return json_response({"data": data})


async def _ollama_tags(request: web.Request) -> web.Response:
    """`GET /api/tags`: the configured models, as Ollama lists pulled models."""
    models = [{"name": name, "model": name, "modified_at": "2025-01-01T00:00:00Z", "size": 0,
               "digest": hashlib.sha256(name.encode()).hexdigest(),
               "details": {"format": "gguf", "family": "simulated", "parameter_size": "",
                           "quantization_level": ""}}
              for name in request.app[STATE].models]
    return json_response({"models": models})


async def _health(request: web.Request) -> web.Response:
    """`GET /health`: 200 while serving (vLLM-style)."""
    return web.Response(text="ok")
