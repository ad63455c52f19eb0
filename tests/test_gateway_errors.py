"""A gateway's own errors, classified by what they mean: verbatim bodies of LiteLLM 1.106 (read
from a running proxy, or from its source where a key database is needed) and OpenRouter, sent by
a loopback server to the real prober; the result, the cause and the hint each one gets.

The real LiteLLM proxy's answers are checked in tests/test_real_servers_gateway.py.
"""

from __future__ import annotations

import time

import orjson
import pytest

from exporter.config import parse_config
from exporter.errors import GATEWAY_RESULTS, Cause, HTTPStatusError, Result
from exporter.log import REDACTOR
from exporter.probe.gateways import MAX_BODY, gateway_cause
from exporter.probe.hints import hint_for
from exporter.probe.prober import Prober
from exporter.result import ProbeResult
from tests.conftest import Script, make_config, probe_once

CANARY = "sk-canary-gateway-7f3a9c2e1b"


def _json(body: object) -> bytes:
    return orjson.dumps(body)


def _litellm(message: str, kind: str, code: str, param: str | None = None) -> bytes:
    """LiteLLM's ProxyException body (`ProxyException.to_dict`)."""
    return _json({"error": {"message": message, "type": kind, "param": param, "code": code}})


HINT = "Call `/v1/models` to view available models for your key."
# (id, status, body, result, cause, words of the hint)
ROWS = [
    # LiteLLM, measured on a running proxy: an unrouted model on each route
    ("litellm-unrouted-chat", 400, _json({"error": {
        "message": f"/chat/completions: Invalid model name passed in model=gpt-nope. {HINT}",
        "type": "invalid_request_error", "param": None, "code": "400",
        "provider_specific_fields": {"error": "/chat/completions: Invalid model name passed in "
                                              f"model=gpt-nope. {HINT}"}}}),
     Result.NOT_FOUND, Cause.GATEWAY_MODEL_NOT_ROUTED, "routes no model of this name"),
    ("litellm-unrouted-completions", 400, _litellm(
        "400: {'error': '/completions: Invalid model name passed in model=gpt-nope. "
        f"{HINT}'}}", "None", "400", "None"),
     Result.NOT_FOUND, Cause.GATEWAY_MODEL_NOT_ROUTED, "case-sensitive"),
    ("litellm-unrouted-messages", 400, _json({"type": "error", "error": {
        "type": "invalid_request_error",
        "message": f"anthropic_messages: Invalid model name passed in model=gpt-nope. {HINT}"}}),
     Result.NOT_FOUND, Cause.GATEWAY_MODEL_NOT_ROUTED, "GET"),
    ("litellm-unrouted-detail", 400, _json({"detail": {
        "error": f"/chat/completions: Invalid model name passed in model=gpt-nope. {HINT}"}}),
     Result.NOT_FOUND, Cause.GATEWAY_MODEL_NOT_ROUTED, "model_name"),
    # LiteLLM without its key database: any key but the master key
    ("litellm-no-db", 400, _litellm("No connected db.", "no_db_connection", "400"),
     Result.AUTH, Cause.GATEWAY_KEY_DATABASE, "master key"),
    ("litellm-no-db-older", 400, _litellm("No connected db.", "None", "400"),
     Result.AUTH, Cause.GATEWAY_KEY_DATABASE, "master key"),
    # LiteLLM virtual keys (from its source: user_api_key_auth.py, auth_checks.py)
    ("litellm-key-unknown", 401, _litellm(
        "Authentication Error, Invalid proxy server token passed. Received API Key = sk-...ab12, "
        "Key Hash (Token) =0f1e2d. Unable to find token in cache or "
        "`LiteLLM_VerificationTokenTable`", "token_not_found_in_db", "401"),
     Result.AUTH, Cause.GATEWAY_KEY_REJECTED, "virtual key"),
    ("litellm-key-expired", 401, _litellm(
        "Authentication Error - Expired Key. Key Expiry time 2026-01-01 00:00:00+00:00 and "
        "current time 2026-02-01 00:00:00+00:00", "expired_key", "401"),
     Result.AUTH, Cause.GATEWAY_KEY_REJECTED, "expired"),
    ("litellm-key-blocked", 401, _litellm(
        "Authentication Error, Key is blocked. Update via `/key/unblock` if you're an admin.",
        "auth_error", "401"), Result.AUTH, Cause.GATEWAY_KEY_REJECTED, "blocked"),
    ("litellm-key-malformed-older", 401, _litellm(
        "Malformed API Key passed in. Ensure Key has `Bearer ` prefix.", "auth_error", "401"),
     Result.AUTH, Cause.GATEWAY_KEY_REJECTED, "virtual key"),
    # the key (team, user, org) may not use the model: 403 now, 401 in older versions
    ("litellm-key-model-access", 403, _litellm(
        "The requested model 'gpt-4o' is not available for this API key, or the model name is "
        "invalid. Check the models available to you and try again.",
        "key_model_access_denied", "403", "model"),
     Result.AUTH, Cause.GATEWAY_MODEL_ACCESS, "allowed models"),
    ("litellm-team-model-access-older", 401, _litellm(
        "team not allowed to access model. This team can only access models=['gw-a']. Tried "
        "to access gpt-4o", "team_model_access_denied", "401", "model"),
     Result.AUTH, Cause.GATEWAY_MODEL_ACCESS, "team"),
    ("litellm-key-model-access-words", 401, _litellm(
        "key not allowed to access model. This key can only access models=['code-max', "
        "'code-fast']. Tried to access coder", "None", "401", "model"),
     Result.AUTH, Cause.GATEWAY_MODEL_ACCESS, "allowed models"),
    ("litellm-project-model-access", 403, _litellm(
        "The requested model 'm' is not available for this API key, or the model name is "
        "invalid.", "project_model_access_denied", "403", "model"),
     Result.AUTH, Cause.GATEWAY_MODEL_ACCESS, "allowed models"),
    # a spent budget: 400 in older versions, 429 now
    ("litellm-budget-400", 400, _litellm(
        "Budget has been exceeded! Current cost: 5.0, Max budget: 1.0", "budget_exceeded", "400"),
     Result.RATE_LIMITED, Cause.GATEWAY_BUDGET_EXCEEDED, "max_budget"),
    ("litellm-budget-429", 429, _litellm(
        "Budget has been exceeded! Key=sk-...ab12 Current cost: 5.0, Max budget: 1.0",
        "budget_exceeded", "429"),
     Result.RATE_LIMITED, Cause.GATEWAY_BUDGET_EXCEEDED, "budget_duration"),
    ("litellm-budget-user-words", 400, _litellm(
        "ExceededBudget: User=u1 over budget. Spend=3.2, Budget=3.0", "None", "400"),
     Result.RATE_LIMITED, Cause.GATEWAY_BUDGET_EXCEEDED, "max_budget"),
    # OpenRouter
    ("openrouter-invalid-model", 400, _json({"error": {
        "message": "openai/gpt-9-turbo is not a valid model ID", "code": 400},
        "user_id": "user_2abc"}),
     Result.NOT_FOUND, Cause.GATEWAY_MODEL_NOT_ROUTED, "GET"),
    ("openrouter-no-endpoints", 404, _json({"error": {
        "message": "No endpoints found for anthropic/claude-3-opus-nope.", "code": 404}}),
     Result.NOT_FOUND, Cause.GATEWAY_NO_ENDPOINT, "provider"),
    ("openrouter-no-tool-endpoints", 404, _json({"error": {
        "message": "No endpoints found that support tool use. To learn more about provider "
                   "routing, visit: https://openrouter.ai/docs/provider-routing", "code": 404}}),
     Result.NOT_FOUND, Cause.GATEWAY_NO_ENDPOINT, "data-policy"),
]

