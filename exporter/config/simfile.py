"""The `simulate` command's file: a `simulator:` section alone, or a whole config of which only
that section is read (the targets' keys and files need not exist where the simulator runs).

Same bounded read, YAML limits, `${VAR}` interpolation and located errors as `load_config`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from exporter.config.errors import ConfigError, ConfigProblem, format_location
from exporter.config.interpolate import Scrubber, Substitution, interpolate
from exporter.config.load import SECTIONS, read_document, validate_section, with_lines
from exporter.config.schema import SimulatorConfig
from exporter.config.secrets import document_secrets
from exporter.log import REDACTOR, Redactor


def load_simulator(path: str | Path, *, env: Mapping[str, str] | None = None,
                   redactor: Redactor | None = REDACTOR) -> SimulatorConfig:
    """The file's `simulator:` section, validated, or `ConfigError` (and nothing else)."""
    path = Path(path)
    env = os.environ if env is None else env
    _raw, document = read_document(path)
    data = document.data
    if not isinstance(data, dict) or "simulator" not in data:
        raise ConfigError("invalid simulator config", [ConfigProblem(
            "simulator", "the file has no `simulator:` section (`simulate --config.file` "
            "takes one, alone or in a whole config)")])
    problems = [ConfigProblem(format_location((str(key),)), "unknown key", path=(str(key),))
                for key in data if key not in SECTIONS]
    substituted: list[Substitution] = []
    section = interpolate(data["simulator"] or {}, ("simulator",), env, problems, substituted)
    secrets = [*document_secrets({"simulator": section}, env),
               *(s.value for s in substituted if s.secret)]
    if redactor is not None:
        redactor.add(secrets)
    simulator = validate_section(SimulatorConfig, section, ("simulator",), problems)
    if problems or simulator is None:
        error = ConfigError("invalid simulator config", with_lines(problems, document))
        raise Scrubber(substituted, secrets).error(error) from None
    return simulator
