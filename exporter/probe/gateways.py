"""What a gateway's own error means: LiteLLM's and OpenRouter's answers → a `Cause`.

A gateway answers for itself before any provider is asked: a model name it does not route, a
key it does not know, a key or team that may not use the model, a spent budget. Its status
says little (LiteLLM answers an unrouted model with 400, an unknown key without its database
with 400, a missing key with 500), so the cause is read from its body, and the cause decides
the result (`exporter.errors.GATEWAY_RESULTS`). The body is a server's: only a short one is
parsed, only short fields are read, and phrases are compared where the gateway puts them (at
the start of its message), never searched for anywhere in the text, so an echo of our own
request (a model name, a prompt) cannot pass for the gateway's words.

Sources (LiteLLM 1.106, `litellm/proxy/_types.py` `ProxyErrorTypes`, `proxy/auth/
user_api_key_auth.py`, `proxy/auth/auth_checks.py`, `proxy/route_llm_request.py`; OpenRouter's
error documentation and the bodies users paste in issues): the rows below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from exporter.errors import Cause

# A longer body is no gateway's own error (those are a few hundred bytes): never parsed here.
MAX_BODY = 16 * 1024
# Longest `type`/`code` read, and how far into a message a phrase may start (after LiteLLM's
# route prefix, "/chat/completions: ", or OpenRouter's model name).
MAX_FIELD = 64
MAX_PREFIX = 160

# LiteLLM's `error.type` (ProxyErrorTypes): structured, preferred over words. Every
# `*_model_access_denied` (key, team, user, customer, org, project, agent) is model access.
_TYPES: Mapping[str, Cause] = {
    "no_db_connection": Cause.GATEWAY_KEY_DATABASE,
    "token_not_found_in_db": Cause.GATEWAY_KEY_REJECTED,
    "expired_key": Cause.GATEWAY_KEY_REJECTED,
    "budget_exceeded": Cause.GATEWAY_BUDGET_EXCEEDED,
}
_MODEL_ACCESS_TYPE = "_model_access_denied"
# LiteLLM puts "Authentication Error, " (or " - ") before the words of an auth failure.
_AUTH_PREFIX = 32

# Lower-case phrases and how far into the message they may start: (phrase, latest start,
# cause). First match wins.
_PHRASES: tuple[tuple[str, int, Cause], ...] = (
    # LiteLLM: a model name the proxy has no deployment for (400, route_llm_request.py); the
    # route ("/chat/completions: ", "anthropic_messages: ", "400: {'error': '/completions: ")
    # comes first
    ("invalid model name passed in model=", MAX_PREFIX, Cause.GATEWAY_MODEL_NOT_ROUTED),
    # OpenRouter: "<model> is not a valid model ID" (400)
    ("is not a valid model id", MAX_PREFIX, Cause.GATEWAY_MODEL_NOT_ROUTED),
    # OpenRouter: the model exists but no provider endpoint takes this request (404):
    # "No endpoints found for <model>.", "… matching your data policy", "… that support tool use"
    ("no endpoints found", 0, Cause.GATEWAY_NO_ENDPOINT),
    # LiteLLM without its key database, any key but the master key (400)
    ("no connected db", 0, Cause.GATEWAY_KEY_DATABASE),
    # LiteLLM: no key at all
    ("no api key passed in", _AUTH_PREFIX, Cause.KEY_REJECTED),
    # LiteLLM virtual keys: unknown, malformed, expired, blocked, not a virtual key
    ("invalid proxy server token passed", _AUTH_PREFIX, Cause.GATEWAY_KEY_REJECTED),
    ("malformed api key passed in", _AUTH_PREFIX, Cause.GATEWAY_KEY_REJECTED),
    ("expired key", _AUTH_PREFIX, Cause.GATEWAY_KEY_REJECTED),
    ("key is blocked", _AUTH_PREFIX, Cause.GATEWAY_KEY_REJECTED),
    ("litellm virtual key expected", _AUTH_PREFIX, Cause.GATEWAY_KEY_REJECTED),
    # LiteLLM: the key, its team, user or organisation may not use the model (older words,
    # and 1.106's client message, which its auth handler sends with type auth_error)
    ("not allowed to access model", _AUTH_PREFIX, Cause.GATEWAY_MODEL_ACCESS),
    ("is not available for this api key", MAX_PREFIX, Cause.GATEWAY_MODEL_ACCESS),
    # LiteLLM: the key's, team's, user's or the proxy's budget is spent
    ("budget has been exceeded", _AUTH_PREFIX, Cause.GATEWAY_BUDGET_EXCEEDED),
    ("exceededbudget:", _AUTH_PREFIX, Cause.GATEWAY_BUDGET_EXCEEDED),
)


def gateway_cause(status: int, body: bytes) -> Cause | None:
    """The cause a gateway's error body states (None: not one of the gateway errors known)."""
    if status < 400 or not body or len(body) > MAX_BODY:  # a gateway's own error is short
        return None
    error = _error(body)
    if error is None:
        return None
    kind, message = error
    if kind in _TYPES:
        return _TYPES[kind]
    if kind.endswith(_MODEL_ACCESS_TYPE):
        return Cause.GATEWAY_MODEL_ACCESS
    text = message[:MAX_PREFIX + 64].lower()
    for phrase, latest, cause in _PHRASES:
        at = text.find(phrase, 0, latest + len(phrase))
        if at >= 0:
            return cause
    return None


def _error(body: bytes) -> tuple[str, str] | None:
    """(`type`, message) of a gateway error body, each short; None when it is not JSON."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    # LiteLLM: {"error": {"message", "type", "param", "code"}} or {"error": "…"};
    # FastAPI: {"detail": …}; OpenRouter: {"error": {"message", "code", "metadata"}}.
    error = data.get("error", data.get("detail"))
    if isinstance(error, str):
        return "", error.strip()
    if not isinstance(error, dict):
        return None
    kind, message = error.get("type"), error.get("message", error.get("error"))
    return (kind[:MAX_FIELD] if isinstance(kind, str) else "",
            message.strip() if isinstance(message, str) else "")
