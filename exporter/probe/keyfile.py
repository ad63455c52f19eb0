"""API keys from `api_key_file`, re-read when the file changes.

A sidecar that refreshes a short-lived token (a Vertex AI access token, a Bedrock API key)
rewrites the file; the next probe of the target sends the new token. Checking costs one
`stat()` per probe; the file is read only when its modification time, size or inode changed.
A file that is missing, unreadable or holds no valid key keeps the last good key (logged once
per change). Every new key is made known to the redactor before it is sent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.config import MAX_KEY_BYTES, Secret, Target, clean_key
from exporter.files import FileRefused, read_limited, signature_of
from exporter.log import Redactor

_Signature = tuple[int, int, int]  # mtime_ns, size, inode


@dataclass(slots=True)
class _Seen:
    signature: _Signature | None
    key: Secret | None
    problem: str | None = None  # why the file at `signature` gave no key


class KeyFiles:
    """The current key of each target, from its `api_key_file` when it has one."""

    def __init__(self, redactor: Redactor, logger: Any) -> None:
        self._redact = redactor
        self._log = logger
        self._seen: dict[Path, _Seen] = {}

    def key(self, target: Target) -> Secret | None:
        """The key to send now: the file's, re-read if it changed; else the loaded one."""
        path = target.key_file
        if path is None:
            return target.api_key
        seen = self._seen.setdefault(path, _Seen(None, target.api_key))
        try:
            info = os.stat(path)
        except OSError as exc:
            self._keep(path, seen, None, exc.strerror or str(exc))
            return seen.key
        signature = signature_of(info)
        if signature == seen.signature:
            return seen.key
        try:
            key = clean_key(read_limited(path, MAX_KEY_BYTES).decode("utf-8-sig"))
        except OSError as exc:
            self._keep(path, seen, signature, exc.strerror or str(exc))
        except FileRefused as exc:
            self._keep(path, seen, signature, str(exc))
        except UnicodeDecodeError:  # never quote the bytes: they are the key
            self._keep(path, seen, signature, "not UTF-8 text")
        except ValueError as exc:
            self._keep(path, seen, signature, f"the key {exc}")
        else:
            if seen.key is None or key != seen.key.reveal():
                self._redact.hold(("api_key_file", path), (key,))  # in use until it changes
            seen.signature, seen.key, seen.problem = signature, Secret(key), None
        return seen.key

    def _keep(self, path: Path, seen: _Seen, signature: _Signature | None, why: str) -> None:
        """Keep the last good key; say so once per change of the file."""
        if (signature, why) != (seen.signature, seen.problem):
            self._log.warning("api key file unreadable; keeping the last key",
                              path=str(path), error=why)
        seen.signature, seen.problem = signature, why
