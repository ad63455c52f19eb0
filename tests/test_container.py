"""The container image, built and run for real: deploy/Dockerfile built by `make image` on a base
assembled from Debian packages (scripts/debian-base: no image registry is needed), then run with
a read-only root filesystem as the image's own user. The shipped config probes the embedded
simulator, so /metrics must show successful probes with no config mounted; the image's health
check must pass inside the container; SIGTERM must stop it with status 0 before the engine's stop
timeout would kill it.

Docker is used where its daemon answers, else podman (scripts/container-engine, which also
carries the settings rootful podman needs in a sandbox); skipped where neither can run. The
Debian base is cached outside the repository and the dependency layer in the engine's own
store, so a second run rebuilds only the code layer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from exporter import __version__
from tests.e2e_support import http_get, wait_for

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "scripts" / "container-engine"
IMAGE = "llm-probe-exporter:test"
UID = 65532
STATE = "/var/lib/llm-probe"
STOP_TIMEOUT = 15  # seconds the engine waits after SIGTERM before SIGKILL (exit status 137)

pytestmark = pytest.mark.container


def engine(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the container engine (docker or podman, as scripts/container-engine picks)."""
    result = subprocess.run([str(ENGINE), *args], capture_output=True, text=True,
                            timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args[:2])} failed ({result.returncode}): "
                             f"{result.stderr[-3000:]}")
    return result


@pytest.fixture(scope="module")
def engine_name() -> str:
    """docker or podman; skips the module where neither can be used."""
    which = subprocess.run([str(ENGINE), "--which"], capture_output=True, text=True,
                           timeout=60, check=False)
    if which.returncode != 0:
        pytest.skip(which.stderr.strip() or "no container engine")
    return which.stdout.strip()


