"""`check` shows where each target's key comes from and the whitespace it stripped, in the
table and in `--output json` — never the key (canary keys through the real command)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.config import aws_extra_installed
from tests.e2e_support import EXPORTER, ROOT

ENV_KEY = "sk-canary-env-4f1d2c3b5a6e7d8c"
FILE_KEY = "sk-canary-file-9e8d7c6b5a4f3e2d"
LITERAL_KEY = "sk-canary-literal-1a2b3c4d5e6f7a8b"
CANARIES = (ENV_KEY, FILE_KEY, LITERAL_KEY)
BASE = "http://127.0.0.1:4000/v1"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "gw.key").write_bytes(f"{FILE_KEY}\r\n".encode())
    targets = [
        {"name": "from-env", "base_url": BASE, "models": ["a"], "api_key_env": "GW_KEY"},
        {"name": "from-file", "base_url": BASE, "models": ["a"],
         "api_key_file": "secrets/gw.key"},
        {"name": "literal", "api": "anthropic-messages", "base_url": "http://127.0.0.1:4000",
         "models": ["a"], "api_key": f" \t{LITERAL_KEY}"},
        {"name": "no-key", "api": "ollama-chat", "base_url": "http://127.0.0.1:11434",
         "models": ["a"]},
    ]
    if aws_extra_installed():
        targets.append({"name": "signed", "api": "bedrock-converse",
                        "base_url": "https://bedrock-runtime.eu-west-1.amazonaws.com",
                        "models": ["a"], "aws_sigv4": {"region": "eu-west-1"}})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"probes": {"p": {"prompt": "hi"}}, "targets": targets}))
    return path


def check(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GW_KEY": f"{ENV_KEY}\n"}
    run = subprocess.run([*EXPORTER, "check", "--config.file", str(config), *args],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    for canary in CANARIES:
        for shown in (canary, canary[3:15], canary[-12:]):  # whole, and any 12 characters
            assert shown not in run.stdout + run.stderr
    return run


def test_the_json_names_each_key_source_and_the_whitespace_stripped(config: Path) -> None:
    document = json.loads(check(config, "--output", "json").stdout)
    keys = {t["name"]: t["key"] for t in document["targets"]}
    assert keys["from-env"] == {"source": "env", "name": "GW_KEY",
                                "stripped": {"leading": "", "trailing": "\n"}}
    assert keys["from-file"] == {"source": "file", "name": "secrets/gw.key",
                                 "stripped": {"leading": "", "trailing": "\r\n"}}
    assert keys["literal"] == {"source": "literal", "name": "",
                               "stripped": {"leading": " \t", "trailing": ""}}
    assert keys["no-key"] == {"source": "none", "name": "",
                              "stripped": {"leading": "", "trailing": ""}}
    if aws_extra_installed():
        assert keys["signed"]["source"] == "aws_sigv4"
        assert keys["signed"]["name"] == "eu-west-1"
    assert document["warnings"] == []  # a stripped newline is shown, not warned about


def test_the_table_names_each_key_source_and_the_whitespace_stripped(config: Path) -> None:
    lines = check(config).stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "Keys (where" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in lines[start:end] if line.startswith("│")}
    assert rows["from-env"] == ["openai-chat", "env GW_KEY", 'trailing "\\n"']
    assert rows["from-file"] == ["openai-chat", "file secrets/gw.key", 'trailing "\\r\\n"']
    assert rows["literal"] == ["anthropic-messages", "literal", 'leading " \\t"']
    assert rows["no-key"] == ["ollama-chat", "none", "–"]
