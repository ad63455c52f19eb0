"""Load `config.yaml` into a validated, frozen config; every problem is reported with its location.

Bounded bytes → YAML with bounded depth and alias expansion (`exporter.files`) → `${VAR}`
interpolation → pydantic models per section (`extra="forbid"`, frozen, finite numbers) →
cross-field checks (probe names, key and image files, intervals) → a flat probe plan of `Series`
(one per target × model × probe) with every setting resolved. Every problem of a file is reported
in one `ConfigError`, and `load_config` raises nothing else, whatever the file holds. The file's
secrets are known to the redactor before any problem is reported, and no problem quotes a secret
or a substituted `${VAR}` value (`interpolate`).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ValidationError,
)

from exporter.config.cadence import check_cadence
from exporter.config.checks import Loc, check_target
from exporter.config.checks import problem as _problem
from exporter.config.errors import ConfigError, ConfigProblem, format_location
from exporter.config.expand import (
    bucket_edges,
    check_references,
    check_unique,
    plan_series,
    shard_series,
)
from exporter.config.interpolate import Scrubber, Substitution, interpolate
from exporter.config.judge import judge_problems
from exporter.config.model import Config, KeyKind, KeySource, Series, Target
from exporter.config.network import (
    AWS_EXTRA_MISSING,
    MAX_TLS_FILE_BYTES,
    TLS,
    Proxy,
    TLSProblem,
    aws_extra_installed,
    build_tls,
    resolve_proxy,
)
from exporter.config.probe import ProbeConfig, ProbeKind
from exporter.config.schema import (
    CONTROL,
    GlobalConfig,
    SimulatorConfig,
    TargetConfig,
)
from exporter.config.secrets import document_secrets
from exporter.config.shard import parse_shard
from exporter.config.simkey import points_at, process_key
from exporter.config.types import (
    MAX_PROBE_NAME,
    Secret,
)
from exporter.config.urls import split_query
from exporter.files import FileRefused, YAMLDocument, parse_yaml, read_limited
from exporter.log import REDACTOR, Redactor
from exporter.state import NO_DEFAULT, default_state_dir

# ---------------------------------------------------------------------------------------------
# Loading

MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_KEY_BYTES = 64 * 1024
MAX_IMAGE_BYTES = 20 * 1024 * 1024  # what OpenAI and Anthropic accept per image
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
SECTIONS = ("global", "simulator", "probes", "targets")
_KEY_CHARACTERS = re.compile(r"^[\x21-\x7e]+$")  # what an HTTP header carries safely
# pydantic's words for YAML users (a "tuple" or "instance of TargetConfig" means nothing there).
_PLAIN_MESSAGES = {"extra_forbidden": "unknown key", "model_type": "expected a mapping",
                   "dict_type": "expected a mapping", "tuple_type": "expected a list",
                   "list_type": "expected a list"}
_Model = TypeVar("_Model", bound=BaseModel)


def validate_section(model: type[_Model], value: Any, loc: Loc,
              problems: list[ConfigProblem]) -> _Model | None:
    """One section through its pydantic model; its errors become located problems."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        reported = {p.location for p in problems}
        for err in exc.errors(include_url=False):
            parts = tuple("global" if p == "global_" else p for p in err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            if parts and parts[-1] == "[key]":  # a mapping key, not a value, is wrong
                parts, message = parts[:-1], f"invalid key: {message}"
            message = _PLAIN_MESSAGES.get(err["type"], message)
            where = (*loc, *parts)
            if format_location(where) in reported:
                continue  # already explained (e.g. an unset variable left it empty)
            problems.append(_problem(where, message))
        return None


def _resolve_key(raw: Mapping[str, Any], index: int, env: Mapping[str, str], base: Path,
                 problems: list[ConfigProblem],
                 reads: list[tuple[Path, bytes]]) -> tuple[Secret | None, KeySource]:
    """Read the API key from the environment, a file or the config; strip stray whitespace
    (and say which).

    Works on the target as written, so a key problem is reported next to schema problems.
    """
    where = ("targets", index)
    env_name, file_name, inline = (raw.get(k) for k in ("api_key_env", "api_key_file", "api_key"))
    if isinstance(env_name, str) and env_name:
        source = KeySource(KeyKind.ENV, env_name)
        value = env.get(env_name)
        if value is None:  # reported before validation
            return None, source
    elif isinstance(file_name, str) and file_name:
        source = KeySource(KeyKind.FILE, file_name)
        path = key_file_path(file_name, base)
        try:
            content = read_limited(path, MAX_KEY_BYTES)
            value = content.decode("utf-8-sig")
        except OSError as exc:
            problems.append(_problem((*where, "api_key_file"),
                                     f"cannot read {path}: {exc.strerror or exc}"))
            return None, source
        except FileRefused as exc:
            problems.append(_problem((*where, "api_key_file"), f"{path}: {exc}"))
            return None, source
        except UnicodeDecodeError:  # never quote the bytes: they are the key
            problems.append(_problem((*where, "api_key_file"), f"{path}: not UTF-8 text"))
            return None, source
        reads.append((path, content))
    elif isinstance(inline, str) and inline:
        value, source = inline, KeySource(KeyKind.LITERAL)
    else:
        return None, KeySource()
    try:
        key = clean_key(value)
    except ValueError as exc:
        problems.append(_problem(where, f"the API key from {source} {exc}"))
        return None, source
    # The most common cause of a 401: a trailing newline from `echo` or a secret file.
    start = value.index(key)
    return Secret(key), replace(source, leading=value[:start],
                                trailing=value[start + len(key):])


def clean_key(value: str) -> str:
    """An API key without surrounding whitespace; ValueError (words to follow "the API key
    from …") when no HTTP header can carry it."""
    stripped = value.strip()
    if not stripped:
        raise ValueError("is empty")
    if not _KEY_CHARACTERS.match(stripped):
        # Two lines, a space or a control character: never a key an HTTP header can carry.
        raise ValueError("must be one line of printable ASCII without spaces")
    return stripped


def key_file_path(file_name: str, base: Path) -> Path:
    """Where `api_key_file` points (relative to the config's directory)."""
    path = Path(file_name)
    return path if path.is_absolute() else base / path


def _check_image(probe: ProbeConfig, name: str, base: Path,
                 problems: list[ConfigProblem]) -> ProbeConfig:
    """A probe whose image file exists, is readable and supported; its path made absolute."""
    if probe.image is None or probe.image.path is None:
        return probe
    loc: Loc = ("probes", name, "image", "path")
    path = Path(probe.image.path)
    if not path.is_absolute():
        path = base / path
    if path.suffix.lower() not in _IMAGE_SUFFIXES:
        problems.append(_problem(loc, f"unsupported image type {path.suffix!r} "
                                 "(png, jpeg, gif, webp)"))
        return probe
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        problems.append(_problem(loc, f"cannot read {path}: {exc.strerror or exc}"))
        return probe
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_IMAGE_BYTES:
        problems.append(_problem(loc, f"{path}: must be a regular file of at most "
                                 f"{MAX_IMAGE_BYTES // 2**20} MiB"))
        return probe
    image = probe.image.model_copy(update={"path": str(path)})
    return probe.model_copy(update={"image": image})


def _check_probe_names(names: Iterable[Any], problems: list[ConfigProblem]) -> None:
    for name in names:
        if isinstance(name, str) and (not name.strip() or CONTROL.search(name)
                                      or len(name) > MAX_PROBE_NAME):
            problems.append(_problem(("probes", name), "a probe name must be non-empty text of "
                                     f"at most {MAX_PROBE_NAME} characters, without control "
                                     "characters"))


def parse_config(data: Any, *, env: Mapping[str, str] | None = None,
                 base_dir: Path | None = None, source: Path | None = None,
                 shard: str | None = None, redactor: Redactor | None = None) -> Config:
    """Validate a parsed YAML document into a `Config`, or raise `ConfigError`.

    Every section is validated on its own and the cross-field checks run on what is readable,
    so one run reports every problem of the file. `shard` ("i/n", e.g. from `--shard`)
    overrides `global.shard`: only the series whose stable hash falls in shard i are kept, so n
    replicas probe every series exactly once. `redactor` learns the document's secrets before
    anything else happens. Problems never repeat a substituted `${VAR}` value or a secret.
    """
    return _parse(data, os.environ if env is None else env, base_dir or Path.cwd(), source,
                  shard, [], redactor)


def _parse(data: Any, env: Mapping[str, str], base_dir: Path, source: Path | None,
           shard: str | None, reads: list[tuple[Path, bytes]],
           redactor: Redactor | None) -> Config:
    if data is None:
        raise ConfigError("invalid config", [ConfigProblem("", "the file is empty")])
    if not isinstance(data, dict):
        raise ConfigError("invalid config", [ConfigProblem("", "the top level must be a mapping")])
    problems: list[ConfigProblem] = []
    substituted: list[Substitution] = []
    data = interpolate(data, (), env, problems, substituted)
    # Known before a word about this config is printed (its errors, a reload's answer).
    secrets = [*document_secrets(data, env), *(s.value for s in substituted if s.secret)]
    if redactor is not None:
        redactor.add(secrets)
    try:
        return _build(data, env, base_dir, source, shard, reads, problems, substituted)
    except ConfigError as exc:
        raise Scrubber(substituted, secrets).error(exc) from None


def _build(data: dict[str, Any], env: Mapping[str, str], base_dir: Path, source: Path | None,
           shard: str | None, reads: list[tuple[Path, bytes]], problems: list[ConfigProblem],
           substituted: list[Substitution]) -> Config:
    if "global" in data and data["global"] is None:  # `global:` with everything commented out
        del data["global"]
    problems += [_problem((str(key),), "unknown key") for key in data if key not in SECTIONS]
    raw_targets = data.get("targets")
    raw_targets = raw_targets if isinstance(raw_targets, list) else []
    # Named environment variables are checked up front, so they are reported even when
    # other problems stop validation.
    for index, target in enumerate(raw_targets):
        name = target.get("api_key_env") if isinstance(target, dict) else None
        if isinstance(name, str) and name not in env:
            problems.append(_problem(("targets", index, "api_key_env"),
                                     f"environment variable {name} is not set"))

    global_ = validate_section(GlobalConfig, data.get("global", {}), ("global",), problems)
    simulator = (None if data.get("simulator") is None else
                 validate_section(SimulatorConfig, data["simulator"], ("simulator",), problems))
    raw_probes = data.get("probes")
    probes: dict[str, ProbeConfig | None] = {}
    if not isinstance(raw_probes, dict):
        problems.append(_problem(("probes",), "expected a mapping of probe names to probes"))
    elif not raw_probes:
        problems.append(_problem(("probes",), "define at least one probe"))
    else:
        _check_probe_names(raw_probes, problems)
        for name, value in raw_probes.items():
            probe = validate_section(ProbeConfig, value, ("probes", name), problems)
            probes[name] = probe and _check_image(probe, name, base_dir, problems)
    if not isinstance(data.get("targets"), list):
        problems.append(_problem(("targets",), "expected a list of targets"))
    elif not raw_targets:
        problems.append(_problem(("targets",), "define at least one target"))
    targets = [validate_section(TargetConfig, value, ("targets", index), problems)
               for index, value in enumerate(raw_targets)]

    # Cross-field checks, on the sections as written, so they run even where validation failed.
    problems += check_cadence(data)
    names: dict[str, int] = {}
    keys: list[tuple[Secret | None, KeySource]] = []
    paths: list[tuple[Proxy | None, TLS] | None] = []
    for index, (raw, target) in enumerate(zip(raw_targets, targets, strict=True)):
        if not isinstance(raw, dict):
            keys.append((None, KeySource()))
            paths.append(None)
            continue
        name = raw.get("name")
        if isinstance(name, str):
            if name in names:
                problems.append(_problem(("targets", index, "name"),
                                         f"{name!r} is already used by targets[{names[name]}]"))
            names.setdefault(name, index)
        wanted = raw.get("probes")
        for j, probe_name in enumerate(wanted if isinstance(wanted, list) else []):
            if isinstance(probe_name, str) and probes and probe_name not in probes:
                problems.append(_problem(
                    ("targets", index, "probes", j),
                    f"unknown probe {probe_name!r} (defined: {', '.join(probes)})"))
        keys.append(_resolve_key(raw, index, env, base_dir, problems, reads))
        if target is not None:
            check_target(target, index, probes, problems)
            paths.append(_resolve_network(target, index, env, base_dir, problems, reads))
        else:
            paths.append(None)
    problems += [_problem(loc, error) for loc, error in judge_problems(
        global_.judge if global_ is not None else None, probes, targets)]
    if global_ is not None and global_.budget is not None:
        problems += [_problem(("global", "budget", "shares", *where), message)
                     for where, message in global_.budget.share_problems(names)]
    if simulator is not None and not simulator.api_key:
        # Never an open simulator: another local user could drive the endpoint we measure. Its
        # key is the one its targets name, else one generated for this process.
        named = {key.reveal() for target, (key, _) in zip(targets, keys, strict=True)
                 if target is not None and key is not None
                 and points_at(target.base_url, simulator.listen)}
        if len(named) > 1:
            problems.append(_problem(("simulator", "api_key"), "targets point at the simulator "
                                     "with different keys: set simulator.api_key (the one key "
                                     "it accepts), or give those targets the same key"))
        else:
            simulator = simulator.model_copy(
                update={"api_key": named.pop() if named else process_key()})
    if problems or global_ is None:
        raise ConfigError("invalid config", problems)

    resolved_probes = {name: probe for name, probe in probes.items() if probe is not None}
    built = []
    for target, (key, key_source), path in zip(targets, keys, paths, strict=True):
        assert target is not None and path is not None  # or a problem was reported
        proxy, tls = path
        if (simulator is not None and simulator.api_key and key is None
                and key_source.kind is KeyKind.NONE and target.aws_sigv4 is None
                and points_at(target.base_url, simulator.listen)):
            key, key_source = Secret(simulator.api_key), KeySource(KeyKind.SIMULATOR)
        if target.aws_sigv4 is not None:
            key_source = KeySource(KeyKind.AWS_SIGV4, target.aws_sigv4.region + (
                f" (profile {target.aws_sigv4.profile})" if target.aws_sigv4.profile else ""))
        base_url, in_url = split_query(target.base_url)  # its query goes after the API path
        built.append(Target(
            name=target.name, api=target.api, base_url=base_url, api_key=key,
            headers=dict(target.headers), query={**dict(in_url), **target.query},
            path=target.path,
            models=target.model_names,
            # `probes: []`: a target that only judges
            probes=tuple(resolved_probes) if target.probes is None else target.probes,
            interval=target.interval or global_.interval,
            timeout=target.timeout or global_.timeout,
            jitter=global_.jitter if target.jitter is None else target.jitter,
            prices=dict(target.prices), key_from=key_source,
            key_file=key_file_path(target.api_key_file, base_dir)
            if target.api_key_file else None,
            proxy=proxy, tls=tls, aws_sigv4=target.aws_sigv4,
            params=dict(target.params), model_family=target.families,
            model_probes={e.name: e.probes for e in target.entries if e.probes},
            model_interval={e.name: e.interval for e in target.entries if e.interval},
            discover=target.discover, slo=target.slo, model_slo=dict(target.model_slo),
        ))
    series, _ = plan_series(global_, resolved_probes, built, {})
    check_unique(series)
    check_references(series)
    if len(series) > global_.max_series:
        raise ConfigError("invalid config", [ConfigProblem(
            "targets", f"{len(series)} series (targets × models × probes) exceed "
            f"global.max_series={global_.max_series}; raise it if this is intended")])
    # From every series, before sharding: all replicas of a sharded fleet share the edges.
    buckets = bucket_edges(global_.buckets, series)
    shard = shard or global_.shard
    series = shard_series(series, shard)
    if shard is not None:
        count = parse_shard(shard)[1]
        budget = global_.budget
        if budget is not None and not budget.per_shard and count > 1:
            # n replicas of one config must not spend n budgets.
            global_ = global_.model_copy(update={"budget": budget.model_copy(
                update={"max_cost_per_day": budget.max_cost_per_day / count})})
    state_dir = (base_dir / global_.state_dir if global_.state_dir is not None
                 else default_state_dir(source) if source is not None else None)
    if state_dir is None and source is not None and _needs_state(global_, series):
        raise ConfigError("invalid config", [_problem(("global", "state_dir"), NO_DEFAULT)])
    return Config(global_=global_, simulator=simulator, probes=resolved_probes,
                  targets=tuple(built), series=series, buckets=buckets, source=source,
                  state_dir=state_dir,
                  raw=data, files=tuple(path for path, _ in reads),
                  interpolated_secrets=tuple(dict.fromkeys(s.value for s in substituted
                                                           if s.secret)), shard=shard)


def _needs_state(global_: GlobalConfig, series: Sequence[Series]) -> bool:
    """Whether the config keeps state in `global.state_dir`: a spend record there (a budget
    without its own `state_file`) or identity references."""
    budget = global_.budget
    return (budget is not None and not budget.state_file) or any(
        s.probe.kind is ProbeKind.IDENTITY for s in series)


def _resolve_network(target: TargetConfig, index: int, env: Mapping[str, str], base: Path,
                     problems: list[ConfigProblem],
                     reads: list[tuple[Path, bytes]]) -> tuple[Proxy | None, TLS] | None:
    """The target's proxy (from `proxy_url` or the environment) and TLS context; signing's
    library. Problems are located at the key at fault."""
    where: Loc = ("targets", index)
    found = len(problems)
    proxy = None
    try:
        proxy = resolve_proxy(target.base_url, target.proxy_url, env)
    except ValueError as exc:
        problems.append(_problem(where if target.proxy_url is None else (*where, "proxy_url"),
                                 str(exc)))
    tls = TLS()
    try:
        tls = build_tls(target.tls, target.insecure_skip_verify, base, reads)
    except TLSProblem as exc:
        problems.append(_problem((*where, "tls", exc.key), str(exc)))
    if target.aws_sigv4 is not None and not aws_extra_installed():
        problems.append(_problem((*where, "aws_sigv4"), AWS_EXTRA_MISSING))
    return (proxy, tls) if len(problems) == found else None


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None,
                shard: str | None = None, redactor: Redactor | None = REDACTOR) -> Config:
    """Read and validate a YAML config file, or raise `ConfigError` — and nothing else.

    `redactor` (the process's) learns every secret of the file as soon as it is parsed, so no
    error about it, anywhere, can show one."""
    path = Path(path)
    try:
        return _load(path, os.environ if env is None else env, shard, redactor)
    except ConfigError:
        raise
    except Exception as exc:  # a bug: still a located, one-line answer, never a traceback
        raise ConfigError(f"cannot load {path}", [ConfigProblem(
            "", f"unexpected {type(exc).__name__} while loading (a bug; please report it)")]
        ) from None


