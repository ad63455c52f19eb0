"""Identity probes against llama.cpp's llama-server, two builds of one model: the weights as
written (F32) and the same weights quantised to Q4_0 (as llama.cpp's quantiser writes them).

The model is the suite's random llama (tests/realservers/model.py) with its output matrix scaled
up, so it is as sure of its next word as a trained model (a random one is close to uniform over
its vocabulary, and every build of it says nothing in particular). Nothing is downloaded.

One daemon, two targets: `asis` serves the F32 file and records the reference; `variant` serves
the Q4_0 file and is tested against `asis`'s reference (`reference:`). Then:
1. `variant` is found different, `asis` stays the same;
2. both the daemon and `asis`'s server restart on the unchanged file: the reference comes back
   from the state directory (none is recorded again) and `asis` stays the same;
3. `asis`'s server is swapped for the Q4_0 file behind the same URL and model name, as a provider
   would quietly do: `asis` is found different.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import free_port
from tests.e2e_support import Daemon, start_daemon, wait_for
from tests.realservers.model import QUANTISABLE, write_model
from tests.realservers.servers import INSTALL_SCRIPT, Server, missing, start_llama_server

MISSING = [name for name in missing() if name in ("llama-server", "gguf", "numpy")]
pytestmark = [
    pytest.mark.realservers,
    pytest.mark.skipif(bool(MISSING), reason=f"real servers not installed "
                       f"({', '.join(MISSING)}): run {INSTALL_SCRIPT}"),
]

LOGIT_SCALE = 8.0  # measured: Q4_0 found at p ≈ 0.001 by 60 answers, Q8_0 not at all
PROMPTS = ["Continue the paragraph: The lighthouse stood on a narrow spit of rock, and",
           "Continue the paragraph: Der Fluss entspringt in den Bergen im Süden und",
           "Continue the paragraph: La ville est connue pour son marché couvert, où"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("identity-real")
    out = {}
    for name, quantisation in (("f32", None), ("q4", "Q4_0")):
        out[name] = work / f"random-llama-{name}.gguf"
        write_model(out[name], QUANTISABLE, quantisation=quantisation, logit_scale=LOGIT_SCALE)
    return out


def write_config(path: Path, asis: str, variant: str) -> None:
    path.write_text(yaml.safe_dump({
        "global": {"interval": "100ms", "allow_short_intervals": True, "jitter": 0,
                   "timeout": "20s", "state_dir": str(path.parent / "state")},
        # alpha 0.001: an unchanged window is found different once in a thousand
        "probes": {"same": {"kind": "identity", "prompts": PROMPTS, "baseline": 120,
                            "samples": 60, "alpha": 0.001,
                            "reference": {"target": "asis", "model": "tiny"}}},
        "targets": [{"name": "asis", "base_url": asis, "models": ["tiny"]},
                    {"name": "variant", "base_url": variant, "models": ["tiny"]}],
    }))


def verdicts(daemon: Daemon, target: str) -> tuple[float, float]:
    same, different = (daemon.sample("llm_probe_identity_tests_total", target=target,
                                     outcome=outcome) or 0.0
                       for outcome in ("same", "different"))
    return same, different


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def test_a_quantised_copy_is_found_different_and_the_weights_as_written_stay_the_same(
        files: dict[str, Path], tmp_path: Path, servers: list[Server]) -> None:
    port = free_port()
    servers.append(asis := start_llama_server(files["f32"], tmp_path, port=port))
    servers.append(variant := start_llama_server(files["q4"], tmp_path))
    config = tmp_path / "config.yaml"
    write_config(config, asis.base_url, variant.base_url)

    # 1. The variant is found different; the weights as written stay the same.
    daemon = start_daemon(config, tmp_path)
    try:
        wait_for(lambda: verdicts(daemon, "variant")[1] >= 2, 240, "two windows of the variant")
        wait_for(lambda: verdicts(daemon, "asis")[0] >= 2, 120, "two windows of asis")
        assert verdicts(daemon, "asis")[1] == 0
        # The gauge is the latest window's: a quantised copy is not found different in every
        # window at alpha 0.001 (a run saw 0.003 right after two different ones), so only its
        # presence is asserted here; the verdict counts above are the finding.
        assert daemon.sample("llm_probe_identity_pvalue", target="variant") is not None
        assert daemon.sample("llm_probe_identity_samples", target="variant",
                             window="baseline") == 120
    finally:
        daemon.stop()
    assert daemon.output().count("identity reference recorded") == 1  # asis only

    # 2. The unchanged file, both restarted: the same reference, still the same.
    asis.stop()
    servers.append(asis := start_llama_server(files["f32"], tmp_path, port=port))
    daemon = start_daemon(config, tmp_path)
    try:
        wait_for(lambda: "identity reference restored" in daemon.output(), 30, "the reference")
        wait_for(lambda: verdicts(daemon, "asis")[0] >= 3, 120, "three windows of asis")
        assert verdicts(daemon, "asis")[1] == 0
        assert "identity reference recorded" not in daemon.output()

        # 3. The Q4_0 file behind the same URL and model name: asis is found different.
        asis.stop()
        servers.append(start_llama_server(files["q4"], tmp_path, port=port))
        daemon.proc.send_signal(signal.SIGHUP)  # a no-op reload: nothing in the config changed
        wait_for(lambda: verdicts(daemon, "asis")[1] >= 1, 180, "asis found different")
    finally:
        daemon.stop()
    print(daemon.output()[-3000:])
