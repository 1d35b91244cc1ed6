"""Fixtures for the test suite: isolated cache/config directories and fixture repos."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import make_fixture_repo


@pytest.fixture(autouse=True)
def isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own cache and config directories; nothing touches ~/.cache."""
    base = tmp_path_factory.mktemp("torchtalk-home")
    monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(base / "cache"))
    monkeypatch.setenv("TORCHTALK_CONFIG_DIR", str(base / "config"))
    return base


@pytest.fixture
def minitorch_repo(tmp_path: Path) -> Path:
    """A fresh git repository holding the minitorch fixture framework."""
    return make_fixture_repo("minitorch", tmp_path / "minitorch")


@pytest.fixture
def miniext_repo(tmp_path: Path) -> Path:
    """A fresh git repository holding the miniext extension fixture."""
    return make_fixture_repo("miniext", tmp_path / "miniext")
