"""Where the read-only shared data lives; tests that need it skip when it is absent.

``HFNCL_SHARED_DATA`` if set, else ``<repo root>/../shared/data``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path:
    """The shared data directory (it may not exist)."""
    return Path(os.environ.get("HFNCL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def published_file(name: str) -> Path:
    """``published/<name>`` of the shared data, or skip the calling test if it is absent."""
    path = shared_data_dir() / "published" / name
    if not path.is_file():
        pytest.skip(f"shared data file {path} is not available")
    return path
