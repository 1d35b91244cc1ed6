"""The torchvision harness on a torchvision-shaped fixture (tests/fixtures/visionext):
detected by its own markers, it indexes torchvision/csrc and the package, leaves the ios/
and android/ demo apps out of the index and out of selection (the plain torch-extension
harness parses them, with errors), and reads the registrations per dispatch key."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.harness import detect_harness
from indexer.query.index import Index
from indexer.select.placement import categorize
from indexer.workspace import Workspace
from tests.helpers import build_private_index, make_fixture_repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fixture_repo("visionext", tmp_path_factory.mktemp("visionext") / "visionext")


@pytest.fixture(scope="module")
def index(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Index:
    return build_private_index(repo, tmp_path_factory.mktemp("visionext-index"))


def test_the_tree_is_detected_as_torchvision(repo: Path, monkeypatch, tmp_path: Path) -> None:
    assert detect_harness(repo) == "torchvision"
    monkeypatch.setenv("TORCHTALK_CONFIG_DIR", str(tmp_path / "config"))
    workspace = Workspace.resolve(repo)
    assert (workspace.harness, workspace.chosen_by) == ("torchvision", "detected")


def test_demo_apps_and_the_gtest_are_not_indexed(index: Index, tmp_path: Path) -> None:
    paths = [row[0] for row in index.conn.execute("SELECT path FROM files")]
    assert not [p for p in paths if p.startswith(("ios/", "android/", "test/cpp/"))]
    assert "torchvision/csrc/ops/mps/nms_kernel.mm" in paths
    assert "torchvision/ops/boxes.py" in paths
    assert "test/test_ops.py" in paths
    errors = index.conn.execute("SELECT path FROM files WHERE parse_errors > 0").fetchall()
    assert errors == []
    assert index.meta["harness"] == "torchvision"
    # Indexed as any extension, the same tree has the apps' Objective-C read, with errors.
    repo = make_fixture_repo("visionext", tmp_path / "visionext")
    (repo / ".torchtalk.toml").write_text('[harness]\nextends = "torch-extension"\n')
    plain = build_private_index(repo, tmp_path)
    paths = {row[0] for row in plain.conn.execute("SELECT path FROM files")}
    assert "ios/DemoApp/ModelRunner.mm" in paths


def test_a_change_to_a_demo_app_selects_nothing_and_a_kernel_is_code(repo: Path) -> None:
    manifest = Workspace.resolve(repo, "torchvision").manifest
    for path in ("ios/DemoApp/ModelRunner.mm", "android/ops/ops.cpp", "test/cpp/x.cpp"):
        assert categorize(path, manifest)[0] == "never-affects", path
    assert categorize("torchvision/csrc/ops/cpu/nms_kernel.cpp", manifest)[0] == "cpp"
    assert categorize("torchvision/ops/boxes.py", manifest)[0] == "python"


def test_each_dispatch_key_registers_its_kernel(index: Index) -> None:
    assert index.meta["harness"] == "torchvision"
    (op,) = index.find("torchvision::nms", ["op"])
    kernels = {}
    # The op fans out to the m.impl registrations of other files, each to its kernel.
    for edge in index.out_edges(op.id, ["dispatches"]):
        for hop in index.out_edges(edge.dst, ["dispatches"]):
            target = index.node(hop.dst)
            kernels[hop.attrs.get("key")] = (target.qualname, target.path)
    assert kernels == {
        "CPU": ("vision::ops::(anonymous)::nms_kernel", "torchvision/csrc/ops/cpu/nms_kernel.cpp"),
        "Autocast": (
            "vision::ops::(anonymous)::nms_autocast",
            "torchvision/csrc/ops/autocast/nms_kernel.cpp",
        ),
        "QuantizedCPU": (
            "vision::ops::(anonymous)::qnms_kernel",
            "torchvision/csrc/ops/quantized/cpu/qnms_kernel.cpp",
        ),
        "MPS": ("vision::ops::(anonymous)::nms_kernel", "torchvision/csrc/ops/mps/nms_kernel.mm"),
    }


def test_a_function_its_package_re_exports_over_its_submodule_reaches_its_tests(
    index: Index,
) -> None:
    """``from torchvision.ops.roi_align import roi_align`` in torchvision/ops/__init__.py
    binds ``ops.roi_align`` to the function, over the submodule of the same name: a test
    calling ``ops.roi_align(...)`` runs the function (issue 38: `tests roi_align` missed
    TestRoIAlign), and the agent's questions about it find that test."""
    from indexer.query.tests import tests
    from indexer.query.trace import trace

    function = "torchvision.ops.roi_align.roi_align"
    test = "test/test_ops.py::TestRoIAlign::test_forward"
    (node,) = index.find(test, ["test_function"])
    targets = {index.node(edge.dst).qualname for edge in index.out_edges(node.id)}
    assert function in targets
    assert "torchvision.ops.roi_align" not in targets  # the module, as before
    found = tests(index, "roi_align")
    assert test in [item.label for item in found.items]
    traced = trace(index, "torchvision.ops.roi_align")
    assert traced.found and traced.items[0].label == function
