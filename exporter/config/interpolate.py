"""`${VAR}` interpolation, and keeping what it substituted out of error messages.

Every string of the YAML tree may hold `${VAR}` or `${VAR:-default}`. What was substituted is
remembered (`Substitution`), because a value can land where it does not belong — a key in an
`interval`, a token in a `base_url` with a typo — and an error message about that place must
not repeat it: `scrub` writes `${VAR}` back in its place, and removes any other piece of a
substituted value or of a known secret (a validator that quoted part of it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from exporter.config.errors import ConfigError, ConfigProblem, format_location
from exporter.config.secrets import secret_name
from exporter.log import MIN_SECRET, Redactor

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
Loc = tuple[int | str, ...]


@dataclass(frozen=True, slots=True)
class Substitution:
    """One `${VAR}` replaced by the environment's value."""

    name: str
    value: str
    loc: tuple[int | str, ...] = ()  # where in the document it was substituted

    @property
    def secret(self) -> bool:
        """Whether the value is treated as a secret: the variable is named like a credential
        (`*_KEY`, `*TOKEN*`, …), or it went into a request body's `params` (a body field named
        anything may carry a token; the config cannot tell)."""
        return secret_name(self.name) or in_params(self.loc)


def interpolate(node: Any, loc: Loc, env: Mapping[str, str], problems: list[ConfigProblem],
                done: list[Substitution]) -> Any:
    """`node` with `${VAR}` (and `${VAR:-default}`) replaced in every string; each replacement
    from the environment is appended to `done`, each unset variable is a located problem."""
    if isinstance(node, str):
        if "${" not in node:
            return node

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                done.append(Substitution(name, env[name], loc))
                return env[name]
            if default is not None:
                return default
            problems.append(ConfigProblem(format_location(loc),
                                          f"environment variable {name} is not set", path=loc))
            return ""
        return _VAR.sub(substitute, node)
    if isinstance(node, dict):
        return {k: interpolate(v, (*loc, str(k)), env, problems, done) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, (*loc, i), env, problems, done) for i, v in enumerate(node)]
    return node


def in_params(loc: Loc) -> bool:
    """Whether a document location is inside a probe's or a target's `params`."""
    return len(loc) > 2 and loc[0] in ("probes", "targets") and loc[2] == "params"


class Scrubber:
    """Takes substituted values and known secrets out of problem texts."""

    def __init__(self, done: Sequence[Substitution], secrets: Iterable[str]) -> None:
        # Longest first, so a value containing another is written back whole.
        self._named = sorted({(s.value, s.name) for s in done if len(s.value) >= MIN_SECRET},
                             key=lambda pair: len(pair[0]), reverse=True)
        self._redact = Redactor([*secrets, *(value for value, _ in self._named)])

    def __call__(self, text: str) -> str:
        """`text` with each substituted value as `${VAR}`, and no piece of a secret."""
        for value, name in self._named:
            text = text.replace(value, f"${{{name}}}")
        return self._redact(text)

    def error(self, exc: ConfigError) -> ConfigError:
        """`exc` with every problem scrubbed."""
        return ConfigError(self(exc.message), [
            replace(p, location=self(p.location), error=self(p.error)) for p in exc.details])


def unset_variables(node: Any, env: Mapping[str, str], loc: Loc = ()) -> Iterable[tuple[Loc, str]]:
    """Every `${VAR}` without a default that `env` does not set: (where, name)."""
    if isinstance(node, str):
        for match in _VAR.finditer(node):
            if match.group(2) is None and match.group(1) not in env:
                yield loc, match.group(1)
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from unset_variables(value, env, (*loc, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from unset_variables(value, env, (*loc, index))