@pytest.fixture(scope="module")
def image(engine_name: str) -> str:
    """The image, built by `make image` on the Debian-assembled base."""
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is not installed (scripts/install-test-deps installs it): "
                    "it assembles the Debian base")
    env = {**os.environ, "BASE_IMAGE": "debian", "IMAGE": IMAGE}
    before = _image_id(IMAGE)
    started = time.monotonic()
    build = subprocess.run(["make", "--no-print-directory", "-s", "image"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=1800, check=False)
    assert build.returncode == 0, build.stderr[-5000:]
    assert build.stdout.strip().splitlines()[-1] == IMAGE, build.stdout
    print(f"built {IMAGE} with {engine_name} in {time.monotonic() - started:.0f} s")
    if before and before != _image_id(IMAGE):
        # the previous build of the tag: each keeps a ~100 MB layer (the virtualenv)
        engine("rmi", before, check=False)
    return IMAGE


def _image_id(name: str) -> str | None:
    found = engine("image", "inspect", "--format", "{{.Id}}", name, check=False)
    return found.stdout.strip() or None if found.returncode == 0 else None


@dataclass
class Container:
    """One running container of the image."""

    name: str
    url: str

    def exec(self, *command: str, env: dict[str, str] | None = None, user: str | None = None,
             check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a command inside the container (as its user unless told)."""
        flags = [f"--env={key}={value}" for key, value in (env or {}).items()]
        flags += [f"--user={user}"] if user else []
        return engine("exec", *flags, self.name, *command, timeout=60, check=check)

    def inspect(self) -> dict[str, Any]:
        """The engine's view of the container."""
        [data] = json.loads(engine("inspect", self.name).stdout)
        return data

    def logs(self) -> str:
        """What the exporter logged so far."""
        result = engine("logs", self.name, check=False)
        return result.stdout + result.stderr


@pytest.fixture(scope="module")
def container(engine_name: str, image: str) -> Iterator[Container]:
    """The image run as a user would: read-only, its own user, the default config."""
    name = f"llm-probe-test-{os.getpid()}"
    flags = ["--read-only", "--tmpfs", "/tmp", "--publish", "127.0.0.1::9471"]
    if engine_name == "podman":
        # No systemd here to run podman's health-check timer; the test runs the check itself.
        flags += ["--health-interval", "disable"]
    engine("run", "--detach", "--name", name, *flags, image, timeout=120)
    try:
        port = engine("port", name, "9471/tcp").stdout.split()[0].rsplit(":", 1)[1]
        yield Container(name, f"http://127.0.0.1:{port}")
    finally:
        engine("rm", "--force", "--volumes", name, check=False, timeout=120)


def _metrics(container: Container) -> str:
    return http_get(f"{container.url}/metrics").decode()


def _successes(text: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("llm_probe_requests_total{") and 'result="success"' in line)


def test_the_image_is_labelled_and_declares_its_user_port_volume_and_health_check(
        image: str) -> None:
    [data] = json.loads(engine("image", "inspect", image).stdout)
    config = data["Config"]
    assert config["User"] == f"{UID}:{UID}"
    assert "9471/tcp" in config["ExposedPorts"]
    assert STATE in config["Volumes"]
    # docker has it in Config, podman beside it; podman keeps it only in the docker format
    healthcheck = config.get("Healthcheck") or data.get("Healthcheck") or {}
    assert healthcheck.get("Test", [""])[0] == "CMD", data
    assert config["Labels"]["org.opencontainers.image.version"] == __version__
    assert config["Labels"]["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert config["Entrypoint"] == ["llm-probe-exporter"]


def test_it_serves_successful_probes_of_the_simulator_out_of_the_box(
        container: Container) -> None:
    def served() -> str | None:
        text = _metrics(container)
        return text if _successes(text) >= 1 else None

    try:
        text = wait_for(served, timeout=90, what="a successful probe on /metrics")
    except TimeoutError:
        pytest.fail(f"no successful probe on /metrics; the container logged:\n{container.logs()}")
    assert 'llm_probe_build_info{' in text and f'version="{__version__}"' in text
    assert "llm_probe_ttft_seconds_bucket{" in text


def test_it_runs_as_its_own_user_on_a_read_only_root_with_state_on_the_volume(
        container: Container) -> None:
    status = container.exec("cat", "/proc/1/status", check=True).stdout
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    assert set(uids) == {str(UID)}
    refused = container.exec("touch", "/etc/llm-probe-exporter/written", user="0")  # even root
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    # The state volume is the exporter's, and the default state directory is in it
    # (XDG_STATE_HOME): the spend record of the priced simulator model lands there.
    assert container.exec("stat", "-c", "%u %a", STATE, check=True).stdout.split() == [
        str(UID), "700"]

    def record() -> str:
        found = container.exec("find", STATE, "-name", "budget.json", check=True).stdout
        return found.strip()

    path = wait_for(record, timeout=60, what=f"the spend record under {STATE}")
    assert path.startswith(f"{STATE}/llm-probe-exporter/config-"), path


def test_its_health_check_passes_inside_the_container(container: Container,
                                                      engine_name: str) -> None:
    wait_for(lambda: http_get(f"{container.url}/-/healthy"), timeout=60, what="/-/healthy")
    test = container.inspect()["Config"]["Healthcheck"]["Test"]
    assert test[0] == "CMD", test
    check = container.exec(*test[1:])
    assert check.returncode == 0, check.stderr
    # A proxy in the environment (for the targets) must not carry the check to itself.
    dead_proxy = "http://127.0.0.1:9"
    proxied = container.exec(*test[1:], env={"HTTP_PROXY": dead_proxy, "http_proxy": dead_proxy})
    assert proxied.returncode == 0, proxied.stderr
    if engine_name == "podman":
        assert engine("healthcheck", "run", container.name, check=False).returncode == 0


def test_its_health_check_follows_the_listen_address(image: str, engine_name: str) -> None:
    """Started on another port, the image's own check asks that port (not a fixed 9471)."""
    name = f"llm-probe-test-port-{os.getpid()}"
    flags = ["--health-interval", "disable"] if engine_name == "podman" else []
    engine("run", "--detach", "--name", name, "--read-only", "--tmpfs", "/tmp", *flags, image,
           "--config.file=/etc/llm-probe-exporter/config.yaml", "--web.listen-address=:9573",
           timeout=120)
    try:
        container = Container(name, "")
        test = container.inspect()["Config"]["Healthcheck"]["Test"]
        wait_for(lambda: container.exec(*test[1:]).returncode == 0, timeout=60,
                 what="the health check on :9573")
    finally:
        engine("rm", "--force", "--volumes", name, check=False, timeout=120)


def test_sigterm_stops_it_with_status_0_before_the_stop_timeout(container: Container) -> None:
    wait_for(lambda: http_get(f"{container.url}/-/healthy"), timeout=60, what="/-/healthy")
    started = time.monotonic()
    engine("stop", "--time", str(STOP_TIMEOUT), container.name, timeout=STOP_TIMEOUT + 60)
    took = time.monotonic() - started
    state = container.inspect()["State"]
    # A process that ignored SIGTERM would have been killed at the timeout: status 137.
    assert state["ExitCode"] == 0, (state, took, container.logs()[-3000:])
    assert '"event": "stopped"' in container.logs()
