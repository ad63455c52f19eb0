"""Benchmarking tools driven as separate processes: our `bench` command and the peers.

Each tool runs a closed loop of K requests in flight against the truth server, the way a user
would run it, and exports one record per request; `parse` turns those into `Measured` values on
CLOCK_MONOTONIC so fidelity.py can pair them with the server's records:

- bench (ours): paired by response id; `stamps.monotonic` t0 and t_f (CLOCK_MONOTONIC).
- aiperf 0.13: by the `X-Request-ID` header it sends (the truth server records it);
  `request_start_ns` (wall) + its TTFT.
- guidellm 0.8.1: by response id; `request_start`, `first_token_iteration` (wall).
- inference-perf 0.7: by the response id in the chunks it keeps; `start_time`, `chunk_times`
  (monotonic). It has no warm-up: it runs K more requests and the first K by start are dropped.

Wall stamps are moved onto the monotonic clock with one offset read at start-up (same host).
The peers live in their own virtualenvs (`benchmarks/peers/install`); a peer that is not
installed is skipped. CPU is the tool's whole process tree (user + system, from the kernel's
accounting of reaped children).
"""

from __future__ import annotations

import asyncio
import os
import re
import resource
import shlex
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import yaml

from benchmarks.common import PROMPT, ROOT, Measured

PEERS = Path(os.environ.get("LLM_PROBE_PEERS",
                            Path.home() / ".cache" / "llm-probe-exporter" / "peers"))
TOKENIZER = PEERS / "tokenizer"
# unix time − CLOCK_MONOTONIC, read once: turns the wall stamps some tools export into ours.
UNIX_OFFSET = time.time() - time.monotonic()
RESPONSE_ID = re.compile(r'"id"\s*:\s*"(chatcmpl-[0-9]+)"')


@dataclass
class ToolRun:
    """What one run of a tool measured, and what it cost."""

    measured: list[Measured]
    cpu_seconds: float  # the tool's process tree, user + system
    wall_seconds: float


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _mean_gap(times: Sequence[float]) -> float | None:
    return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None


@dataclass
class Tool(ABC):
    """A benchmarking tool run as a command; subclasses say how to run it and read its export."""

    name: str

    def available(self) -> bool:
        """Whether the tool is installed."""
        return True

    @abstractmethod
    def command(self, base_url: str, concurrency: int, count: int,
                out: Path) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of one run."""

    @abstractmethod
    def parse(self, out: Path, concurrency: int) -> list[Measured]:
        """Its per-request export, as Measured values."""

    async def run(self, base_url: str, concurrency: int, count: int, out: Path) -> ToolRun:
        """Run once, K in flight, `count` measured requests (after the tool's own warm-up)."""
        await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
        argv, env = self.command(base_url, concurrency, count, out)
        cpu, started = _children_cpu(), time.monotonic()
        with (out / "tool.log").open("wb") as log:
            proc = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=log, env=env,
                                                        cwd=out)
            code = await proc.wait()
        wall, cpu = time.monotonic() - started, _children_cpu() - cpu
        if code != 0:
            tail = (out / "tool.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} exited {code}:\n{tail}")
        return ToolRun(self.parse(out, concurrency), cpu, wall)


