"""`torchtalk harness verify` on the torchvision-shaped fixture (tests/fixtures/visionext):
with facts read off the fixture it passes; each kind of anchor, made wrong, fails with one
line naming the anchor file's line and the anchor; an anchor file it cannot read is one
error line (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import FIXTURES, line_of, make_fixture_repo
from tests.reliability_support import one_line_error, run

TREE = FIXTURES / "visionext"
CPU_KERNEL = "torchvision/csrc/ops/cpu/nms_kernel.cpp"
MPS_KERNEL = "torchvision/csrc/ops/mps/nms_kernel.mm"
WRAPPER = "torchvision/csrc/ops/nms.cpp"


def _facts() -> dict[str, str]:
    """The fixture's facts, read off its files."""
    return {
        "cpu": f"{CPU_KERNEL}:{line_of(TREE / CPU_KERNEL, 'at::Tensor nms_kernel(')}",
        "mps": f"{MPS_KERNEL}:{line_of(TREE / MPS_KERNEL, 'at::Tensor nms_kernel(')}",
        "wrapper": f"{WRAPPER}:{line_of(TREE / WRAPPER, 'at::Tensor nms(')}",
    }


def anchors_text(**wrong: str) -> str:
    facts = {**_facts(), **wrong}
    return f"""\
harness: torchvision
tree: tests/fixtures/visionext
detected: {facts.get("detected", "true")}
minimums:
  op: {facts.get("ops", "1")}
anchors:
  - kernel: torchvision::nms
    key: {facts.get("key", "CPU")}
    at: {facts["cpu"]}
  - kernel: torchvision::nms
    key: MPS
    at: {facts["mps"]}
  - defines: vision::ops::nms
    at: {facts["wrapper"]}
  - covers: torchvision::nms
    test_file: {facts.get("covers", "test/test_ops.py")}
  - affected: vision::ops::nms_kernel
    test_file: {facts.get("affected", "test/test_ops.py")}
  - chain: [torchvision.ops.boxes.nms, torchvision::nms, {facts.get("end", "vision::ops::nms_kernel")}]
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_fixture_repo("visionext", tmp_path / "visionext")


def verify(capsys, repo: Path, anchors: Path, *extra: str) -> tuple[int, str, str]:
    # The torchvision harness less its minimums, which are real torchvision's counts.
    manifest = anchors.with_name("visionext.toml")
    manifest.write_text('[harness]\nextends = "torchvision"\n\n[expected_minimums]\n')
    return run(
        capsys,
        "harness",
        "verify",
        "--harness",
        str(manifest),
        "--source",
        str(repo),
        "--anchors",
        str(anchors),
        "-j",
        "1",
        *extra,
    )


def test_verify_passes_when_the_anchors_are_the_trees_facts(repo, tmp_path, capsys) -> None:
    anchors = tmp_path / "visionext.yml"
    anchors.write_text(anchors_text(), encoding="utf-8")
    code, out, _ = verify(capsys, repo, anchors)
    assert code == 0, out
    assert "FAIL" not in out
    assert "all 8 checks hold (6 anchors, 1 minimum)" in out


WRONG = {
    # what is made wrong -> (the anchor's line in anchors_text, what its failure names)
    "cpu": (f"{CPU_KERNEL}:1", "kernel torchvision::nms [CPU] at"),
    "key": ("CUDA", "kernel torchvision::nms [CUDA]"),
    "wrapper": (f"{WRAPPER}:2", "defines vision::ops::nms at"),
    "covers": ("test/test_other.py", "covers torchvision::nms in test/test_other.py"),
    "affected": ("test/test_other.py", "affected vision::ops::nms_kernel in test/test_other.py"),
    "end": ("vision::cuda_version", "torchvision::nms -> vision::cuda_version: torchvision::nms"),
    "ops": ("50", "minimum op: 3 < 50"),  # torchvision::nms and _cuda_version
    "detected": ("true", "detected: the tree is detected as"),
}


@pytest.mark.parametrize("what", sorted(WRONG))
def test_a_wrong_anchor_fails_naming_it(what, repo, tmp_path, capsys) -> None:
    value, named = WRONG[what]
    anchors = tmp_path / "visionext.yml"
    anchors.write_text(anchors_text(**{what: value}), encoding="utf-8")
    if what == "detected":  # the tree's markers gone: detection falls back to the extension
        (repo / "torchvision/csrc/vision.cpp").unlink()
    code, out, _ = verify(capsys, repo, anchors)
    failures = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert code == 1, out
    assert len(failures) == 1, out
    assert named in failures[0]
    text = anchors.read_text(encoding="utf-8").splitlines()
    if what not in ("ops", "detected"):  # an anchor's failure points at its line
        line = int(failures[0].split(f"{anchors}:", 1)[1].split(":", 1)[0])
        assert text[line - 1].startswith("  - "), (line, text[line - 1])
    assert "verify torchvision: 1 of 8 checks failed" in out


MALFORMED = {
    "anchors:\n  - kernel: [x\n": "invalid YAML",
    "harness: torchvision\nanchors:\n  - kernels: x\n": "unknown anchor kind 'kernels'",
    "harness: torchvision\nanchors:\n  - kernel: x\n    key: CPU\n": "kernel anchor lacks at",
    "harness: torchvision\nanchors:\n  - defines: x\n    at: x.cpp\n": "at must be PATH:LINE",
    "harness: torchvision\nanchors:\n  - chain: [x]\n": "chain must be a list of at least two",
    "harness: torchvision\nminimums:\n  widgets: 3\n": "'widgets' is no node or edge kind",
    "harness: torchvision\n": "holds no anchors and no minimums",
    "harness: pytorch\nminimums:\n  op: 1\n": "is for harness 'pytorch', not 'torchvision'",
    "- just a list\n": "must be a mapping",
}


@pytest.mark.parametrize("text", list(MALFORMED))
def test_an_anchor_file_it_cannot_read_is_one_error_line(text, repo, tmp_path, capsys) -> None:
    anchors = tmp_path / "bad.yml"
    anchors.write_text(text, encoding="utf-8")
    code, out, err = verify(capsys, repo, anchors)
    assert code == 2, (out, err)
    assert one_line_error(err), err
    assert MALFORMED[text] in err
    assert str(anchors) in err


def test_no_build_with_no_index_is_one_error_line(repo, tmp_path, capsys) -> None:
    anchors = tmp_path / "visionext.yml"
    anchors.write_text(anchors_text(), encoding="utf-8")
    code, _, err = verify(capsys, repo, anchors, "--no-build")
    assert code == 1
    assert one_line_error(err), err
