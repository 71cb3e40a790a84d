"""Test files the end-to-end tests move and compare: random content, SHA-256."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def random_file(path: Path, size: int) -> str:
    """Write `size` random bytes to `path`; return their SHA-256 (hex)."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(left, 8 << 20))
            h.update(chunk)
            f.write(chunk)
            left -= len(chunk)
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
