"""The simulator refuses what the hosted providers refuse, in their words, over real HTTP.

Models named like a hosted family (or aliased to one with `family:`) get the provider's
validation; every other name is served as before. The bodies are the providers' own (research
notes on provider request rules, with their sources).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from exporter.simulator import SIM_RECORDS
from tests.sim_support import KEY, auth_headers, post, profile, simulators

MODELS = {name: profile(reasoning_tokens=64) for name in (
    "gpt-5-mini", "gpt-5.1", "o3", "openai/gpt-5-mini", "claude-sonnet-4-5", "claude-opus-4-7",
    "claude-opus-4-6", "gemini-2.5-pro", "gemini-2.5-flash-lite", "gemini-2.5-flash",
    "gemini-3-pro-preview", "gemini-2.0-flash", "llama3.2", "qwen3:8b", "sim",
    "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "us.anthropic.claude-opus-4-7-v1:0",
    "gpt-5.4", "gpt-5.6-terra", "gpt-6-astra", "gpt-6-sol", "gpt-5.5-pro", "claude-sonnet-5",
    "claude-fable-5", "claude-fable-5-1", "gemini-3.7-flash", "gemini-3.5-flash",
    "qwen3-coder:30b", "us.openai.gpt-5.6-sol-v1:0", "openai.gpt-oss-120b-1:0",
    "us.amazon.nova-2-lite-v1:0", "us.amazon.nova-pro-v1:0",
    "global.anthropic.claude-sonnet-5-v1:0")}
MODELS["prod-chat"] = profile(reasoning_tokens=64, family="gpt-5-mini")

USER = [{"role": "user", "content": "Hi"}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
CLAUDE_TOOLS = [{"name": "get_weather", "input_schema": SCHEMA}]
CONVERSE_TOOLS = {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {
    "json": SCHEMA}}}], "toolChoice": {"any": {}}}
GEMINI_USER = [{"role": "user", "parts": [{"text": "Hi"}]}]


def chat(model: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return "/chat/completions", {"model": model, "messages": USER, "stream": True, **fields}


def responses(model: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return "/responses", {"model": model, "input": "Hi", "stream": True, **fields}


def messages(model: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return "/messages", {"model": model, "messages": USER, "stream": True, "max_tokens": 2048,
                         **fields}


def gemini(model: str, **config: Any) -> tuple[str, dict[str, Any]]:
    return (f"//v1beta/models/{model}:streamGenerateContent?alt=sse",
            {"contents": GEMINI_USER, "generationConfig": config})


def converse(model: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return (f"//model/{model.replace(':', '%3A')}/converse-stream",
            {"messages": [{"role": "user", "content": [{"text": "Hi"}]}], **fields})


def ollama(model: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return "//api/chat", {"model": model, "messages": USER, **fields}


def tools_refused(model: str, end: str) -> dict[str, Any]:
    return openai_error(f"Function tools with reasoning_effort are not supported for {model} in "
                        f"/v1/chat/completions. {end}", "reasoning_effort", None)


OR_NONE = "To use function tools, use /v1/responses or set reasoning_effort to 'none'."


def bedrock_openai(code: str, message: str, param: str) -> dict[str, Any]:
    inner = json.dumps({"error": {"code": code, "message": message, "param": param,
                                  "type": "invalid_request_error"}}, separators=(",", ":"))
    return {"message": "The model returned the following errors: " + inner}


def openai_error(message: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": code}}


def claude_error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def google_error(message: str) -> dict[str, Any]:
    return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}


DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
REFUSED: list[tuple[str, str, tuple[str, dict[str, Any]], dict[str, Any]]] = [
    ("gpt-5 max_tokens", "openai-chat", chat("gpt-5-mini", max_tokens=64), openai_error(
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter")),
    ("an alias behaves like its family", "openai-chat", chat("prod-chat", max_tokens=64),
     openai_error("Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                  "'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter")),
    ("a gateway prefix", "openai-chat", chat("openai/gpt-5-mini", max_tokens=64), openai_error(
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter")),
    ("gpt-5 temperature", "openai-chat", chat("gpt-5-mini", temperature=0.2), openai_error(
        "Unsupported value: 'temperature' does not support 0.2 with this model. Only the default "
        "(1) value is supported.", "temperature", "unsupported_value")),
    ("gpt-5 top_p", "openai-chat", chat("gpt-5-mini", top_p=0.9), openai_error(
        "Unsupported parameter: 'top_p' is not supported with this model.", "top_p",
        "unsupported_parameter")),
    ("gpt-5 effort none", "openai-chat", chat("gpt-5-mini", reasoning_effort="none"),
     openai_error("Unsupported value: 'reasoning_effort' does not support 'none' with this "
                  "model. Supported values are: 'minimal', 'low', 'medium', and 'high'.",
                  "reasoning_effort", "unsupported_value")),
    ("o3 minimal", "openai-chat", chat("o3", reasoning_effort="minimal"), openai_error(
        "Unsupported value: 'reasoning_effort' does not support 'minimal' with this model. "
        "Supported values are: 'low', 'medium', and 'high'.", "reasoning_effort",
        "unsupported_value")),
    ("gpt-5.1 temperature while reasoning", "openai-chat",
     chat("gpt-5.1", temperature=0.2, reasoning_effort="low"), openai_error(
         "Unsupported value: 'temperature' does not support 0.2 with this model. Only the "
         "default (1) value is supported.", "temperature", "unsupported_value")),
    ("responses temperature", "openai-responses", responses("gpt-5-mini", temperature=0.2),
     openai_error("Unsupported parameter: 'temperature' is not supported with this model.",
                  "temperature", "unsupported_parameter")),
    ("responses effort", "openai-responses",
     responses("gpt-5.1", reasoning={"effort": "minimal"}), openai_error(
         "Unsupported value: 'minimal' is not supported with the 'gpt-5.1' model. Supported "
         "values are: 'none', 'low', 'medium', and 'high'.", "reasoning.effort",
         "unsupported_value")),
    ("responses minimum", "openai-responses", responses("gpt-5-mini", max_output_tokens=10),
     openai_error("Invalid 'max_output_tokens': integer below minimum value. Expected a value "
                  ">= 16, but got 10 instead.", "max_output_tokens", "integer_below_min_value")),
    ("responses moved", "openai-responses", responses("gpt-5-mini", reasoning_effort="low"),
     openai_error("Unsupported parameter: 'reasoning_effort'. In the Responses API, this "
                  "parameter has moved to 'reasoning.effort'. Try again with the new "
                  "parameter. See the API documentation for more information: "
                  "https://platform.openai.com/docs/api-reference/responses/create.", None,
                  "unsupported_parameter")),
    ("claude budget minimum", "anthropic-messages",
     messages("claude-sonnet-4-5", thinking={"type": "enabled", "budget_tokens": 512}),
     claude_error("thinking.enabled.budget_tokens: Input should be greater than or equal to "
                  "1024")),
    ("claude budget above cap", "anthropic-messages",
     messages("claude-sonnet-4-5", max_tokens=1024,
              thinking={"type": "enabled", "budget_tokens": 1024}),
     claude_error("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult "
                  f"our documentation at {DOCS}#max-tokens-and-context-window-size")),
    ("claude 4.7 enabled", "anthropic-messages",
     messages("claude-opus-4-7", thinking={"type": "enabled", "budget_tokens": 1024}),
     claude_error("\"thinking.type.enabled\" is not supported for this model. Use "
                  "\"thinking.type.adaptive\" and \"output_config.effort\" to control thinking "
                  "behavior.")),
    ("claude 4.5 adaptive", "anthropic-messages",
     messages("claude-sonnet-4-5", thinking={"type": "adaptive"}),
     claude_error("adaptive thinking is not supported on this model")),
    ("claude 4.5 effort", "anthropic-messages",
     messages("claude-sonnet-4-5", output_config={"effort": "low"}),
     claude_error("This model does not support the effort parameter.")),
    ("claude 4.7 temperature", "anthropic-messages", messages("claude-opus-4-7", temperature=0.2),
     claude_error("`temperature` is deprecated for this model.")),
    ("claude temperature with thinking", "anthropic-messages",
     messages("claude-sonnet-4-5", temperature=0.5,
              thinking={"type": "enabled", "budget_tokens": 1024}),
     claude_error("`temperature` may only be set to 1 when thinking is enabled. Please consult "
                  f"our documentation at {DOCS}"
                  "#important-considerations-when-using-extended-thinking")),
    ("claude top_k with thinking", "anthropic-messages",
     messages("claude-opus-4-6", top_k=40, thinking={"type": "adaptive"}),
     claude_error(f"`top_k` must be unset when thinking is enabled. Please consult our "
                  f"documentation at {DOCS}"
                  "#important-considerations-when-using-extended-thinking")),
    ("claude temperature and top_p", "anthropic-messages",
     messages("claude-sonnet-4-5", temperature=0.5, top_p=0.9),
     claude_error("`temperature` and `top_p` cannot both be specified for this model. Please "
                  "use only one.")),
    ("gemini 2.5 pro off", "gemini", gemini("gemini-2.5-pro", thinkingConfig={
        "thinkingBudget": 0}),
     google_error("Budget 0 is invalid. This model only works in thinking mode.")),
    ("gemini budget range", "gemini", gemini("gemini-2.5-flash-lite", thinkingConfig={
        "thinkingBudget": 128}),
     google_error("The thinking budget 128 is invalid. Please choose a value between 512 and "
                  "24576.")),
    ("gemini level on 2.5", "gemini", gemini("gemini-2.5-flash", thinkingConfig={
        "thinkingLevel": "LOW"}), google_error("Thinking level is not supported for this model.")),
    ("gemini 3 medium", "gemini", gemini("gemini-3-pro-preview", thinkingConfig={
        "thinkingLevel": "MEDIUM"}),
     google_error("Thinking level MEDIUM is not supported for this model. Please retry with "
                  "other thinking level.")),
    ("gemini both", "gemini", gemini("gemini-3-pro-preview", thinkingConfig={
        "thinkingLevel": "LOW", "thinkingBudget": 1024}),
     google_error("You can only set only one of thinking budget and thinking level.")),
    ("gemini 2.0", "gemini", gemini("gemini-2.0-flash", thinkingConfig={"thinkingBudget": 512}),
     google_error("thinking_config is not supported.")),
    ("ollama no thinking", "ollama-chat", ollama("llama3.2", think=True),
     {"error": "\"llama3.2\" does not support thinking"}),
    ("ollama think value", "ollama-chat", ollama("qwen3:8b", think="ultra"),
     {"error": "invalid think value: \"ultra\" (must be \"high\", \"medium\", \"low\", \"max\", "
               "true, or false)"}),
    ("bedrock budget", "bedrock-converse", converse(
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        additionalModelRequestFields={"thinking": {"type": "enabled", "budget_tokens": 100}}),
     {"message": "The model returned the following errors: thinking.enabled.budget_tokens: "
                 "Input should be greater than or equal to 1024"}),
    ("bedrock 4.7 temperature", "bedrock-converse", converse(
        "us.anthropic.claude-opus-4-7-v1:0", inferenceConfig={"temperature": 0.2}),
     {"message": "The model returned the following errors: {\"type\":\"error\",\"request_id\":"
                 "\"req_sim\",\"error\":{\"type\":\"invalid_request_error\",\"message\":"
                 "\"`temperature` is deprecated for this model.\"}}"}),
    # -- July–November 2026 (the bodies of tests/data/refusals) --------------------------------
    ("gpt-5.6 tools at its default effort", "openai-chat",
     chat("gpt-5.6-terra", tools=CHAT_TOOLS), tools_refused("gpt-5.6-terra", OR_NONE)),
    ("gpt-6-sol tools with an effort", "openai-chat",
     chat("gpt-6-sol", tools=CHAT_TOOLS, reasoning_effort="low"), tools_refused("gpt-6-sol",
                                                                                OR_NONE)),
    ("gpt-5.4 tools with an effort", "openai-chat",
     chat("gpt-5.4", tools=CHAT_TOOLS, reasoning_effort="low"),
     tools_refused("gpt-5.4", "Please use /v1/responses instead.")),
    ("gpt-6-astra tools at its default effort", "openai-chat",
     chat("gpt-6-astra", tools=CHAT_TOOLS), tools_refused("gpt-6-astra", OR_NONE)),
    ("gpt-6-astra has no none", "openai-chat",
     chat("gpt-6-astra", tools=CHAT_TOOLS, reasoning_effort="none"), openai_error(
         "Unsupported value: 'reasoning_effort' does not support 'none' with this model. "
         "Supported values are: 'low', 'medium', 'high', and 'xhigh'.", "reasoning_effort",
         "unsupported_value")),
    ("gpt-5.6 max on chat", "openai-chat", chat("gpt-5.6-terra", reasoning_effort="max"),
     openai_error("Unsupported value: 'reasoning_effort' does not support 'max' with this "
                  "model. Supported values are: 'none', 'low', 'medium', 'high', and 'xhigh'.",
                  "reasoning_effort", "unsupported_value")),
    ("a pro model on chat", "openai-chat", chat("gpt-5.5-pro", max_completion_tokens=64),
     openai_error("This model is only supported in v1/responses and not in "
                  "v1/chat/completions.", "model", None)),
    ("responses minimal on gpt-6-astra", "openai-responses",
     responses("gpt-6-astra", reasoning={"effort": "minimal"}), openai_error(
         "Unsupported value: 'minimal' is not supported with the 'gpt-6-astra' model. "
         "Supported values are: 'low', 'medium', 'high', 'xhigh', and 'max'.",
         "reasoning.effort", "unsupported_value")),
    ("claude 5 forced tool at its default thinking", "anthropic-messages",
     messages("claude-sonnet-5", tools=CLAUDE_TOOLS, tool_choice={"type": "any"}),
     claude_error("Thinking may not be enabled when tool_choice forces tool use.")),
    ("fable 5.1 forced tool", "anthropic-messages",
     messages("claude-fable-5-1", tools=CLAUDE_TOOLS, tool_choice={"type": "tool",
                                                                  "name": "get_weather"}),
     claude_error("tool_choice: type \"tool\" and \"any\" are not supported for this model.")),
    ("fable 5 thinking off", "anthropic-messages",
     messages("claude-fable-5", thinking={"type": "disabled"}),
     claude_error("\"thinking.type.disabled\" is not supported for this model.")),
    ("gemini 3.7 flash minimal", "gemini", gemini("gemini-3.7-flash", thinkingConfig={
        "thinkingLevel": "MINIMAL"}),
     google_error("Thinking level MINIMAL is not supported for this model. Please retry with "
                  "other thinking level.")),
    ("ollama coder has no thinking", "ollama-chat", ollama("qwen3-coder:30b", think=True),
     {"error": "\"qwen3-coder:30b\" does not support thinking"}),
    ("bedrock gpt refuses claude's thinking", "bedrock-converse", converse(
        "us.openai.gpt-5.6-sol-v1:0", additionalModelRequestFields={"thinking": {
            "type": "enabled", "budget_tokens": 1024}}),
     bedrock_openai("unknown_parameter", "Unknown parameter: 'thinking'.", "thinking")),
    ("bedrock gpt refuses the flat effort", "bedrock-converse", converse(
        "us.openai.gpt-5.6-sol-v1:0", additionalModelRequestFields={"reasoning_effort": "low"}),
     bedrock_openai("unknown_parameter", "Unknown parameter: 'reasoning_effort'.",
                    "reasoning_effort")),
    ("bedrock claude 5 forced tool", "bedrock-converse", converse(
        "global.anthropic.claude-sonnet-5-v1:0", toolConfig=CONVERSE_TOOLS),
     {"message": "The model returned the following errors: {\"type\":\"error\",\"request_id\":"
                 "\"req_sim\",\"error\":{\"type\":\"invalid_request_error\",\"message\":"
                 "\"Thinking may not be enabled when tool_choice forces tool use.\"}}"}),
    ("nova 1 has no reasoning", "bedrock-converse", converse(
        "us.amazon.nova-pro-v1:0", additionalModelRequestFields={"reasoningConfig": {
            "type": "enabled", "maxReasoningEffort": "low"}}),
     {"message": "The model returned the following errors: Malformed input request: the "
                 "provided reasoning config value is invalid, please reformat your input and "
                 "try again."}),
]


@pytest.mark.parametrize(("api", "request_", "body"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
async def test_hosted_families_refuse_in_their_providers_words(api, request_, body) -> None:
    path, payload = request_
    async with simulators() as make, aiohttp.ClientSession() as session:
        sim = await make(MODELS, api_key=KEY)
        status, headers, raw = await post(session, sim, path, payload, auth_headers(api))
    assert status == 400
    answer = json.loads(raw)
    if api == "anthropic-messages":
        assert answer.pop("request_id").startswith("req_")
    assert answer == body
    if api == "bedrock-converse":
        assert headers["x-amzn-ErrorType"] == (
            "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/")


ACCEPTED = [
    ("gpt-5 as the exporter asks", "openai-chat",
     chat("gpt-5-mini", max_completion_tokens=256, reasoning_effort="minimal"), 8),
    ("gpt-5.1 samples with effort none", "openai-chat",
     chat("gpt-5.1", max_completion_tokens=256, temperature=0.2), 0),
    ("gpt-5.6 tools with effort none", "openai-chat",
     chat("gpt-5.6-terra", max_completion_tokens=256, tools=CHAT_TOOLS,
          reasoning_effort="none"), 0),
    ("gpt-5.6 reasons by default", "openai-chat",
     chat("gpt-5.6-terra", max_completion_tokens=256), 64),
    ("gpt-5.4 tools at its default none", "openai-chat",
     chat("gpt-5.4", max_completion_tokens=256, tools=CHAT_TOOLS), 0),
    ("responses max on gpt-6-astra", "openai-responses",
     responses("gpt-6-astra", max_output_tokens=256, tools=[{
         "type": "function", "name": "get_weather", "parameters": SCHEMA}],
         reasoning={"effort": "max"}), 128),
    ("claude 5 thinks unasked", "anthropic-messages", messages("claude-sonnet-5"), 64),
    ("claude 5 forced tool with thinking off", "anthropic-messages",
     messages("claude-sonnet-5", tools=CLAUDE_TOOLS, tool_choice={"type": "any"},
              thinking={"type": "disabled"}), 0),
    ("gemini 3.7 flash low", "gemini", gemini("gemini-3.7-flash", thinkingConfig={
        "thinkingLevel": "LOW"}), 16),
    ("gemini 3.5 flash minimal", "gemini", gemini("gemini-3.5-flash", thinkingConfig={
        "thinkingLevel": "MINIMAL"}), 8),
    ("bedrock gpt nested effort", "bedrock-converse", converse(
        "us.openai.gpt-5.6-sol-v1:0", additionalModelRequestFields={"reasoning": {
            "effort": "low"}}), 16),
    ("bedrock gpt-oss flat effort", "bedrock-converse", converse(
        "openai.gpt-oss-120b-1:0", additionalModelRequestFields={"reasoning_effort": "low"}),
     16),
    ("bedrock nova 2 medium with a limit", "bedrock-converse", converse(
        "us.amazon.nova-2-lite-v1:0", inferenceConfig={"maxTokens": 256},
        additionalModelRequestFields={"reasoningConfig": {"type": "enabled",
                                                           "maxReasoningEffort": "medium"}}),
     32),
    ("responses", "openai-responses",
     responses("gpt-5-mini", max_output_tokens=256, reasoning={"effort": "low"}), 16),
    ("claude budget caps thinking", "anthropic-messages",
     messages("claude-sonnet-4-5", max_tokens=2048,
              thinking={"type": "enabled", "budget_tokens": 1024}), 64),
    ("claude without thinking", "anthropic-messages", messages("claude-sonnet-4-5"), 0),
    ("claude adaptive", "anthropic-messages", messages(
        "claude-opus-4-7", thinking={"type": "adaptive", "display": "summarized"},
        output_config={"effort": "low"}), 16),
    ("gemini budget", "gemini", gemini("gemini-2.5-pro", thinkingConfig={
        "thinkingBudget": 128, "includeThoughts": True}), 64),
    ("gemini off", "gemini", gemini("gemini-2.5-flash", thinkingConfig={"thinkingBudget": 0}), 0),
    ("gemini level", "gemini", gemini("gemini-3-pro-preview", thinkingConfig={
        "thinkingLevel": "LOW"}), 16),
    ("ollama level", "ollama-chat", ollama("qwen3:8b", think="low"), 16),
    ("ollama off", "ollama-chat", ollama("llama3.2", think=False), 0),
    ("other names take anything", "openai-chat",
     chat("sim", max_tokens=64, temperature=0.2, top_p=0.5, reasoning_effort="none"), 64),
]


@pytest.mark.parametrize(("api", "request_", "reasoning"), [c[1:] for c in ACCEPTED],
                         ids=[c[0] for c in ACCEPTED])
async def test_accepted_requests_think_as_asked(api, request_, reasoning: int) -> None:
    path, payload = request_
    async with simulators() as make, aiohttp.ClientSession() as session:
        sim = await make(MODELS, api_key=KEY)
        status, _, raw = await post(session, sim, path, payload, auth_headers(api))
        record = sim.app[SIM_RECORDS][-1]
    assert status == 200, raw[:300]
    assert record["outcome"] == "complete"
    # Effort scales the profile's 64 reasoning tokens; a budget caps them; off removes them.
    assert record["reasoning_tokens"] == reasoning
