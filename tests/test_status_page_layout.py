"""The status page at 1,280 px in real Chromium: a gateway team's page (long target and model
names, served snapshots and fingerprints, costs, a gateway's long reason, recent failures) has
no column past the window and no cell cut; a screenshot is kept for people."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from exporter.errors import Cause, Result
from exporter.identity.status import IdentityStatus, Phase
from exporter.result import ProbeResult, Timings, Usage
from exporter.serve.pages import render_status_page
from exporter.serve.results import Snapshot
from tests.e2e_support import chromium, page_layout

pytestmark = pytest.mark.e2e

REASON = ("HTTP 400: the gateway routes no model of this name: /chat/completions: Invalid model "
          "name passed in model=claude-3-5-sonnet-20241022. Call `/v1/models` to view available "
          "models for your key.")
SERIES = [("litellm-gateway-eu-west-1", "claude-3-5-sonnet-20241022"),
          ("litellm-gateway-eu-west-1", "gpt-4o-mini-2024-07-18"),
          ("litellm-gateway-eu-west-1", "gemini-2.5-flash-preview-09-2025"),
          ("anthropic-direct", "claude-sonnet-4-5-20250929")]


def _page(now: float) -> str:
    latest: dict[tuple[str, str, str], ProbeResult | None] = {}
    served = {}
    for target, model in SERIES:
        key = (target, model, "short-chinese-answer")
        if "3-5" in model:
            latest[key] = ProbeResult(*key, Result.NOT_FOUND, reason=REASON, status=400,
                                      cause=Cause.GATEWAY_MODEL_NOT_ROUTED, finished_at=now - 40)
        else:
            latest[key] = ProbeResult(
                *key, Result.SUCCESS, cost=0.004123, currency="USD", finished_at=now - 3,
                output_tokens=1256, usage=Usage(prompt=12345, completion=1256),
                timings=Timings(ttft=12.45, time_to_first_answer=31.2, tpot=0.0213, tps=40.2,
                                duration=118.3))
        served[key] = (f"{model}-served-snapshot", "fp_0123456789abcdef")
    latest[("a-target-with-no-result-yet", "m", "p")] = None
    failures = tuple(r for r in latest.values() if r is not None and not r.success) * 5
    gpt = ("litellm-gateway-eu-west-1", "gpt-4o-mini-2024-07-18", "identity")
    anthropic = ("anthropic-direct", "claude-sonnet-4-5-20250929", "identity")
    record = "/var/lib/llm-probe/identity/0123456789abcdef0123456789abcdef.json"
    identity = {
        gpt: IdentityStatus(Phase.TESTING, 400, 400, gpt, 37, 200, 0.01, 12, 3, 3, 2.1e-5,
                            0.0312, now - 60, now - 5400, record),
        anthropic: IdentityStatus(Phase.RECORDING, 123, 400, anthropic, 0, 200, 0.01,
                                  record=record, interval=300, window_interval=300)}
    for key in identity:
        latest[key] = ProbeResult(*key, Result.SUCCESS, finished_at=now - 2)
    snapshot = Snapshot(latest=latest, failures=failures, served=served, identity=identity)
    return render_status_page(snapshot, {"version": "1.2.3", "in_flight": 2,
                                         "state_dir": "/var/lib/llm-probe"}, now)


def test_the_status_page_is_readable_at_1280_px(tmp_path: Path) -> None:
    html = _page(time.time())
    layout = page_layout(html, tmp_path, width=1280)
    assert layout["viewport"] == 1280
    assert layout["width"] <= layout["viewport"] and not layout["cut"], layout
    for words in ("USD", "claude-3-5-sonnet-20241022", "served by", "routes no model",
                  "different since 90m ago (3 in a row)",
                  "recording reference 123/400, about 23h5m left",
                  "identity: different", "state directory: /var/lib/llm-probe"):
        assert words in html
    shot = tmp_path / "status-1280.png"
    run = chromium((tmp_path / "layout-1280.html").as_uri(), tmp_path, screenshot=shot,
                   window="1280,900")
    assert run.returncode == 0 and shot.stat().st_size > 10_000
