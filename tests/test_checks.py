"""Answer checks as a table: text checks, structured output and tool calls (jsonschema)."""

from __future__ import annotations

import asyncio
import time

import pytest

from exporter.config import Expect
from exporter.probe.checks import REGEX_TIMEOUT, Observed, run_checks
from exporter.probe.tokens import estimate_tokens
from exporter.result import ToolCall

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CALL = ToolCall("get_weather", '{"city": "Paris"}')


def text(answer: str, finish: str = "stop") -> Observed:
    return Observed(answer, estimate_tokens(answer), finish)


def calls(*made: ToolCall) -> Observed:
    return Observed("", 5, "tool_calls", made)


# (expect, what came back, the reason's words or None when the checks pass)
ROWS = [
    ({"finish_reason": "stop"}, text("x", "length"), "finish_reason: got 'length'"),
    ({"finish_reason": "stop"}, text("x"), None),
    ({"json": True}, text('{"a": 1}'), None),
    ({"json": True}, text('```json\n{"a": 1}\n```'), None),
    ({"json": True}, text("{a: 1}"), "json: the answer does not parse"),
    ({"min_output_tokens": 3}, text("one two three"), None),
    ({"min_output_tokens": 3}, text("one"), "min_output_tokens: got 1"),
    ({"regex": r"^\d+$"}, text("42"), None),
    ({"json_schema": WEATHER}, text('{"city": "Paris"}'), None),
    ({"json_schema": WEATHER}, text('```json\n{"city": "Paris"}\n```'), None),
    ({"json_schema": WEATHER}, text('{"city": 7}'), "7 is not of type 'string' (at city)"),
    ({"json_schema": WEATHER}, text("{}"), "'city' is a required property (at the top level)"),
    ({"json_schema": WEATHER}, text('{"city": "Par'), "json_schema: the answer does not parse"),
    ({"tool_call": {"name": "get_weather"}}, calls(CALL), None),
    ({"tool_call": {"name": "get_weather", "arguments_schema": WEATHER}}, calls(CALL), None),
    ({"tool_call": {"name": "get_weather", "arguments_schema": WEATHER}},
     calls(ToolCall("get_weather", '{"town": "Paris"}')),
     "arguments that do not satisfy arguments_schema: 'city' is a required property"),
    ({"tool_call": {"name": "get_weather"}}, calls(ToolCall("get_weather", '{"city": "Pa')),
     "arguments that are not JSON: '{\"city\": \"Pa'"),
    ({"tool_call": {"name": "get_weather"}}, calls(ToolCall("get_weather_2", "{}")),
     "expected a call of 'get_weather', the model called 'get_weather_2'"),
    ({"tool_call": {"name": "get_weather"}},
     calls(ToolCall("get_time", "{}"), CALL), None),  # the named call among others
    ({"tool_call": {"name": "get_weather"}}, text("It is sunny in Paris."),
     "expected a call of 'get_weather', the model answered in text"),
    # A call without arguments may stream none at all (Anthropic): that is `{}`.
    ({"tool_call": {"name": "ping", "arguments_schema": {"type": "object"}}},
     calls(ToolCall("ping", "")), None),
    ({"dimensions": 1536}, Observed(dimensions=1536), None),
    ({"dimensions": 1536}, Observed(dimensions=768), "dimensions: got 768, expected 1536"),
]


@pytest.mark.parametrize(("expect", "observed", "reason"), ROWS)
def test_checks(expect, observed, reason) -> None:
    failure = run_checks(Expect.model_validate(expect), observed)
    if reason is None:
        assert failure is None, failure
    else:
        assert failure is not None and reason in failure, failure


def test_a_long_instance_is_quoted_short_and_redacted() -> None:
    failure = run_checks(Expect.model_validate({"json_schema": {"type": "string"}}),
                         text('{"k": "' + "v" * 10_000 + '"}'))
    assert failure is not None and len(failure) < 300


async def test_a_backtracking_regex_fails_its_check_without_stalling_the_loop() -> None:
    """`^(a|a)*$` on 40 a's and a `!` backtracks for hours: the check gives up after its limit,
    and the loop keeps running meanwhile (the match runs in a thread without the GIL)."""
    loop = asyncio.get_running_loop()
    worst = 0.0

    async def ticker() -> None:
        nonlocal worst
        while True:
            planned = loop.time() + 0.01
            await asyncio.sleep(0.01)
            worst = max(worst, loop.time() - planned)

    ticking = asyncio.create_task(ticker())
    started = time.perf_counter()
    reason = await asyncio.to_thread(run_checks, Expect(regex=r"^(a|a)*$"),
                                     text("a" * 40 + "!"))
    elapsed = time.perf_counter() - started
    ticking.cancel()
    assert reason is not None and "took over" in reason
    assert elapsed < REGEX_TIMEOUT + 3
    # A match holding the GIL would stall the loop for the whole limit; a busy machine can
    # delay a wake-up by a few hundred ms without that.
    assert worst < 0.8 * REGEX_TIMEOUT, f"the loop stalled {worst * 1000:.0f} ms"


@pytest.mark.parametrize(("observed", "expected", "passes"), [
    ("stop", "stop", True), ("end_turn", "stop", True), ("completed", "stop", True),
    ("STOP", "stop", True), ("stop_sequence", "end_turn", True), ("max_tokens", "length", True),
    ("MAX_TOKENS", "length", True), ("tool_use", "tool_calls", True), ("SAFETY", "stop", False),
    ("length", "stop", False), ("incomplete", "stop", False), (None, "stop", False),
    ("weird", "weird", True), ("weird", "stop", False),
])
def test_finish_reason_matches_across_api_styles(observed, expected, passes) -> None:
    """One probe shared by several API styles: `finish_reason: stop` means "ended by itself"
    whatever the API calls it (end_turn, completed, STOP)."""
    observed_result = Observed("an answer", 3, observed)
    reason = run_checks(Expect(finish_reason=expected), observed_result)
    assert (reason is None) is passes, reason