def read_document(path: Path) -> tuple[bytes, YAMLDocument]:
    """A config file's bytes and YAML document (bounded read, YAML limits), or `ConfigError`."""
    try:
        raw = read_limited(path, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except FileRefused as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        return raw, parse_yaml(raw)
    except FileRefused as exc:
        raise ConfigError(f"invalid YAML in {path}",
                          [ConfigProblem(where, why) for where, why in exc.problems]) from None


def _load(path: Path, env: Mapping[str, str], shard: str | None,
          redactor: Redactor | None) -> Config:
    raw, document = read_document(path)
    reads: list[tuple[Path, bytes]] = []
    try:
        config = _parse(document.data, env, path.parent.resolve(), path, shard, reads, redactor)
    except ConfigError as exc:
        raise ConfigError(exc.message, with_lines(exc.details, document)) from None
    return replace(config, digest=_digest(raw, reads))


def with_lines(problems: Sequence[ConfigProblem], document: YAMLDocument) -> list[ConfigProblem]:
    """The problems with their lines, in the order of the file."""
    located = [replace(p, line=document.line_of(p.path)) if p.path and p.line is None else p
               for p in problems]
    return sorted(located, key=lambda p: math.inf if p.line is None else p.line)


def _digest(config: bytes, files: Iterable[tuple[Path, bytes | None]]) -> str:
    digest = hashlib.sha256(config)
    for path, content in files:
        digest.update(b"\0" + os.fsencode(path) + b"\0")
        digest.update(b"-" if content is None else hashlib.sha256(content).digest())
    return digest.hexdigest()


def sources_digest(path: str | Path, files: Iterable[Path]) -> str:
    """The digest `load_config` would record for the config file and these files now.

    Equal to `Config.digest` when nothing the config was built from changed on disk, so a
    reload can skip the work (`files` are the running config's key and TLS files).
    """
    def read(file: Path) -> bytes | None:
        try:
            return read_limited(file, max(MAX_KEY_BYTES, MAX_TLS_FILE_BYTES))
        except (OSError, FileRefused):
            return None

    try:
        config = read_limited(Path(path), MAX_CONFIG_BYTES)
    except (OSError, FileRefused):
        return ""
    return _digest(config, [(file, read(file)) for file in files])


def reuse_unchanged(config: Config, previous: Config | None) -> Config:
    """`config` with every target, probe and series that equals one of `previous` replaced by
    that object.

    Comparing the two configs on the event loop at a reload (scheduler, metrics) then costs an
    identity check per unchanged series instead of a deep comparison: call this in a worker
    thread, where the deep comparisons happen once.
    """
    if previous is None:
        return config
    old_targets = {t.name: t for t in previous.targets}
    targets = tuple(old_target if (old_target := old_targets.get(t.name)) == t else t
                    for t in config.targets)
    probes = {name: old if (old := previous.probes.get(name)) == probe else probe
              for name, probe in config.probes.items()}
    by_name = {t.name: t for t in targets}
    old_series = {s.key: s for s in previous.series}
    series = []
    for item in config.series:
        item = replace(item, target=by_name[item.target.name], probe=probes[item.probe_name])
        series.append(old_item if (old_item := old_series.get(item.key)) == item else item)
    return replace(config, targets=targets, probes=probes, series=tuple(series),
                   global_=previous.global_ if previous.global_ == config.global_
                   else config.global_)

