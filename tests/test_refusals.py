"""The providers' refusals, verbatim as users reported them, → (parameter, action).

Every body below is copied from the issue named next to it (collected in the project's research
notes on provider request rules); the parser must read each one without reading anything else.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.providers.refusals import Action, parse_refusal
from exporter.providers.rules import Knob, Param


def openai(message: str, param: str | None, code: str | None) -> bytes:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": param, "code": code}}).encode()


def anthropic(message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                  "message": message},
                       "request_id": "req_011CTest"}).encode()


def gemini(message: str) -> bytes:
    return json.dumps({"error": {"code": 400, "message": message,
                                 "status": "INVALID_ARGUMENT"}}).encode()


def bedrock(message: str) -> bytes:
    return json.dumps({"message": message}).encode()


CASES: list[tuple[str, bytes, dict[str, Any]]] = [
    # OpenAI chat completions (griptape-ai/ComfyUI-Griptape#312, gpt-5)
    ("max_tokens renamed", openai(
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter"),
     {"param": Param.MAX_TOKENS, "action": Action.RENAME, "to": Param.MAX_COMPLETION_TOKENS}),
    # holoviz/lumen#1087 (temperature 0.2)
    ("temperature default only", openai(
        "Unsupported value: 'temperature' does not support 0.2 with this model. Only the "
        "default (1) value is supported.", "temperature", "unsupported_value"),
     {"param": Param.TEMPERATURE, "action": Action.SET, "value": 1}),
    # soberlemur/autopo#57 (o1/o3-mini)
    ("temperature not supported", openai(
        "Unsupported parameter: 'temperature' is not supported with this model.",
        "temperature", "unsupported_parameter"),
     {"param": Param.TEMPERATURE, "action": Action.DROP}),
    # OpenHands/software-agent-sdk#1837: gpt-5.2 with code null
    ("temperature code null", openai(
        "Unsupported parameter: 'temperature' is not supported with this model.",
        "temperature", None), {"param": Param.TEMPERATURE, "action": Action.DROP}),
    # HIllya51/LunaTranslator#1842
    ("top_p", openai("Unsupported parameter: 'top_p' is not supported with this model.",
                     "top_p", "unsupported_parameter"),
     {"param": Param.TOP_P, "action": Action.DROP}),
    # egoist/chatwise-releases#1257 (gpt-5.2-chat)
    ("effort form 1", openai(
        "Unsupported value: 'reasoning_effort' does not support 'high' with this model. "
        "Supported values are: 'medium'.", "reasoning_effort", "unsupported_value"),
     {"param": Param.REASONING_EFFORT, "action": Action.CHOOSE, "choices": ("medium",),
      "value": "high"}),
    # livekit/agents#3966 (gpt-5.1, null)
    ("effort null", openai(
        "Unsupported value: 'reasoning_effort' does not support null with this model. "
        "Supported values are: 'none', 'low', 'medium', and 'high'.", "reasoning_effort",
        "unsupported_value"),
     {"param": Param.REASONING_EFFORT, "choices": ("none", "low", "medium", "high")}),
    # anomalyco/opencode#4451 (gpt-5.1 on Responses)
    ("effort form 2", openai(
        "Unsupported value: 'minimal' is not supported with the 'gpt-5.1' model. Supported "
        "values are: 'none', 'low', 'medium', and 'high'.", "reasoning.effort",
        "unsupported_value"),
     {"param": Param.REASONING_EFFORT, "action": Action.CHOOSE, "value": "minimal",
      "choices": ("none", "low", "medium", "high")}),
    # BerriAI/litellm#16704 (Azure)
    ("effort form 3 azure", openai(
        "Invalid value: 'none'. Supported values are: 'low', 'medium', and 'high'.",
        "reasoning_effort", "invalid_value"),
     {"param": Param.REASONING_EFFORT, "action": Action.CHOOSE,
      "choices": ("low", "medium", "high")}),
    # vectorize-io/hindsight#58
    ("max_output_tokens minimum", openai(
        "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but "
        "got 10 instead.", "max_output_tokens", "integer_below_min_value"),
     {"param": Param.MAX_OUTPUT_TOKENS, "action": Action.RAISE, "value": 16}),
    # OpenHands/software-agent-sdk#755 (param null)
    ("responses moved", openai(
        "Unsupported parameter: 'reasoning_effort'. In the Responses API, this parameter has "
        "moved to 'reasoning.effort'. Try again with the new parameter. See the API "
        "documentation for more information: "
        "https://platform.openai.com/docs/api-reference/responses/create.", None,
        "unsupported_parameter"),
     {"param": Param.REASONING_EFFORT, "action": Action.RENAME, "to_name": "reasoning.effort"}),
    # Laisky/one-api#120 (gpt-5-chat-latest)
    ("effort on a chat model", openai(
        "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
        "reasoning.effort", "unsupported_parameter"),
     {"param": Param.REASONING_EFFORT, "action": Action.DROP}),
    # openai/openai-python#1724 (Azure 2024-08-01-preview)
    ("azure max_completion_tokens", openai(
        "Unrecognized request argument supplied: max_completion_tokens", None, None),
     {"param": Param.MAX_COMPLETION_TOKENS, "action": Action.RENAME, "to": Param.MAX_TOKENS}),
    # agno-agi/agno#1066
    ("azure stream_options", openai("Unknown parameter: 'stream_options'.", "stream_options",
                                    "unknown_parameter"),
     {"param": Param.STREAM_OPTIONS, "action": Action.DROP}),
    # songquanpeng/one-api#1423
    ("azure stream_options supplied", openai(
        "Unrecognized request argument supplied: stream_options. Please contact us through an "
        "Azure support request at: https://go.microsoft.com/fwlink/?linkid=2213926 for further "
        "questions.", None, None), {"param": Param.STREAM_OPTIONS, "action": Action.DROP}),
    # animalnots/BetterChatGPT-PLUS#62: streaming refused is not adaptable
    ("stream refused", openai(
        "Unsupported value: 'stream' does not support true with this model. Only the default "
        "(false) value is supported.", "stream", "unsupported_value"),
     {"param": Param.OTHER, "action": Action.UNSUPPORTED}),
    # Anthropic (themaximalist/llm.js#30; liuw1535/antigravity2api-nodejs#150; one-hub#529)
    ("claude budget minimum", anthropic(
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"),
     {"param": Param.THINKING_BUDGET, "action": Action.RAISE, "value": 1024}),
    ("claude budget below cap", anthropic(
        "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
        "documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
        "#max-tokens-and-context-window-size"),
     {"param": Param.MAX_TOKENS, "action": Action.RAISE}),
    ("claude temperature with thinking", anthropic(
        "`temperature` may only be set to 1 when thinking is enabled. Please consult our "
        "documentation at https://docs.anthropic.com/en/docs/build-with-claude/"
        "extended-thinking#important-considerations-when-using-extended-thinking"),
     {"param": Param.TEMPERATURE, "action": Action.SET, "value": 1}),
    # quarkiverse/quarkus-langchain4j#1812
    ("claude top_k", anthropic(
        "`top_k` must be unset when thinking is enabled. Please consult our documentation at "
        "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
        "#important-considerations-when-using-extended-thinking"),
     {"param": Param.TOP_K, "action": Action.DROP}),
    # langfuse/langfuse#9882
    ("claude temperature and top_p", anthropic(
        "`temperature` and `top_p` cannot both be specified for this model. Please use only "
        "one."), {"param": Param.TOP_P, "action": Action.DROP}),
    # BitterSecurity/Decepticon#107 (claude-opus-4-7)
    ("claude temperature deprecated", anthropic("`temperature` is deprecated for this model."),
     {"param": Param.TEMPERATURE, "action": Action.DROP}),
    # earendil-works/pi#3297
    ("claude adaptive only", anthropic(
        "\"thinking.type.enabled\" is not supported for this model. Use "
        "\"thinking.type.adaptive\" and \"output_config.effort\" to control thinking "
        "behavior."), {"param": Param.THINKING, "action": Action.SWITCH, "knob": Knob.LEVEL}),
    # anthropics/claude-code#51212
    ("claude no adaptive", anthropic("adaptive thinking is not supported on this model"),
     {"param": Param.THINKING, "action": Action.SWITCH, "knob": Knob.BUDGET}),
    # anthropics/claude-code#30010; mirrorange/clove#40
    ("claude no effort", anthropic("This model does not support the effort parameter."),
     {"param": Param.REASONING_EFFORT, "action": Action.DROP}),
    ("claude no output_config", anthropic("output_config: Extra inputs are not permitted"),
     {"param": Param.REASONING_EFFORT, "action": Action.DROP}),
    # Gemini (snailyp/gemini-balance#206; earendil-works/pi#2838; RooCodeInc/Roo-Code#4399;
    # sterlp/eclipse-peon-ai#115; egoist/chatwise-releases#1206; immersive-translate#2976)
    ("gemini budget 0", gemini("Budget 0 is invalid. This model only works in thinking mode."),
     {"param": Param.THINKING, "action": Action.UNSUPPORTED}),
    ("gemini budget range", gemini(
        "The thinking budget 128 is invalid. Please choose a value between 512 and 24576."),
     {"param": Param.THINKING_BUDGET, "action": Action.RANGE, "low": 512, "high": 24576}),
    ("gemini budget old form", gemini("The thinking budget (52428) is invalid."),
     {"param": Param.THINKING_BUDGET, "action": Action.RANGE, "value": 52428}),
    ("gemini budget and level", gemini(
        "You can only set only one of thinking budget and thinking level."),
     {"param": Param.THINKING_BUDGET, "action": Action.DROP}),
    ("gemini level refused", gemini(
        "Thinking level MEDIUM is not supported for this model. Please retry with other "
        "thinking level."), {"param": Param.REASONING_EFFORT, "action": Action.CHOOSE,
                             "value": "medium"}),
    ("gemini level on 2.5", gemini("Thinking level is not supported for this model."),
     {"param": Param.THINKING, "action": Action.SWITCH, "knob": Knob.BUDGET}),
    ("gemini no thinking", gemini("thinking_config is not supported."),
     {"param": Param.THINKING, "action": Action.UNSUPPORTED}),
    ("gemini vertex range", gemini(
        "Unable to submit request because thinking_budget is out of range; supported values "
        "are integers from 1 to 24576. Learn more: "
        "https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/gemini"),
     {"param": Param.THINKING_BUDGET, "action": Action.RANGE, "low": 1, "high": 24576}),
    ("gemini thoughts without thinking", gemini(
        "Unable to submit request because Thinking_config.include_thoughts is only enabled "
        "when thinking is enabled.. Learn more: https://cloud.google.com/vertex-ai/"),
     {"param": Param.SHOW_THOUGHTS, "action": Action.DROP}),
    # Bedrock: Claude's words behind a prefix (LibreChat#8346; openclaw/openclaw#73663)
    ("bedrock budget", bedrock("The model returned the following errors: "
                               "thinking.enabled.budget_tokens: Input should be greater than "
                               "or equal to 1024"),
     {"param": Param.THINKING_BUDGET, "action": Action.RAISE, "value": 1024}),
    ("bedrock wrapped json", bedrock(
        "The model returned the following errors: {\"type\":\"error\",\"request_id\":"
        "\"req_01\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"`temperature` "
        "is deprecated for this model.\"}}"),
     {"param": Param.TEMPERATURE, "action": Action.DROP}),
    ("bedrock top_p", bedrock("The model returned the following errors: top_p must be unset "
                              "when thinking is enabled."),
     {"param": Param.TOP_P, "action": Action.DROP}),
    # charmbracelet/crush#946
    ("bedrock over limit", bedrock("The maximum tokens you requested exceeds the model limit "
                                   "of 32768"),
     {"param": Param.MAX_TOKENS, "action": Action.LOWER, "value": 32767}),
    # Ollama (server/routes.go; api/types.go)
    ("ollama no thinking", b'{"error":"\\"qwen2.5:7b\\" does not support thinking"}',
     {"param": Param.THINKING, "action": Action.UNSUPPORTED}),
    ("ollama think value", b'{"error":"invalid think value: \\"ultra\\" (must be \\"high\\", '
                           b'\\"medium\\", \\"low\\", \\"max\\", true, or false)"}',
     {"param": Param.REASONING_EFFORT, "action": Action.CHOOSE,
      "choices": ("high", "medium", "low", "max")}),
    # LiteLLM proxy (BerriAI/litellm#33738; chatboxai/chatbox#2111), code a string, param null
    ("litellm temperature", json.dumps({"error": {
        "message": "litellm.UnsupportedParamsError: gpt-5 models (including gpt-5-codex) don't "
                   "support temperature=0.2. Only temperature=1 is supported. For gpt-5.1, "
                   "temperature is supported when reasoning_effort='none' (or not specified, "
                   "as it defaults to 'none'). To drop unsupported params set "
                   "`litellm.drop_params = True`\nReceived Model Group=gpt-5-nano-env\n"
                   "Available Model Group Fallbacks=None",
        "type": "invalid_request_error", "param": None, "code": "400"}}).encode(),
     {"param": Param.TEMPERATURE, "action": Action.SET, "value": 1}),
    ("litellm params", json.dumps({"error": {
        "message": "litellm.UnsupportedParamsError: gemini does not support parameters: "
                   "['presence_penalty'], for model=gemini-2.0-flash-001. To drop these, set "
                   "`litellm.drop_params=True`", "type": None, "param": None,
        "code": "400"}}).encode(), {"param": Param.PRESENCE_PENALTY, "action": Action.DROP}),
    ("litellm wrapping bedrock", json.dumps({"error": {
        "message": "litellm.BadRequestError: BedrockException - validationException "
                   "{\"message\":\"The model returned the following errors: top_p must be "
                   "unset when thinking is enabled.\"}", "type": None, "param": None,
        "code": "400"}}).encode(), {"param": Param.TOP_P, "action": Action.DROP}),
    # OpenRouter: the upstream body in metadata.raw (vectorize-io/hindsight#58)
    ("openrouter raw", json.dumps({"error": {
        "message": "Provider returned error", "code": 400, "metadata": {
            "raw": openai("Invalid 'max_output_tokens': integer below minimum value. Expected a "
                          "value >= 16, but got 10 instead.", "max_output_tokens",
                          "integer_below_min_value").decode(),
            "provider_name": "Azure"}}, "user_id": "user_1"}).encode(),
     {"param": Param.MAX_OUTPUT_TOKENS, "action": Action.RAISE, "value": 16}),
    # Gemini without alt=sse answers a one-element array
    ("gemini array", json.dumps([json.loads(gemini(
        "Budget 0 is invalid. This model only works in thinking mode."))]).encode(),
     {"param": Param.THINKING, "action": Action.UNSUPPORTED}),
    # The exporter's old rule: any 400 naming stream_options
    ("vllm stream_options", b'{"error": {"message": "Unrecognized request argument: '
                            b'stream_options"}}',
     {"param": Param.STREAM_OPTIONS, "action": Action.DROP}),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refusal_is_read_as_the_provider_meant_it(body: bytes, expected: dict[str, Any]) -> None:
    refusal = parse_refusal(400, body)
    assert refusal is not None
    for field, value in expected.items():
        assert getattr(refusal, field) == value, (field, refusal)
    assert refusal.message  # the server's words travel with it (redacted, cut)


@pytest.mark.parametrize("body", [
    b'{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}',
    b'{"error": {"code": 400, "message": "Request contains an invalid argument.", '
    b'"status": "INVALID_ARGUMENT"}}',
    b"<html>bad gateway</html>", b"", b"[]", b"null",
])
def test_other_errors_are_not_refusals(body: bytes) -> None:
    assert parse_refusal(400, body) is None


def test_only_client_errors_are_refusals() -> None:
    body = openai("Unsupported parameter: 'top_p' is not supported with this model.", "top_p",
                  "unsupported_parameter")
    assert parse_refusal(500, body) is None and parse_refusal(429, body) is None
    assert parse_refusal(422, body) is not None


def test_a_key_in_the_message_is_redacted() -> None:
    from exporter.log import REDACTOR

    REDACTOR.update(["sk-secret-refusal-0123456789"])
    body = openai("Unsupported parameter: 'top_p' is not supported with this model. key "
                  "sk-secret-refusal-0123456789", "top_p", "unsupported_parameter")
    refusal = parse_refusal(400, body)
    assert refusal is not None and "sk-secret-refusal" not in refusal.message
