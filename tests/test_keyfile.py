"""Key files re-read when a sidecar rewrites them: the next probe sends the new token, which is
redacted like any key; a broken or missing file keeps the last good key and says so once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from exporter.config import parse_config
from exporter.errors import Result
from exporter.log import Redactor
from exporter.probe.keyfile import KeyFiles
from exporter.probe.prober import Prober
from tests.conftest import Script, ok_stream

FIRST = "ya29.first-access-token-0123456789"
SECOND = "ya29.second-access-token-9876543210"


class Log:
    """A logger that keeps what it was told."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def rewrite(path: Path, text: str, tick: int) -> None:
    """Write the file and move its mtime, as a sidecar's rewrite would."""
    path.write_text(text)
    stamp = 1_700_000_000 + tick
    os.utime(path, (stamp, stamp))


def config_for(url: str, tmp_path: Path) -> Any:
    return parse_config({"probes": {"p": {"prompt": "hi"}}, "targets": [{
        "name": "t", "base_url": url, "models": ["m"], "api_key_file": "token"}]},
        env={}, base_dir=tmp_path)


async def test_rewritten_key_file_is_sent_and_redacted(scripted_server, tmp_path) -> None:
    token = tmp_path / "token"
    rewrite(token, FIRST + "\n", 1)
    server = await scripted_server(ok_stream(["a"]))
    config = config_for(server.url, tmp_path)
    redactor = Redactor([FIRST])
    async with Prober(redactor=redactor, logger=Log()) as prober:
        first = await prober.probe(config.series[0])
        rewrite(token, SECOND + "\n", 2)
        second = await prober.probe(config.series[0])
        third = await prober.probe(config.series[0])
    assert first.result is second.result is third.result is Result.SUCCESS
    sent = [r["headers"]["Authorization"] for r in server.requests]
    assert sent == [f"Bearer {FIRST}", f"Bearer {SECOND}", f"Bearer {SECOND}"]
    assert SECOND not in redactor(f"echoed: {SECOND}")
    assert FIRST not in redactor(f"echoed: {FIRST}")  # the old one stays known


async def test_key_echoed_after_refresh_never_reaches_the_result(scripted_server,
                                                                 tmp_path) -> None:
    token = tmp_path / "token"
    rewrite(token, FIRST, 1)
    echo = Script(status=401, headers={"Content-Type": "application/json"},
                  steps=[(0, b'{"error": {"message": "Bad token ' + SECOND.encode() + b'"}}')])
    server = await scripted_server(echo)
    config = config_for(server.url, tmp_path)
    rewrite(token, SECOND, 2)
    async with Prober(redactor=Redactor([FIRST]), logger=Log()) as prober:
        result = await prober.probe(config.series[0])
    assert result.result is Result.AUTH
    assert SECOND not in result.reason and "Bad token" in result.reason


def test_broken_or_missing_file_keeps_the_last_key_and_says_so_once(tmp_path) -> None:
    token = tmp_path / "token"
    rewrite(token, FIRST, 1)
    config = config_for("http://127.0.0.1:1/v1", tmp_path)
    target = config.targets[0]
    log = Log()
    keys = KeyFiles(Redactor(), log)
    assert keys.key(target).reveal() == FIRST
    rewrite(token, "", 2)  # a sidecar that truncates before writing
    assert keys.key(target).reveal() == FIRST
    assert keys.key(target).reveal() == FIRST
    token.unlink()
    assert keys.key(target).reveal() == FIRST
    assert keys.key(target).reveal() == FIRST
    assert [fields["error"] for _, fields in log.lines] == [
        "the key is empty", "No such file or directory"]
    rewrite(token, SECOND, 3)
    assert keys.key(target).reveal() == SECOND


def test_two_line_file_is_refused_without_quoting_it(tmp_path) -> None:
    token = tmp_path / "token"
    rewrite(token, FIRST, 1)
    config = config_for("http://127.0.0.1:1/v1", tmp_path)
    log = Log()
    keys = KeyFiles(Redactor(), log)
    keys.key(config.targets[0])
    rewrite(token, SECOND + "\nsecond line\n", 2)
    assert keys.key(config.targets[0]).reveal() == FIRST
    assert log.lines[0][1]["error"] == ("the key must be one line of printable ASCII without "
                                        "spaces")
    assert SECOND not in str(log.lines)


def test_targets_without_a_key_file_keep_their_key() -> None:
    config = parse_config({"probes": {"p": {"prompt": "hi"}}, "targets": [{
        "name": "t", "base_url": "http://x/v1", "models": ["m"], "api_key": FIRST}]}, env={})
    assert KeyFiles(Redactor(), Log()).key(config.targets[0]).reveal() == FIRST
