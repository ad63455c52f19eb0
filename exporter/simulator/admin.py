"""Run-time faults: change a simulated model's profile while the simulator serves, on its own
port, and take the change back.

    GET    /-/simulator/models          every model: {"models": {name: state}}
    GET    /-/simulator/models/{name}   one model's state
    PATCH  /-/simulator/models/{name}   merge a partial profile into its overrides
    PUT    /-/simulator/models/{name}   replace its overrides with a partial profile
    DELETE /-/simulator/models/{name}   drop its overrides: the configured profile again
    DELETE /-/simulator/models          drop every model's overrides

A partial profile is a JSON object of `SimulatedModel` fields (`error_rate`, `error_status`,
`ttft: "2s"`, `stall_rate`, `disconnect_rate`, `served_model`, … any field the config takes,
including fields added later), validated by that same pydantic model over the configured
profile, and in force from the next request (requests in flight keep their profile). A state is
`{"model", "configured", "overrides", "profile"}`: the profile from the config, the fields set
at run time, and the profile served. A reload of the config replaces the configured profiles
and keeps the overrides of the models that remain.

Answers: 200 with the state; 404 for a model the simulator does not serve; 400 for a body
that is not a JSON object; 413 past `MAX_BODY`; 422 for values the profile refuses, naming
each field; 401 when the simulator has an `api_key` and the request does not carry it
(`Authorization: Bearer KEY` or `x-api-key: KEY`). Of what a client sends, only the names of
fields and the validator's words (which may quote a value) come back in a 422, each cut short.
"""

from __future__ import annotations

import hmac
from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError

from ..config import SimulatedModel
from .state import STATE, SimState, json_response, overridden, serve

PREFIX = "/-/simulator/models"
MAX_BODY = 16 * 1024  # a partial profile is a few hundred bytes
MAX_PROBLEMS = 20


def add_admin_routes(app: web.Application) -> None:
    """Register the run-time fault routes on `app`."""
    app.router.add_get(PREFIX, _list)
    app.router.add_delete(PREFIX, _reset_all)
    for method in ("GET", "PATCH", "PUT", "DELETE"):
        app.router.add_route(method, PREFIX + "/{model}", _one)


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return json_response({"error": {"message": message, **extra}}, status)


def _allowed(request: web.Request, state: SimState) -> bool:
    """No key configured, or the request carries it (compared in constant time)."""
    key = state.credentials.api_key
    if not key:
        return True
    bearer = request.headers.get("Authorization", "")
    offered = bearer[7:] if bearer[:7].lower() == "bearer " else request.headers.get(
        "x-api-key", "")
    return hmac.compare_digest(offered.encode("utf-8", "replace"), key.encode())


def model_state(state: SimState, name: str) -> dict[str, Any]:
    """What the admin routes answer for one model."""
    return {"model": name,
            "configured": state.configured[name].model_dump(mode="json", by_alias=True),
            "overrides": dict(state.overrides.get(name, {})),
            "profile": state.models[name].model_dump(mode="json", by_alias=True)}


async def _list(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if not _allowed(request, state):
        return _error(401, "this simulator wants its api_key (Authorization: Bearer)")
    return json_response({"models": {name: model_state(state, name)
                                     for name in state.configured}})


async def _reset_all(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if not _allowed(request, state):
        return _error(401, "this simulator wants its api_key (Authorization: Bearer)")
    if state.overrides:
        state.overrides.clear()
        serve(state, state.configured)
        state.logger.info("simulator profiles restored", models=list(state.configured))
    return json_response({"models": {name: model_state(state, name)
                                     for name in state.configured}})


async def _one(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if not _allowed(request, state):
        return _error(401, "this simulator wants its api_key (Authorization: Bearer)")
    name = request.match_info["model"]
    if name not in state.configured:
        return _error(404, "the simulator serves no such model", models=list(state.configured))
    if request.method == "GET":
        return json_response(model_state(state, name))
    if request.method == "DELETE":
        if state.overrides.pop(name, None) is not None:
            _serve(state, name, state.configured[name])
            state.logger.info("simulator profile restored", model=name)
        return json_response(model_state(state, name))
    patch = await _read_patch(request)
    if isinstance(patch, web.Response):
        return patch
    fields = {**state.overrides.get(name, {}), **patch} if request.method == "PATCH" else patch
    try:
        profile = overridden(state.configured[name], fields)
    except ValidationError as exc:
        return _error(422, "invalid profile fields", problems=_problems(exc))
    # Kept as validated (a duration as seconds), so the state shows what is in force.
    validated = profile.model_dump(mode="json", by_alias=True)
    if fields:
        state.overrides[name] = {key: validated[key] for key in fields}
    else:
        state.overrides.pop(name, None)
    _serve(state, name, profile)
    state.logger.info("simulator profile changed", model=name,
                      overrides=state.overrides.get(name, {}))
    return json_response(model_state(state, name))


def _serve(state: SimState, name: str, profile: SimulatedModel) -> None:
    serve(state, {**state.models, name: profile})


async def _read_patch(request: web.Request) -> dict[str, Any] | web.Response:
    """The body as a JSON object, read no further than MAX_BODY."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        return _error(413, f"a partial profile is at most {MAX_BODY} bytes")
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.readany():
        size += len(chunk)
        if size > MAX_BODY:  # a chunked body says no length up front
            return _error(413, f"a partial profile is at most {MAX_BODY} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        body = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        return _error(400, "the body must be a JSON object of profile fields")
    if not isinstance(body, dict):
        return _error(400, "the body must be a JSON object of profile fields")
    return body


def _problems(exc: ValidationError) -> list[dict[str, str]]:
    """pydantic's errors as (field, words), never quoting the value sent."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False)[:MAX_PROBLEMS]:
        location = ".".join(str(part) for part in err["loc"]) or "(body)"
        words = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        problems.append({"location": location[:128], "error": words.removeprefix(
            "Value error, ")[:200]})
    return problems

