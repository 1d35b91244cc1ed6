"""Repository-wide pytest configuration: the real corpora behind tests marked `corpus`.

Corpus trees are unpacked by ../shared/corpora/get-pytorch and get-vllm and never
committed. A corpus test skips, saying how to get the tree, when it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import corpus_index, require_corpus


@pytest.fixture(scope="session")
def pytorch_source() -> Path:
    """The PyTorch 2.6 source tree (../shared/corpora/get-pytorch --git)."""
    return require_corpus("pytorch")


@pytest.fixture(scope="session")
def vllm_source() -> Path:
    """vLLM 0.33.0's source distribution (../shared/corpora/get-vllm --git)."""
    return require_corpus("vllm")


@pytest.fixture(scope="session")
def pytorch_index(pytorch_source: Path) -> tuple[Path, Path]:
    """(source, cache_dir) of a built index of the PyTorch corpus, shared by all tests.

    Point TORCHTALK_CACHE_DIR at cache_dir (monkeypatch.setenv) to use it through the CLI,
    or open ``Workspace.resolve(source).db_path`` under that setting.
    """
    return corpus_index("pytorch")


@pytest.fixture(scope="session")
def vllm_index(vllm_source: Path) -> tuple[Path, Path]:
    """(source, cache_dir) of a built index of the vLLM corpus, shared by all tests."""
    return corpus_index("vllm")
