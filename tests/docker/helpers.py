"""Shared by the tests of tests/docker."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest


def tool(name: str, package: str) -> str:
    """A linter installed by a package of the test extra, found on PATH or beside this Python."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if not found:
        pytest.fail(f"{name} is missing: it comes with {package} (pip install -e '.[test]')")
    return found
