"""A change to the body of a user-defined operator selects the tests reaching the
functions that use it (``a + b``), by a chain through the operator call edge: issue 18,
static blind spots, overloaded operators."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.select_support import IndexedTree, chain_nodes, indexed_tree, selected

VEC = """\
#pragma once

namespace vllm {

struct Scale {
  float value;
  Scale operator+(const Scale& other) const {
    return Scale{value + other.value};
  }
};

inline float combined_scale(Scale a, Scale b) {
  Scale sum = a + b;
  return sum.value;
}

}  // namespace vllm
"""


def _scale_through_an_operator(root: Path) -> None:
    """``rms_norm`` calls a helper that adds two ``Scale``s."""
    (root / "csrc/scale.h").write_text(VEC, encoding="utf-8")
    kernels = root / "csrc/layernorm_kernels.cu"
    text = kernels.read_text(encoding="utf-8")
    text = text.replace('#include "ops.h"\n', '#include "ops.h"\n#include "scale.h"\n', 1)
    anchor = "  TORCH_CHECK(out.is_contiguous());\n"
    assert text.count(anchor) == 1
    call = "  vllm::combined_scale(vllm::Scale{1.0f}, vllm::Scale{2.0f});\n"
    kernels.write_text(text.replace(anchor, anchor + call), encoding="utf-8")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    return indexed_tree(tmp_path_factory, "miniext", _scale_through_an_operator)


@pytest.fixture
def tree(shared: IndexedTree, monkeypatch: pytest.MonkeyPatch):
    yield shared.use(monkeypatch)
    shared.reset()


def test_changed_operator_body_selects_the_test_of_its_user(tree: IndexedTree) -> None:
    tree.replace("csrc/scale.h", "Scale{value + other.value}", "Scale{value * other.value}")
    selection = tree.select()
    assert not selection.everything, selection.everything
    assert "tests/test_layernorm.py" in selected(selection), sorted(selected(selection))
    nodes = chain_nodes(selection, "tests/test_layernorm.py")
    assert nodes[0] == "vllm::Scale::operator+", nodes
    assert "vllm::combined_scale" in nodes and "rms_norm" in nodes, nodes
    assert not any(node.startswith(("module of", "possible users of")) for node in nodes), nodes
