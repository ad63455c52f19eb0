"""The exporters of the alert scenarios: real `llm-probe-exporter serve` processes, each with its
embedded simulator, driven through faults by rewriting their config and reloading."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import free_port
from tests.e2e_support import EXPORTER, ROOT, Process, http_get, wait_for

Config = dict[str, Any]
# What every scenario probes: a short streamed answer whose check passes with the default
# profile (16 tokens) and fails when the simulator answers fewer than 8.
PROBES = {"short": {"prompt": "Say hello.", "max_tokens": 64, "nonce": True,
                    "expect": {"min_output_tokens": 8}}}
FAST = {"ttft": "200ms", "tpot": "5ms", "output_tokens": 16, "jitter": 0.0}


def base_config(location: str, sim_port: int) -> Config:
    """A config with the embedded simulator on `sim_port` and no targets yet."""
    return {
        "global": {"interval": "1s", "timeout": "30s", "jitter": 0.0, "max_concurrency": 64,
                   "allow_short_intervals": True, "labels": {"location": location},
                   "slo": {"availability": "99%"}},
        "simulator": {"listen": f"127.0.0.1:{sim_port}", "models": {}},
        "probes": copy.deepcopy(PROBES),
        "targets": [],
    }


class Exporter:
    """One exporter process: its config (edit, then `reload`), its port, start and stop."""

    def __init__(self, name: str, tmp: Path, location: str = "eu-west") -> None:
        self.name = name
        self.folder = tmp / f"exporter-{name}"
        self.folder.mkdir(parents=True)
        self.port = free_port()
        self.sim_port = free_port()
        self.config: Config = base_config(location, self.sim_port)
        self.process: Process | None = None
        self._lock = asyncio.Lock()
        self.extra_args: list[str] = []
        self.note = ""  # what a scenario measured (shown under the table)
        # Probes only the targets that name them run (a target without `probes:` runs every
        # probe): one scenario's probe must not add series, and alerts, to the others' targets.
        self.exclusive: set[str] = set()

    @property
    def url(self) -> str:
        """http://127.0.0.1:port"""
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        """host:port, the `instance` label Prometheus gives it."""
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The embedded simulator's OpenAI base URL."""
        return f"http://127.0.0.1:{self.sim_port}/v1"

    def add_target(self, name: str, models: dict[str, dict[str, Any]], **target: Any) -> None:
        """A target `name` probing these simulated models (profiles over FAST)."""
        for model, profile in models.items():
            self.config["simulator"]["models"][model] = {**FAST, **profile}
        self.config["targets"].append({"name": name, "base_url": self.base_url,
                                       "models": list(models), **target})

    def target(self, name: str) -> dict[str, Any]:
        """The config of target `name`."""
        return next(t for t in self.config["targets"] if t["name"] == name)

    def write(self) -> Path:
        """Write the config file (targets without `probes:` run every non-exclusive probe)."""
        config = self.config
        if self.exclusive:
            shared = [p for p in config["probes"] if p not in self.exclusive]
            config = {**config, "targets": [t if "probes" in t else {**t, "probes": shared}
                                            for t in config["targets"]]}
        path = self.folder / "config.yaml"
        path.write_text(yaml.safe_dump(config, allow_unicode=True))
        return path

    def start(self) -> None:
        """Start `serve` on its port and wait until it is ready (blocking)."""
        path = self.write()
        log = self.folder / "exporter.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [*EXPORTER, "--config.file", str(path), "--web.listen-address", self.address,
                 *self.extra_args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.process = Process(proc, log)
        try:
            wait_for(lambda: proc.poll() is None and http_get(f"{self.url}/-/ready"), 30,
                     f"exporter {self.name} to be ready")
        except TimeoutError:
            self.process.stop()
            raise AssertionError(f"exporter {self.name} did not start:\n"
                                 f"{self.process.output()}") from None

    def stop(self) -> None:
        """Stop the process (blocking)."""
        if self.process is not None:
            self.process.stop()

    async def change(self, edit: Callable[[Config], None], *, raw: str | None = None) -> None:
        """Edit the config (or write `raw` text instead) and reload; waits for the reload."""
        async with self._lock:
            edit(self.config)
            if raw is None:
                self.write()
            else:
                (self.folder / "config.yaml").write_text(raw)
            await asyncio.to_thread(self._post_reload)

    def _post_reload(self) -> None:
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                response.read()
        except urllib.error.HTTPError as error:  # a bad file answers 500: expected there
            error.close()

    def document(self) -> dict[str, Any]:
        """`/api/v1/results` as JSON."""
        return json.loads(http_get(f"{self.url}/api/v1/results"))

    def latest(self, target: str) -> dict[str, Any] | None:
        """The last result of the first series of `target` (None before its first probe)."""
        for entry in self.document()["series"]:
            if entry["target"] == target:
                return entry["last"]
        return None

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` with these labels on /metrics (0 when none)."""
        from prometheus_client.parser import text_string_to_metric_families

        total = 0.0
        for family in text_string_to_metric_families(http_get(f"{self.url}/metrics").decode()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v
                                               for k, v in labels.items()):
                    total += sample.value
        return total
