"""Running real tests under the recorder: torch, a compiler, and the recext fixture.

Everything here runs for real: the recorder is compiled against the installed torch, the
fixture extension's C++ op library is compiled and loaded, and pytest runs in a child
process. Tests skip, saying why, where torch or a C++ compiler is missing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, commit_all, environment, git


def require_torch():
    try:
        import torch
    except ImportError:
        pytest.skip("recording needs torch (pip install torch==2.13.0)")
    from indexer.record.native import _compiler

    if _compiler() is None:
        pytest.skip("recording needs a C++ compiler (c++, g++ or clang++)")
    return torch


def libraries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where fixture libraries are compiled for the whole session (each once per content
    of its source), rather than once per test module."""
    return tmp_path_factory.getbasetemp() / "fixture-libraries"


def build_recext_library(cache: Path) -> Path:
    """The recext fixture's op library, compiled once per content of its source."""
    return build_fixture_library(cache, "recext")


def build_fixture_library(cache: Path, fixture: str) -> Path:
    """A fixture extension's op library (``tests/fixtures/<fixture>/csrc/ops.cpp``),
    compiled once per content of its source."""
    from indexer.record.native import NativeUnavailable, compile_against_torch

    torch = require_torch()
    source = FIXTURES / fixture / "csrc" / "ops.cpp"
    key = hashlib.blake2b(source.read_bytes() + torch.__version__.encode(), digest_size=8)
    target = cache / f"{fixture}-{key.hexdigest()}.so"
    if not target.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        try:
            compile_against_torch(torch, source, target)
        except NativeUnavailable as exc:
            pytest.skip(f"the fixture extension does not build here: {exc}")
    return target


def make_recext_repo(dest: Path) -> Path:
    shutil.copytree(
        FIXTURES / "recext", dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    git(dest, "init", "-q", "-b", "main")
    commit_all(dest, "recext fixture")
    return dest


def recext_env(base: Path, library: Path, repo: Path) -> dict[str, str]:
    """The environment the recext tests run in: its op library, its package on the path,
    and a cache and configuration of their own (the recorder is compiled into that cache
    once per torch)."""
    return {
        "RECEXT_LIBRARY": str(library),
        "PYTHONPATH": str(repo),
        "TORCHTALK_CACHE_DIR": str(base / "cache"),
        "TORCHTALK_CONFIG_DIR": str(base / "config"),
    }


def run_pytest(
    repo: Path, *args: str, env: dict[str, str], check_codes: tuple[int, ...] = (0, 1)
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=repo,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in check_codes, done.stdout + done.stderr
    return done


def index_and_record(repo: Path, env: dict[str, str]) -> None:
    """Index ``repo`` and record its suite to the record beside that index, both in the
    cache ``env`` names."""
    from indexer.build import build_index
    from indexer.workspace import Workspace

    with environment(env):
        build_index(Workspace.resolve(repo), show_progress=False)
    run_pytest(repo, "--torchtalk-record", env=env)


def on_recorded_repo(
    recorded: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch, tag: str
) -> Iterator[Path]:
    """A recorded fixture repo for one test, in its environment; put back on main at
    ``tag`` after (what the test edited, committed or checked out is undone)."""
    path, env = recorded
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield path
    git(path, "checkout", "-q", "-f", "main")
    git(path, "reset", "-q", "--hard", tag)
    git(path, "clean", "-qfdx")
