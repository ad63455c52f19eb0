"""The exporter's own state files: what must outlive a restart (the day's spend, identity
baselines), kept in one private directory per config.

`global.state_dir` names the directory; by default it is private to the config file
(`$STATE_DIRECTORY`, `$XDG_STATE_HOME` or `~/.local/state`, then `llm-probe-exporter/<name>-
<hash of the config's path>`), so two exporters on one host never share a record. With none of
those (no HOME, a container's `--user N`) there is no default: never a shared temporary
directory, where another user could take the path first. A directory is used only when no
other user can write to it (created 0700), so another user cannot plant a record (root's and
this user's group's directories are accepted: a Kubernetes volume with `fsGroup`), and only when
no other user can rename or replace it either: every ancestor up to `/` is this user's or
root's and writable by no other user unless sticky (like /tmp). Files are then read and written
relative to a descriptor of that same directory (`dir_fd`), so the directory checked is the
directory written. A record is read only when it is a regular file this user owns, and a file
is replaced only when it is one of ours (a JSON object whose `format` names its kind) — a
text file, a device or another program's file at the path is refused and named, never
overwritten. Writes are atomic: a temp file beside the record, fsync, rename, fsync of the
directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from exporter.files import FileRefused, read_limited

APP = "llm-probe-exporter"


NO_DEFAULT = ("no private place for state: HOME is unset or /, and neither $STATE_DIRECTORY "
              "nor $XDG_STATE_HOME is set; set global.state_dir (the exporter never falls back "
              "to a shared temporary directory)")


class StateRefused(Exception):
    """A state directory or file the exporter will not use; the message names it and why."""


def state_format(kind: str) -> str:
    """The `format` value that marks a record of `kind` as the exporter's own."""
    return f"{APP}/{kind}/v1"


def default_state_dir(config_path: Path, env: Mapping[str, str] | None = None) -> Path | None:
    """The private state directory of the config at `config_path` when none is configured;
    None when the environment names no private place (see NO_DEFAULT)."""
    env = os.environ if env is None else env
    if env.get("STATE_DIRECTORY"):  # systemd's StateDirectory=: already private to the unit
        base = Path(env["STATE_DIRECTORY"].split(":")[0])
    elif env.get("XDG_STATE_HOME"):
        base = Path(env["XDG_STATE_HOME"]) / APP
    elif env.get("HOME") and env["HOME"] != "/":
        base = Path(env["HOME"]) / ".local" / "state" / APP
    else:  # no home (a container user): no private place; never a shared temp dir
        return None
    # Not resolved: a Kubernetes ConfigMap's file is a symlink whose target changes with every
    # update, and the record must stay where it was.
    absolute = Path(os.path.abspath(config_path))
    digest = hashlib.sha256(os.fsencode(absolute)).hexdigest()[:12]
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in absolute.stem)[:40]
    return base / f"{stem or 'config'}-{digest}"


def _others_can_write(info: os.stat_result) -> bool:
    """Users other than this one (and root) can add, remove or rename entries."""
    mode = info.st_mode
    return bool(mode & stat.S_IWOTH or (mode & stat.S_IWGRP
                                        and info.st_gid not in (os.getegid(), *os.getgroups())))


def _check_dir(path: Path, info: os.stat_result) -> None:
    """StateRefused unless `info` is a directory only this user (and root) can write to."""
    if not stat.S_ISDIR(info.st_mode):
        raise StateRefused(f"state directory {path}: not a directory (a symlink or a file)")
    if info.st_uid not in (os.geteuid(), 0):
        raise StateRefused(f"state directory {path}: owned by another user (uid "
                           f"{info.st_uid}); the exporter keeps state only where it alone can "
                           "write")
    if _others_can_write(info):
        raise StateRefused(f"state directory {path}: writable by other users (mode "
                           f"{stat.S_IMODE(info.st_mode):o}); make it 0700")