@dataclass
class BenchTool(Tool):
    """`llm-probe-exporter bench`, from this tree or another one (A/B against older code)."""

    name: str = "bench"
    tree: Path = ROOT
    args: Sequence[str] = ()
    tty: bool = False  # under a pseudo-terminal, as from a shell: with the live progress bar

    def command(self, base_url: str, concurrency: int, count: int,
                out: Path) -> tuple[list[str], dict[str, str]]:
        config = out / "config.yaml"
        config.write_text(yaml.safe_dump({
            "global": {"timeout": "120s"},
            "probes": {"bench": {"prompt": PROMPT, "max_tokens": 256}},
            "targets": [{"name": "truth", "base_url": base_url, "models": ["bench"]}],
        }))
        argv = [sys.executable, "-m", "exporter", "bench", "--config.file", str(config),
                "--concurrency", str(concurrency), "--requests", str(count),
                "--warmup", str(concurrency), "--output", str(out / "run.json"), *self.args]
        if self.tty:
            argv = ["script", "--quiet", "--return", "--command", shlex.join(argv), "/dev/null"]
        return argv, {**os.environ, "PYTHONPATH": str(self.tree)}

    def parse(self, out: Path, concurrency: int) -> list[Measured]:
        measured = []
        for r in orjson.loads((out / "run.json").read_bytes())["records"]:
            stamps = r.get("stamps", {}).get("monotonic", {})  # older trees have none
            gaps = r["inter_chunk_seconds"]
            measured.append(Measured(
                r["response_id"], r["ttft_seconds"], r["tpot_seconds"],
                sum(gaps) / len(gaps) if gaps else None, r["result"] == "success",
                stamps.get("t0"), stamps.get("t_f")))
        return measured


def _peer_env(**changes: str | None) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@dataclass
class AiperfTool(Tool):
    """NVIDIA aiperf 0.13 (`aiperf profile`)."""

    name: str = "aiperf"

    def available(self) -> bool:
        return (PEERS / "aiperf" / "bin" / "aiperf").exists() and TOKENIZER.exists()

    def command(self, base_url: str, concurrency: int, count: int,
                out: Path) -> tuple[list[str], dict[str, str]]:
        argv = [str(PEERS / "aiperf" / "bin" / "aiperf"), "profile", "--model", "bench",
                "--url", base_url.removesuffix("/v1"), "--endpoint-type", "chat", "--streaming",
                "--tokenizer", str(TOKENIZER), "--concurrency", str(concurrency),
                "--request-count", str(count), "--warmup-request-count", str(concurrency),
                "--output-artifact-dir", str(out / "artifacts"), "--ui-type", "none"]
        # aiperf takes a local tokenizer path only when HF_HUB_OFFLINE is unset.
        return argv, _peer_env(HF_HUB_OFFLINE=None, TRANSFORMERS_OFFLINE=None)

    def parse(self, out: Path, concurrency: int) -> list[Measured]:
        measured = []
        for line in (out / "artifacts" / "profile_export.jsonl").read_bytes().splitlines():
            r = orjson.loads(line)
            meta, metrics = r["metadata"], r.get("metrics") or {}
            if meta.get("benchmark_phase") != "profiling":
                continue
            ttft = metrics.get("time_to_first_token", {}).get("value")
            itl = metrics.get("inter_token_latency", {}).get("value")
            gaps = metrics.get("inter_chunk_latency", {}).get("value") or []
            t0 = meta["request_start_ns"] / 1e9 - UNIX_OFFSET
            measured.append(Measured(
                meta.get("x_request_id"), None if ttft is None else ttft / 1000,
                None if itl is None else itl / 1000,
                sum(gaps) / len(gaps) / 1000 if gaps else None,
                ttft is not None and not r.get("error"),
                t0, None if ttft is None else t0 + ttft / 1000))
        return measured


