"""A config checked where its secrets are not set (CI): `check --allow-missing-secrets`.

A key that `api_key_env` names, a `${VAR}` that is a secret (named like a credential, or in
`params`) and an `api_key_file` that cannot be read here are each replaced by a placeholder
before validation and reported as `Unresolved` instead of an error; everything else is
validated as `load_config` does (an unset variable that is not a secret — a URL, a model
name — stays an error). The placeholder is never sent: `check` sends nothing without
`--discover`, and the daemon never loads a config this way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.config.errors import ConfigError, format_location
from exporter.config.interpolate import in_params, unset_variables
from exporter.config.load import key_file_path, parse_config, read_document, with_lines
from exporter.config.model import Config
from exporter.config.secrets import secret_name
from exporter.log import REDACTOR, Redactor

# One printable line (a key's form), unlike any real key; never sent to a server.
PLACEHOLDER = "unresolved-in-check-b7e1f04c"


@dataclass(frozen=True, slots=True)
class Unresolved:
    """A secret the config names that is not available here."""

    location: str  # `targets[1].api_key_env`
    message: str  # `environment variable GW_KEY is not set`
    target: int | None = None  # the index of the target it belongs to, if one

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"

    def to_json(self) -> dict[str, str]:
        """As JSON (`check --output json`)."""
        return {"location": self.location, "message": self.message}


class _WithPlaceholders(Mapping[str, str]):
    """The environment, plus a placeholder for each secret variable it lacks."""

    def __init__(self, env: Mapping[str, str], names: set[str]) -> None:
        self._env = env
        self._extra = {name: PLACEHOLDER for name in names if name not in env}

    def __getitem__(self, name: str) -> str:
        return self._env[name] if name in self._env else self._extra[name]

    def __iter__(self) -> Iterator[str]:
        yield from self._env
        yield from self._extra

    def __len__(self) -> int:
        return len(self._env) + len(self._extra)


def _readable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.R_OK)


def _fill_keys(data: Any, env: Mapping[str, str], base: Path,
               missing: list[Unresolved]) -> set[str]:
    """Unset key variables (returned) and unreadable key files (replaced in `data` by the
    placeholder), each noted in `missing`."""
    names: set[str] = set()
    targets = data.get("targets") if isinstance(data, dict) else None
    for index, target in enumerate(targets if isinstance(targets, list) else []):
        if not isinstance(target, dict):
            continue
        name, file = target.get("api_key_env"), target.get("api_key_file")
        if isinstance(name, str) and name and name not in env:
            names.add(name)
            missing.append(Unresolved(f"targets[{index}].api_key_env",
                                      f"environment variable {name} is not set", index))
        elif (isinstance(file, str) and file and "${" not in file
              and not _readable(key_file_path(file, base))):
            del target["api_key_file"]
            target["api_key"] = PLACEHOLDER
            missing.append(Unresolved(f"targets[{index}].api_key_file",
                                      f"{file} cannot be read here", index))
    return names


def load_without_secrets(path: str | Path, *, env: Mapping[str, str] | None = None,
                         shard: str | None = None, redactor: Redactor | None = REDACTOR
                         ) -> tuple[Config, list[Unresolved]]:
    """The config at `path` with its missing secrets replaced, and what was missing; a
    `ConfigError` for every other problem, as `load_config` raises it."""
    path = Path(path)
    env = os.environ if env is None else env
    _, document = read_document(path)
    data = document.data
    base = path.parent.resolve()
    missing: list[Unresolved] = []
    names = _fill_keys(data, env, base, missing)
    for loc, name in unset_variables(data, env):
        if (secret_name(name) or in_params(loc)) and name not in names:
            names.add(name)
            index = loc[1] if len(loc) > 1 and loc[0] == "targets" else None
            missing.append(Unresolved(format_location(loc),
                                      f"environment variable {name} is not set",
                                      index if isinstance(index, int) else None))
    try:
        config = parse_config(data, env=_WithPlaceholders(env, names), base_dir=base,
                              source=path, shard=shard, redactor=redactor)
    except ConfigError as exc:
        raise ConfigError(exc.message, with_lines(exc.details, document)) from None
    return config, missing
