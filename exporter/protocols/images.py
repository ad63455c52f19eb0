"""Images for multimodal probes: a deterministic generated PNG, or a file."""

from __future__ import annotations

import base64
import functools
import struct
import zlib
from pathlib import Path

from exporter.config import MAX_IMAGE_BYTES, ImageSpec
from exporter.files import read_limited

_MEDIA_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                ".gif": "image/gif", ".webp": "image/webp"}


@functools.cache
def generated_png(width: int, height: int) -> bytes:
    """A deterministic RGB PNG with gradients and a grid, so the encoder has real work to do."""
    rows = bytearray()
    for y in range(height):
        rows.append(0)  # filter: none
        for x in range(width):
            grid = 255 if (x // 32 + y // 32) % 2 else 0
            rows += bytes(((x * 255) // max(1, width - 1), (y * 255) // max(1, height - 1),
                           grid))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(bytes(rows), 6)) + chunk(b"IEND", b""))


@functools.cache
def _file_image(path: str) -> tuple[str, bytes]:
    file = Path(path)
    media_type = _MEDIA_TYPES.get(file.suffix.lower())
    if media_type is None:
        raise ValueError(f"unsupported image type {file.suffix!r} (png, jpeg, gif, webp)")
    # Through the file guard: checked at load, the file may have been swapped for a FIFO since.
    return media_type, read_limited(file, MAX_IMAGE_BYTES)


def image_payload(spec: ImageSpec) -> tuple[str, str]:
    """(media type, base64 data) of the probe's image; cached, so built once per process."""
    if spec.path:
        media_type, data = _file_image(spec.path)
    else:
        media_type, data = "image/png", generated_png(spec.width, spec.height)
    return media_type, _b64(data)


@functools.lru_cache(maxsize=16)
def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def data_url(spec: ImageSpec) -> str:
    """The image as a `data:` URL (OpenAI `image_url`)."""
    media_type, data = image_payload(spec)
    return f"data:{media_type};base64,{data}"
