"""Helpers for tests: fixture repositories, git, corpus trees, and reading lines from files."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from indexer.environ import environment

if TYPE_CHECKING:
    from indexer.query.index import Index

FIXTURES = Path(__file__).parent / "fixtures"
CORPORA = Path.home() / ".cache" / "torchtalk-corpora"
CORPUS_SOURCES = {
    # name: (environment override, default location, a file that proves the tree is there)
    "pytorch": (
        "TORCHTALK_PYTORCH_SOURCE",
        CORPORA / "pytorch-2.6",
        "aten/src/ATen/native/native_functions.yaml",
    ),
    "vllm": ("TORCHTALK_VLLM_SOURCE", CORPORA / "vllm-0.33.0", "csrc/torch_bindings.cpp"),
    "torchvision": (
        "TORCHTALK_TORCHVISION_SOURCE",
        CORPORA / "torchvision-0.21",
        "torchvision/csrc/vision.cpp",
    ),
    "pytorch_sparse": (
        "TORCHTALK_PYTORCH_SPARSE_SOURCE",
        CORPORA / "pytorch_sparse",
        "csrc/convert.cpp",
    ),
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(
        repo,
        "-c",
        "user.name=TorchTalk Tests",
        "-c",
        "user.email=tests@torchtalk.invalid",
        "commit",
        "-q",
        "-m",
        message,
    )
    return git(repo, "rev-parse", "HEAD").strip()


def make_fixture_repo(name: str, dest: Path) -> Path:
    """Copy ``tests/fixtures/<name>`` to ``dest`` and commit it as a new git repository."""
    shutil.copytree(FIXTURES / name, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    git(dest, "init", "-q", "-b", "main")
    commit_all(dest, f"{name} fixture")
    return dest


def build_private_index(repo: Path, base: Path) -> Index:
    """Index ``repo`` with its cache and configuration under ``base`` (the environment is
    restored after), so a test's index is its own."""
    from indexer.build import build_index
    from indexer.query.index import Index
    from indexer.workspace import Workspace

    with environment(
        {"TORCHTALK_CACHE_DIR": str(base / "cache"), "TORCHTALK_CONFIG_DIR": str(base / "config")}
    ):
        result = build_index(Workspace.resolve(repo), show_progress=False)
    return Index(result.db_path)


def line_of(path: Path, text: str, occurrence: int = 1) -> int:
    """1-based line of the ``occurrence``-th line containing ``text``; tests read lines from
    the file itself rather than hard-coding them."""
    seen = 0
    for number, line in enumerate(
        path.read_text(encoding="utf-8", errors="replace").splitlines(), 1
    ):
        if text in line:
            seen += 1
            if seen == occurrence:
                return number
    raise AssertionError(f"{text!r} not found in {path}")


def corpus_path(name: str) -> Path | None:
    env, default, proof = CORPUS_SOURCES[name]
    path = Path(os.environ.get(env) or default)
    return path if (path / proof).is_file() else None


def require_corpus(name: str) -> Path:
    """The corpus tree, or a skip that says how to get it."""
    path = corpus_path(name)
    if path is None:
        env, default, _ = CORPUS_SOURCES[name]
        pytest.skip(
            f"{name} corpus absent: set {env} to its source tree (CONTRIBUTING.md, 'The "
            f"real trees'); looked in {os.environ.get(env) or default}"
        )
    return path


def indexer_code_key() -> str:
    """The code that shapes an index: a cached corpus index built by other code is stale
    and must not be reused."""
    from indexer.code_key import extraction_code_key

    return extraction_code_key()


def corpus_index(name: str, harness: str | None = None) -> tuple[Path, Path]:
    """Build (once per version of the indexer code) the index of a corpus tree.

    Returns (source, cache_dir). The cache lives beside the corpora, keyed by the indexer's
    code, so reruns of the suite reuse it; a file lock makes concurrent xdist workers wait
    for one build instead of building twice.
    """
    import fcntl

    from indexer.build import build_index
    from indexer.workspace import Workspace

    source = require_corpus(name)
    cache = CORPORA / "index-cache" / f"{name}-{indexer_code_key()}"
    cache.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("TORCHTALK_CACHE_DIR")
    os.environ["TORCHTALK_CACHE_DIR"] = str(cache)
    try:
        with open(cache / "fixture.lock", "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            workspace = Workspace.resolve(source, harness)
            if not workspace.db_path.is_file():
                build_index(workspace, show_progress=False)
    finally:
        if previous is None:
            os.environ.pop("TORCHTALK_CACHE_DIR", None)
        else:
            os.environ["TORCHTALK_CACHE_DIR"] = previous
    return source, cache


def corpus_db(corpus: tuple[Path, Path]) -> Path:
    """The database of a built corpus index, (source, cache_dir) as ``corpus_index`` gives."""
    from indexer.workspace import Workspace

    source, cache = corpus
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHTALK_CACHE_DIR", str(cache))
        return Workspace.resolve(source).db_path
