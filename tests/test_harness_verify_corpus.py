"""`torchtalk harness verify` on the real trees (tests/integration/<harness>.yml): every
anchor and minimum of each built-in harness holds on its tree. Each tree's index is the
shared corpus index (tests/helpers.py corpus_index), so verify finds it up to date."""

from __future__ import annotations

import pytest

from tests.helpers import corpus_index
from tests.reliability_support import run

pytestmark = pytest.mark.corpus


def _verify(capsys, monkeypatch, harness: str, corpus: str) -> None:
    source, cache = corpus_index(corpus, harness)
    monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(cache))
    code, out, err = run(capsys, "harness", "verify", "--harness", harness, "--source", str(source))
    assert code == 0, out + err
    assert "all " in out and " checks hold" in out, out


@pytest.mark.xdist_group("pytorch-index")
def test_pytorch_anchors_hold(pytorch_index, capsys, monkeypatch) -> None:
    _verify(capsys, monkeypatch, "pytorch", "pytorch")


def test_torchvision_anchors_hold(capsys, monkeypatch) -> None:
    _verify(capsys, monkeypatch, "torchvision", "torchvision")


def test_torch_extension_anchors_hold_on_pytorch_sparse(capsys, monkeypatch) -> None:
    _verify(capsys, monkeypatch, "torch-extension", "pytorch_sparse")


@pytest.mark.xdist_group("vllm-index")
def test_vllm_anchors_hold(vllm_index, capsys, monkeypatch) -> None:
    _verify(capsys, monkeypatch, "vllm", "vllm")