def _check_ancestors(path: Path) -> None:
    """StateRefused unless no other user can rename or replace `path`: every ancestor up to
    `/` is ours or root's, and writable by no other user unless it is sticky (like /tmp, where
    only an entry's owner may rename it). All of them: a root-owned folder inside another
    user's can be renamed by that user."""
    for ancestor in Path(os.path.realpath(path)).parents:
        try:
            info = os.stat(ancestor)
        except OSError as exc:
            raise StateRefused(f"state directory {path}: its ancestor {ancestor}: "
                               f"{exc.strerror or exc}") from None
        if info.st_uid not in (os.geteuid(), 0):
            raise StateRefused(f"state directory {path}: its ancestor {ancestor} is owned by "
                               f"another user (uid {info.st_uid}), who could rename or replace "
                               "it")
        if _others_can_write(info) and not info.st_mode & stat.S_ISVTX:
            raise StateRefused(f"state directory {path}: its ancestor {ancestor} is writable "
                               f"by other users (mode {stat.S_IMODE(info.st_mode):o}), who "
                               "could rename or replace it")


def private_dir(path: Path) -> Path:
    """`path` as a directory only this user (and root) can write to, rename or replace:
    created 0700 with its missing parents; StateRefused otherwise.

    Owned by root is accepted, and writable by this user's own group (a Kubernetes volume with
    `fsGroup`); owned by another user, or writable by others (a sticky temp dir), is not; nor is
    a directory under an ancestor another user could rename (see the module's docstring)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise StateRefused(f"state directory {path}: {exc.strerror or exc}") from None
    _check_dir(path, info)
    _check_ancestors(path)
    return path


def open_private_dir(path: Path) -> int:
    """A descriptor of the private directory `path` (see `private_dir`), checked through the
    descriptor itself: the directory checked is the one later reads and writes go to. The
    caller closes it."""
    private_dir(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise StateRefused(f"state directory {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        _check_dir(path, info)
        then = os.lstat(path)
        if (then.st_dev, then.st_ino) != (info.st_dev, info.st_ino):
            raise StateRefused(f"state directory {path}: replaced while it was being checked")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_state(path: Path, kind: str, limit: int,
               legacy: Callable[[Mapping[str, Any]], bool] | None = None) -> dict[str, Any] | None:
    """The record of `kind` at `path`; None when there is none yet. StateRefused when the path
    holds something else or cannot be read: the caller must not act as if it were empty.

    `legacy` recognises a record an earlier version wrote without `format`."""
    try:
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateRefused(f"state file {path}: {exc.strerror or exc}") from None
    try:
        return _read_at(fd, path, kind, limit, legacy)
    finally:
        os.close(fd)


def _read_at(dir_fd: int, path: Path, kind: str, limit: int,
             legacy: Callable[[Mapping[str, Any]], bool] | None) -> dict[str, Any] | None:
    """`read_state` of the entry `path.name` in the directory `dir_fd`."""
    try:
        info = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
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
        data = json.loads(read_limited(path.name, limit, dir_fd=dir_fd, follow=False))
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
                legacy: Callable[[Mapping[str, Any]], bool] | None = None, *,
                must_exist: bool = False) -> None:
    """Write the record of `kind` at `path` atomically (call off the event loop).

    StateRefused when the directory is not private or the path holds anything but one of our
    records of `kind` (the file is left as it is), or, with `must_exist`, holds nothing (a
    record that vanished); OSError (a full disk) leaves the old record and no temp file."""
    text = json.dumps({"format": state_format(kind), **data}, separators=(",", ":"))
    if len(text) > limit:
        raise StateRefused(f"state file {path}: the {kind} record would exceed {limit} bytes")
    dir_fd = open_private_dir(path.parent)
    try:
        # Refuses a file that is not ours.
        if _read_at(dir_fd, path, kind, limit, legacy) is None and must_exist:
            raise StateRefused(f"state file {path}: the {kind} record vanished (removed or "
                               "renamed by someone else); the exporter will not start it again "
                               "from nothing")
        tmp = f".{kind}-{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        with contextlib.suppress(OSError):  # the rename itself, on disk
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