# Bodies that are not a gateway's own error, though they carry its words somewhere.
NOT_GATEWAY = [
    # our own prompt echoed deep in a provider's message
    ("echo-deep", 400, _json({"error": {"message": "Invalid value for 'messages[0].content': "
                                                   + "x" * 300 + " Invalid model name passed "
                                                   "in model=m budget has been exceeded"}})),
    # a type we do not know, and words we do not know
    ("other-type", 400, _litellm("temperature must be below 2", "invalid_request_error", "400")),
    ("not-json", 400, b"No connected db."),
    ("json-array", 400, b'["No connected db."]'),
    ("type-not-text", 400, _json({"error": {"type": ["budget_exceeded"], "message": 7}})),
    ("success-status", 200, _litellm("No connected db.", "no_db_connection", "400")),
]


@pytest.mark.parametrize(("status", "body", "result", "cause", "hint"),
                         [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
async def test_gateway_error_is_classified_by_meaning(scripted_server, status: int, body: bytes,
                                                      result: Result, cause: Cause,
                                                      hint: str) -> None:
    server = await scripted_server(Script(status=status, headers={
        "Content-Type": "application/json"}, steps=[(0, body)]))
    config = make_config(server.url, target={"api_key": CANARY})
    probed, registry = await probe_once(server, target={"api_key": CANARY})
    assert (probed.result, probed.cause, probed.status) == (result, cause, status), probed.reason
    assert registry.get_sample_value("llm_probe_requests_total", {
        "target": "t", "model": "m", "probe": "short", "result": result.value}) == 1
    words = hint_for(probed, config.series[0], env={})
    assert hint in words, words
    assert "unsupported" not in words and "parameter (temperature" not in words
    assert CANARY not in probed.reason + words


@pytest.mark.parametrize(("status", "body"), [row[1:] for row in NOT_GATEWAY],
                         ids=[row[0] for row in NOT_GATEWAY])
def test_other_bodies_are_not_gateway_errors(status: int, body: bytes) -> None:
    assert gateway_cause(status, body) is None


def test_every_gateway_cause_has_a_result_and_a_hint_of_its_own() -> None:
    config = make_config(target={"api_key": CANARY})
    generic = {}
    for cause, result in GATEWAY_RESULTS.items():
        error = HTTPStatusError(400, "HTTP 400: x", cause=cause)
        assert error.outcome() is result
        failed = ProbeResult("t", "m", "short", result, reason="x", cause=cause)
        generic[cause] = hint_for(failed, config.series[0], env={})
    gateway = {c: h for c, h in generic.items() if c.value.startswith("gateway_")}
    assert len(set(gateway.values())) == len(gateway), "each gateway cause has its own hint"


async def test_a_gateway_body_echoing_the_key_is_redacted(scripted_server) -> None:
    """LiteLLM (older versions) echoed the key it refused; the reason never carries it, whole,
    in part or percent-encoded."""
    encoded = "".join(f"%{b:02X}" for b in CANARY.encode())
    body = _litellm(f"Authentication Error, Invalid proxy server token passed. Received API "
                    f"Key = {CANARY}, 'Bearer {CANARY}', {encoded}, Key Hash (Token) "
                    f"={CANARY[3:]}", "auth_error", "401")
    server = await scripted_server(Script(status=401, steps=[(0, body)]))
    config = parse_config({"probes": {"short": {"prompt": "hi"}}, "targets": [
        {"name": "t", "base_url": server.url, "models": ["m"], "api_key": CANARY}]},
        env={}, redactor=REDACTOR)  # as load_config does: the process's redactor learns it
    async with Prober() as prober:
        probed = await prober.probe(config.series[0])
    assert probed.cause is Cause.GATEWAY_KEY_REJECTED
    assert CANARY not in probed.reason and encoded not in probed.reason
    assert CANARY[3:15] not in probed.reason


async def test_a_gateway_error_is_never_taken_for_a_refused_parameter(scripted_server) -> None:
    """The gateway's words come first: an unrouted model is not adapted away and retried."""
    body = _litellm(f"/chat/completions: Invalid model name passed in model=m. {HINT} "
                    "Unsupported parameter: 'max_tokens' is not supported with this model. "
                    "Use 'max_completion_tokens' instead.", "invalid_request_error", "400",
                    "max_tokens")
    server = await scripted_server(Script(status=400, steps=[(0, body)]))
    probed, _ = await probe_once(server)
    assert probed.cause is Cause.GATEWAY_MODEL_NOT_ROUTED
    assert len(server.requests) == 1  # no adapted retry


def test_a_huge_hostile_body_is_read_in_bounded_time() -> None:
    body = b'{"error": {"message": "' + b"a" * (4 * MAX_BODY) + b'"}}'
    started = time.perf_counter()
    for _ in range(20):
        assert gateway_cause(400, body) is None
    assert time.perf_counter() - started < 1.0
    nested = b'{"error": ' * 2000 + b"1" + b"}" * 2000
    assert gateway_cause(400, nested) is None
