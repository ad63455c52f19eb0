"""`check` warns before reasoning is paid for; `probe --show-request` prints what would be sent,
secrets redacted, and sends nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli import main
from tests.conftest import free_port

SECRET = "sk-show-request-secret-0123456789"


def write(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


def config(tmp_path: Path) -> str:
    base = f"http://127.0.0.1:{free_port()}"  # nothing listens: nothing may be sent
    return write(tmp_path, {
        "probes": {"short": {"prompt": "hi", "max_tokens": 256},
                   "warm": {"prompt": "hi", "temperature": 0.2, "max_tokens": 256},
                   "cheap": {"prompt": "hi", "max_tokens": 256,
                             "reasoning": {"effort": "minimal"}, "params": {"seed": 7}}},
        "targets": [
            {"name": "openai", "base_url": f"{base}/v1", "api_key": SECRET,
             "models": ["gpt-5-mini"], "probes": ["short", "cheap"]},
            {"name": "claude", "api": "anthropic-messages", "base_url": f"{base}/v1",
             "api_key": SECRET, "models": ["claude-opus-4-7"], "probes": ["warm"]},
            {"name": "gemini", "api": "gemini", "base_url": f"{base}/v1beta",
             "query": {"key": SECRET}, "models": ["gemini-2.5-pro"], "probes": ["cheap"]}]})


def test_check_warns_before_reasoning_is_paid_for(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config.file", config(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("warning: openai/gpt-5-mini/short: gpt-5-mini (gpt-5) reasons before answering and "
            "the probe sets no `reasoning`: at its default effort it can spend all of "
            "max_tokens=256 thinking and answer nothing (check_failed)") in out
    assert ("warning: claude/claude-opus-4-7/warm: claude-opus-4-7 (claude-adaptive-only) "
            "refuses `temperature` (deprecated for this model): the probe will fail") in out
    assert "openai/gpt-5-mini/cheap" not in out and "gemini/" not in out
    assert out.endswith("config OK")


def test_show_request_prints_the_body_and_redacts_keys(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--config.file", config(tmp_path), "--show-request",
                 "--probe", "cheap"]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out and "Authorization: <redacted>" in out
    blocks = out.split("# ")[1:]
    assert [block.splitlines()[0] for block in blocks] == ["openai/gpt-5-mini/cheap",
                                                          "gemini/gemini-2.5-pro/cheap"]
    openai_body = json.loads(blocks[0].split("\n\n", 1)[1])
    assert openai_body["max_completion_tokens"] == 256
    assert openai_body["reasoning_effort"] == "minimal" and openai_body["seed"] == 7
    assert openai_body["messages"] == [{"role": "user", "content": "[<nonce>] hi"}]
    gemini_url = blocks[1].splitlines()[1]
    assert gemini_url.startswith("POST http://") and "key=<redacted>" in gemini_url
    gemini_body = json.loads(blocks[1].split("\n\n", 1)[1])
    assert gemini_body["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 128,
                                                                 "includeThoughts": True}


def test_show_request_with_a_selection_that_matches_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--config.file", config(tmp_path), "--show-request",
                 "--target", "nope"]) == 2
    assert "no configured series matches" in capsys.readouterr().err
