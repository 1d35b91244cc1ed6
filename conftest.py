"""Repository-wide pytest configuration: the real corpora behind tests marked `corpus`.

Corpus trees are unpacked by ../shared/corpora/get-pytorch and get-vllm and never
committed. A corpus test skips, saying how to get the tree, when it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import require_corpus


@pytest.fixture(scope="session")
def pytorch_source() -> Path:
    """The PyTorch 2.6 source tree (../shared/corpora/get-pytorch --git)."""
    return require_corpus("pytorch")


@pytest.fixture(scope="session")
def vllm_source() -> Path:
    """vLLM 0.33.0's source distribution (../shared/corpora/get-vllm --git)."""
    return require_corpus("vllm")