@dataclass
class GuidellmTool(Tool):
    """guidellm 0.8.1 (`guidellm run` with a scenario file)."""

    name: str = "guidellm"
    tokens: int = 20

    def available(self) -> bool:
        return (PEERS / "guidellm" / "bin" / "guidellm").exists() and TOKENIZER.exists()

    def command(self, base_url: str, concurrency: int, count: int,
                out: Path) -> tuple[list[str], dict[str, str]]:
        scenario = out / "scenario.json"
        scenario.write_bytes(orjson.dumps({"spec": {
            "backend": {"kind": "openai_http", "target": base_url.removesuffix("/v1"),
                        "model": "bench", "request_format": "/v1/chat/completions",
                        "validate_backend": False},
            "profile": {"kind": "concurrent", "streams": [concurrency], "warmup": concurrency},
            "data": [{"kind": "synthetic_text", "prompt_tokens": 20,
                      "output_tokens": self.tokens}],
            "tokenizer": {"kind": "huggingface_auto", "model": str(TOKENIZER)},
            "constraints": [{"kind": "max_requests", "count": count + concurrency}],
            "outputs": [{"kind": "json", "path": str(out / "guidellm.json")}],
        }}))
        argv = [str(PEERS / "guidellm" / "bin" / "guidellm"), "run", "--scenario",
                str(scenario), "--disable-console-interactive"]
        return argv, _peer_env()

    def parse(self, out: Path, concurrency: int) -> list[Measured]:
        requests = orjson.loads((out / "guidellm.json").read_bytes())["benchmarks"][0]["requests"]
        measured = []
        for status, rows in requests.items():
            for r in rows if isinstance(rows, list) else ():
                timings = r["info"]["timings"]
                start, first = timings.get("request_start"), timings.get("first_token_iteration")
                ttft = r.get("time_to_first_token_ms")
                itl = r.get("inter_token_latency_ms")
                measured.append(Measured(
                    r.get("response_id"), None if ttft is None else ttft / 1000,
                    None if itl is None else itl / 1000, None,
                    status == "successful" and ttft is not None,
                    None if start is None else start - UNIX_OFFSET,
                    None if first is None else first - UNIX_OFFSET))
        return measured


@dataclass
class InferencePerfTool(Tool):
    """inference-perf 0.7 (a YAML config; no warm-up of its own: the first K are dropped)."""

    name: str = "inference-perf"

    def available(self) -> bool:
        return (PEERS / "inference-perf" / "bin" / "inference-perf").exists() \
            and TOKENIZER.exists()

    def command(self, base_url: str, concurrency: int, count: int,
                out: Path) -> tuple[list[str], dict[str, str]]:
        config = out / "config.yml"
        config.write_text(yaml.safe_dump({
            "api": {"type": "chat", "streaming": True},
            "data": {"type": "mock"},
            "load": {"type": "concurrent", "num_workers": 1,
                     "stages": [{"num_requests": count + concurrency,
                                 "concurrency_level": concurrency}]},
            "server": {"type": "vllm", "model_name": "bench",
                       "base_url": base_url.removesuffix("/v1"), "ignore_eos": True},
            "tokenizer": {"pretrained_model_name_or_path": str(TOKENIZER)},
            "report": {"request_lifecycle": {"summary": True, "per_stage": False,
                                             "per_request": True},
                       "prometheus": {"summary": False}},
            "storage": {"local_storage": {"path": str(out / "report")}},
        }))
        argv = [str(PEERS / "inference-perf" / "bin" / "inference-perf"), "-c", str(config)]
        return argv, _peer_env()

    def parse(self, out: Path, concurrency: int) -> list[Measured]:
        rows = orjson.loads((out / "report" / "per_request_lifecycle_metrics.json").read_bytes())
        rows.sort(key=lambda r: r["start_time"])
        measured = []
        for r in rows[concurrency:]:
            response = r.get("info", {}).get("response_metrics") or {}
            times = response.get("output_token_times") or []
            rid = RESPONSE_ID.search(r.get("response") or "")
            n = response.get("output_tokens") or 0
            start = r["start_time"]
            measured.append(Measured(
                rid.group(1) if rid else None, times[0] - start if times else None,
                (times[-1] - times[0]) / (n - 1) if n > 1 and len(times) > 1 else None,
                _mean_gap(times), bool(times) and not r.get("error"), start,
                times[0] if times else None))
        return measured


def peers(tokens: int) -> list[Tool]:
    """The installed peers."""
    return [tool for tool in (AiperfTool(), GuidellmTool(tokens=tokens), InferencePerfTool())
            if tool.available()]


def describe_missing() -> str | None:
    """A note naming the peers that are not installed, with the command that installs them."""
    missing = [tool.name for tool in (AiperfTool(), GuidellmTool(), InferencePerfTool())
               if not tool.available()]
    if not missing:
        return None
    return (f"({', '.join(missing)} not installed: the column is skipped; "
            "`benchmarks/peers/install` installs them)")
