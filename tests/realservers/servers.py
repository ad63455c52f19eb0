"""Start the real OpenAI-compatible servers as child processes: llama.cpp's llama-server,
llama-cpp-python's server, a LiteLLM proxy, and our simulator (as LiteLLM's other upstream).

Every server runs single-threaded on loopback, logs to a file in the test's tmp dir, and is
stopped by `Process.stop()`. `missing()` says what `scripts/install-real-servers` has not yet
installed, so the tests can skip with that reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import free_port
from tests.e2e_support import ROOT, Process, http_get, wait_for

INSTALL_SCRIPT = "scripts/install-real-servers"
STARTUP_TIMEOUT = 90.0  # LiteLLM's proxy imports a lot; a loaded 2-core machine is slow


def cache_root() -> Path:
    """Where the install script caches builds (`$XDG_CACHE_HOME/llm-probe-exporter`)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-probe-exporter"


def llama_server_binary() -> Path | None:
    """The llama-server the install script built, if it did."""
    pointer = cache_root() / "llama-server.path"
    if not pointer.is_file():
        return None
    binary = Path(pointer.read_text().strip())
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def missing() -> list[str]:
    """What is not installed yet (empty when every real server can start)."""
    gone = [] if llama_server_binary() else ["llama-server"]
    gone += [name for module, name in (("llama_cpp", "llama-cpp-python"), ("litellm", "litellm"),
                                       ("gguf", "gguf"), ("numpy", "numpy"))
             if importlib.util.find_spec(module) is None]
    return gone


def post_json(url: str, body: dict[str, Any], *, headers: dict[str, str] | None = None,
              timeout: float = 30.0) -> tuple[int, bytes]:
    """POST JSON, return (status, body) — error statuses included, not raised."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


@dataclass
class Server(Process):
    """A started OpenAI-compatible server; `base_url` ends in /v1."""

    root_url: str = ""

    @property
    def base_url(self) -> str:
        """The SDK-style base URL the exporter appends /chat/completions to."""
        return f"{self.root_url}/v1"


def _spawn(name: str, args: list[str], tmp: Path, port: int, ready_path: str,
           env: dict[str, str] | None = None, cwd: Path | None = None) -> Server:
    """Start a process logging to tmp/<name>-<port>.log and wait until `ready_path` answers."""
    log = tmp / f"{name}-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=cwd or tmp,
                                stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    server = Server(proc, log, root_url=f"http://127.0.0.1:{port}")

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited with {proc.returncode}")
        return bool(http_get(server.root_url + ready_path, timeout=5.0) is not None)

    try:
        wait_for(ready, STARTUP_TIMEOUT, f"{name} to be ready")
    except (TimeoutError, AssertionError):
        server.stop()
        raise AssertionError(f"{name} did not start:\n{server.output()[-4000:]}") from None
    return server


def start_llama_server(model: Path, tmp: Path, *, alias: str = "tiny", context: int = 2048,
                       api_key: str | None = None, port: int | None = None) -> Server:
    """llama.cpp's server: one slot, one thread, Prometheus metrics on `/metrics`; with
    `api_key`, other keys get 401 (`/health` and `/metrics` stay open); `port` to serve where
    an earlier one did."""
    binary = llama_server_binary()
    assert binary, f"llama-server is not built (run {INSTALL_SCRIPT})"
    port = port or free_port()
    args = [str(binary), "--model", str(model), "--alias", alias,
            "--host", "127.0.0.1", "--port", str(port),
            "--threads", "1", "--threads-batch", "1", "--parallel", "1",
            "--ctx-size", str(context), "--metrics", "--no-webui"]
    if api_key:
        args += ["--api-key", api_key]
    return _spawn("llama-server", args, tmp, port, "/health")


def start_llama_cpp_python(model: Path, tmp: Path, *, alias: str = "tiny") -> Server:
    """llama-cpp-python's FastAPI server (`python -m llama_cpp.server`), one thread."""
    port = free_port()
    args = [sys.executable, "-m", "llama_cpp.server", "--model", str(model),
            "--model_alias", alias, "--host", "127.0.0.1", "--port", str(port),
            "--n_threads", "1", "--n_threads_batch", "1", "--n_ctx", "2048",
            "--verbose", "False"]
    return _spawn("llama-cpp-python", args, tmp, port, "/v1/models")


def start_simulator(models: dict[str, dict[str, Any]], tmp: Path) -> Server:
    """Our simulator in its own process (`llm-probe-exporter simulate`), so LiteLLM can reach
    it whatever event loop the test runs."""
    port = free_port()
    config = tmp / f"simulator-{port}.yaml"
    config.write_text(yaml.safe_dump({
        "simulator": {"listen": f"127.0.0.1:{port}", "models": models},
        "probes": {"p": {"prompt": "hi"}},
        "targets": [{"name": "sim", "base_url": f"http://127.0.0.1:{port}/v1",
                     "models": list(models)}],
    }))
    args = [sys.executable, "-m", "exporter", "simulate", "--config.file", str(config)]
    return _spawn("simulator", args, tmp, port, "/health", cwd=ROOT)


@dataclass
class LiteLLM(Server):
    """A LiteLLM proxy; requests need `master_key`."""

    master_key: str = ""


def start_litellm(upstreams: dict[str, dict[str, Any]], tmp: Path, *,
                  master_key: str = "sk-real-servers-master") -> LiteLLM:
    """A LiteLLM proxy routing model names to `litellm_params` (no network: local cost map,
    no retries, one worker)."""
    port = free_port()
    config = tmp / f"litellm-{port}.yaml"
    config.write_text(yaml.safe_dump({
        "model_list": [{"model_name": name, "litellm_params": params}
                       for name, params in upstreams.items()],
        "litellm_settings": {"num_retries": 0, "request_timeout": 60,
                             "telemetry": False, "drop_params": True},
        "router_settings": {"num_retries": 0, "allowed_fails": 1000},
        "general_settings": {"master_key": master_key},
    }))
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
           "LITELLM_LOG": "ERROR", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1"}
    litellm = str(Path(sys.executable).with_name("litellm"))
    args = [litellm, "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
            "--num_workers", "1"]
    server = _spawn("litellm", args, tmp, port, "/health/liveliness", env=env)
    return LiteLLM(server.proc, server.log, root_url=server.root_url, master_key=master_key)
