"""The exporter's own state files: what must outlive a restart (the day's spend, identity
baselines), kept in one private directory per config.

`global.state_dir` names the directory; by default it is private to the config file
(`$STATE_DIRECTORY`, `$XDG_STATE_HOME` or `~/.local/state`, then `llm-probe-exporter/<name>-
<hash of the config's path>`), so two exporters on one host never share a record. A directory is
used only when no other user can write to it (created 0700), so another user cannot plant a
record (root's and this user's group's directories are accepted: a Kubernetes
volume with `fsGroup`); a record is read only when it is a regular file this user owns, and a file
is replaced only when it is one of ours (a JSON object whose `format` names its kind) — a text
file, a device or another program's file at the path is refused and named, never overwritten.
Writes are atomic: a temp file beside the record, fsync, rename.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from exporter.files import FileRefused, read_limited

APP = "llm-probe-exporter"


class StateRefused(Exception):
    """A state directory or file the exporter will not use; the message names it and why."""


def state_format(kind: str) -> str:
    """The `format` value that marks a record of `kind` as the exporter's own."""
    return f"{APP}/{kind}/v1"


def default_state_dir(config_path: Path, env: Mapping[str, str] | None = None) -> Path:
    """The private state directory of the config at `config_path` when none is configured."""
    env = os.environ if env is None else env
    if env.get("STATE_DIRECTORY"):  # systemd's StateDirectory=: already private to the unit
        base = Path(env["STATE_DIRECTORY"].split(":")[0])
    elif env.get("XDG_STATE_HOME"):
        base = Path(env["XDG_STATE_HOME"]) / APP
    elif env.get("HOME") and env["HOME"] != "/":
        base = Path(env["HOME"]) / ".local" / "state" / APP
    else:  # no home (a container user): a per-user directory under the temp dir
        base = Path(tempfile.gettempdir()) / f"{APP}-{os.geteuid()}"
    # Not resolved: a Kubernetes ConfigMap's file is a symlink whose target changes with every
    # update, and the record must stay where it was.
    absolute = Path(os.path.abspath(config_path))
    digest = hashlib.sha256(os.fsencode(absolute)).hexdigest()[:12]
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in absolute.stem)[:40]
    return base / f"{stem or 'config'}-{digest}"


def private_dir(path: Path) -> Path:
    """`path` as a directory only this user (and root) can write to: created 0700 with its
    missing parents; StateRefused otherwise.

    Owned by root is accepted, and writable by this user's own group (a Kubernetes volume with
    `fsGroup`); owned by another user, or writable by others (a sticky temp dir), is not."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise StateRefused(f"state directory {path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise StateRefused(f"state directory {path}: not a directory (a symlink or a file)")
    if info.st_uid not in (os.geteuid(), 0):
        raise StateRefused(f"state directory {path}: owned by another user (uid "
                           f"{info.st_uid}); the exporter keeps state only where it alone can "
                           "write")
    if info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP
                                       and info.st_gid not in (os.getegid(), *os.getgroups())):
        raise StateRefused(f"state directory {path}: writable by other users (mode "
                           f"{stat.S_IMODE(info.st_mode):o}); make it 0700")
    return path


def read_state(path: Path, kind: str, limit: int,
               legacy: Callable[[Mapping[str, Any]], bool] | None = None) -> dict[str, Any] | None:
    """The record of `kind` at `path`; None when there is none yet. StateRefused when the path
    holds something else or cannot be read: the caller must not act as if it were empty.

    `legacy` recognises a record an earlier version wrote without `format`."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateRefused(f"state file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise StateRefused(f"state file {path}: not a regular file (a symlink, a device or a "
                           "directory); the exporter will not use or replace it")
    if info.st_uid != os.geteuid():
        raise StateRefused(f"state file {path}: owned by another user (uid {info.st_uid}); "
                           "the exporter will not trust or replace it")
    try:
        data = json.loads(read_limited(path, limit))
    except OSError as exc:
        raise StateRefused(f"state file {path}: {exc.strerror or exc}") from None
    except FileRefused as exc:
        raise StateRefused(f"state file {path}: {exc}") from None
    except (ValueError, RecursionError):
        raise StateRefused(f"state file {path}: not one of the exporter's records (not "
                           "JSON); the exporter will not use or replace it") from None
    if isinstance(data, dict) and (data.get("format") == state_format(kind)
                                   or (legacy is not None and "format" not in data
                                       and legacy(data))):
        return data
    raise StateRefused(f"state file {path}: not the exporter's {kind} record; the exporter "
                       "will not use or replace it")


def write_state(path: Path, kind: str, data: Mapping[str, Any], limit: int,
                legacy: Callable[[Mapping[str, Any]], bool] | None = None) -> None:
    """Write the record of `kind` at `path` atomically (call off the event loop).

    StateRefused when the directory is not private or the path holds anything but one of our
    records of `kind` (the file is left as it is); OSError (a full disk) leaves the old record
    and no temp file."""
    private_dir(path.parent)
    read_state(path, kind, limit, legacy)  # refuses a file that is not ours
    text = json.dumps({"format": state_format(kind), **data}, separators=(",", ":"))
    if len(text) > limit:
        raise StateRefused(f"state file {path}: the {kind} record would exceed {limit} bytes")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{kind}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
