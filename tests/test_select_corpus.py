"""Selection on the real trees: single-function changes checked against what reading the
code says. The corpus trees are never modified: each module works in a local clone
(``git clone --shared``: objects borrowed, files checked out) with a copy of the shared
corpus index placed at the clone's key, so neither the edits nor the incremental update a
selection makes for the edited file reach other tests or other sessions."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from indexer.select.model import Selection
from indexer.select_changes import select_changes
from indexer.workspace import Workspace
from tests.helpers import corpus_db

pytestmark = pytest.mark.corpus

LINALG = "aten/src/ATen/native/LinearAlgebra.cpp"
BINARY_KERNELS = "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"


def _restore(source: Path) -> None:
    subprocess.run(["git", "-C", str(source), "checkout", "--", "."], check=True)
    subprocess.run(["git", "-C", str(source), "clean", "-fdq"], check=True)


@contextmanager
def edited(source: Path, rel: str, old: str, new: str) -> Iterator[None]:
    path = source / rel
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} is not unique in {rel}"
    try:
        path.write_text(text.replace(old, new), encoding="utf-8")
        yield
    finally:
        _restore(source)


def _private_tree(
    shared: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory, name: str
) -> tuple[Path, Path]:
    """(clone, cache): a clone of the corpus tree and a cache holding a copy of its index."""
    source, shared_cache = shared
    base = tmp_path_factory.mktemp(f"{name}-clone")
    clone = base / name
    subprocess.run(["git", "clone", "-q", "--shared", str(source), str(clone)], check=True)
    cache = base / "cache"
    shared_db = corpus_db((source, shared_cache))
    private_db = corpus_db((clone, cache))
    private_db.parent.mkdir(parents=True)
    shutil.copyfile(shared_db, private_db)
    return clone, cache


@pytest.fixture(scope="module")
def pytorch(pytorch_index, tmp_path_factory) -> tuple[Path, Path]:
    return _private_tree(pytorch_index, tmp_path_factory, "pytorch")


@pytest.fixture(scope="module")
def vllm(vllm_index, tmp_path_factory) -> tuple[Path, Path]:
    return _private_tree(vllm_index, tmp_path_factory, "vllm")


def _select(tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Selection:
    source, cache = tree
    monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(cache))
    return select_changes(Workspace.resolve(source))


@pytest.mark.xdist_group("pytorch-clone")
def test_matmul_change_selects_linalg_and_the_matmul_opinfo_tests(pytorch, monkeypatch) -> None:
    source = pytorch[0]
    with edited(
        source,
        LINALG,
        "  result = at::native::_matmul_impl(unused, tensor1, tensor2);\n",
        "  result = at::native::_matmul_impl(unused, tensor1, tensor2);\n  (void)result.dim();\n",
    ):
        selection = _select(pytorch, monkeypatch)
    assert [e.label for e in selection.entities] == ["at::native::matmul"]
    assert not selection.run_everything, selection.everything
    assert "test/test_linalg.py" in selection.files
    ops = selection.files.get("test/test_ops.py")
    assert ops is not None, "the OpInfo-driven tests of test_ops.py"
    if ops.tests is not None:  # narrowed: then to the matmul OpInfo variants
        assert all(any("matmul" in name for name in t.opinfos or ["matmul"]) for t in ops.tests)
    assert "test/test_unrelated.py" not in selection.files
    assert len(selection.files) < selection.test_files_total


@pytest.mark.xdist_group("pytorch-clone")
def test_dispatch_stub_cpu_kernel_selects_the_tests_of_its_ops(pytorch, monkeypatch) -> None:
    source = pytorch[0]
    with edited(
        source,
        BINARY_KERNELS,
        "              return std::atan2(a, b);\n",
        "              return std::atan2(a, b) + scalar_t(0);\n",
    ):
        selection = _select(pytorch, monkeypatch)
    assert [e.label for e in selection.entities] == ["at::native::(anonymous)::atan2_kernel"]
    assert not selection.run_everything, selection.everything
    ufuncs = selection.files["test/test_binary_ufuncs.py"]
    chain = [hop.src for hop in ufuncs.reasons[0].chain]
    assert "at::native::atan2_stub" in chain
    assert any(node.startswith("aten::atan2") for node in chain)
    assert len(selection.files) < selection.test_files_total / 2


@pytest.mark.xdist_group("pytorch-clone")
def test_comment_only_change_in_a_cpp_selects_nothing(pytorch, monkeypatch) -> None:
    source = pytorch[0]
    with edited(
        source,
        LINALG,
        "  result = at::native::_matmul_impl(unused, tensor1, tensor2);\n",
        "  // Named inference happens around the implementation.\n"
        "  result = at::native::_matmul_impl(unused, tensor1, tensor2);  /* the work */\n",
    ):
        selection = _select(pytorch, monkeypatch)
    assert not selection.run_everything and not selection.files and not selection.entities
    assert selection.changed_files[0].skipped_hunks == 1
    assert selection.empty_reason == (
        "the changes touch no code that tests run (comments, docs, whitespace)"
    )


@pytest.mark.xdist_group("pytorch-clone")
def test_cmakelists_change_selects_everything_with_the_reason(pytorch, monkeypatch) -> None:
    source = pytorch[0]
    cmake = (source / "CMakeLists.txt").read_text(encoding="utf-8")
    first = cmake.splitlines(keepends=True)[0]
    with edited(source, "CMakeLists.txt", first, first + "# a build option\n"):
        selection = _select(pytorch, monkeypatch)
    assert selection.run_everything
    assert selection.everything == [
        "CMakeLists.txt matches the run-everything pattern 'CMakeLists.txt'"
    ]


@pytest.mark.xdist_group("pytorch-clone")
def test_custom_class_registration_change_reaches_the_python_tests_loading_it(
    pytorch, monkeypatch
) -> None:
    """test/cpp/jit's custom classes are built into a library Python tests load (unlike
    the gtest directories of test/cpp, which never affect Python tests): a change there
    selects tests using those classes, or everything, never nothing."""
    source = pytorch[0]
    users = {
        path.relative_to(source).as_posix()
        for path in (source / "test").rglob("test_*.py")
        if "_TorchScriptTesting" in path.read_text(encoding="utf-8", errors="replace")
    }
    assert users, "the PyTorch tree has tests using _TorchScriptTesting classes"
    with edited(
        source,
        "test/cpp/jit/test_custom_class_registrations.cpp",
        "    return 2 * input;\n",
        "    return 2 * input + 0;\n",
    ):
        selection = _select(pytorch, monkeypatch)
    assert selection.run_everything or users & set(selection.files), selection.notes


@pytest.mark.xdist_group("pytorch-clone")
def test_a_torch_function_re_exported_by_functorch_reaches_its_tests(pytorch, monkeypatch):
    """test/functorch/test_minifier.py imports ``minifier`` from functorch.compile, which
    re-exports torch._functorch.fx_minifier's: the wheel's functorch package is the tree's
    functorch/. With torch/ alone indexed, nothing reached the function and the audit of
    PyTorch's Python ran everything for it."""
    source = pytorch[0]
    importers = {
        path.relative_to(source).as_posix()
        for path in (source / "test").rglob("test_*.py")
        if re.search(r"^from functorch\.compile import .*\bminifier\b",
                     path.read_text(encoding="utf-8", errors="replace"), re.M)
    }  # fmt: skip
    assert "test/functorch/test_minifier.py" in importers
    with edited(
        source,
        "torch/_functorch/fx_minifier.py",
        "    assert isinstance(inps, (tuple, list))\n",
        "    assert isinstance(inps, (tuple, list)), inps\n",
    ):
        selection = _select(pytorch, monkeypatch)
    assert not selection.run_everything, selection.everything
    assert importers <= set(selection.files)


def _calls_rms_norm(text: str) -> bool:
    if re.search(r"torch\.ops\._C\.rms_norm\b|_custom_ops\.rms_norm\b", text):
        return True
    aliased = re.search(
        r"from vllm import _custom_ops as ops\b|import vllm\._custom_ops as ops\b", text
    )
    return bool(aliased and re.search(r"(?<![\w.])ops\.rms_norm\(", text))


@pytest.mark.xdist_group("vllm-clone")
def test_vllm_kernel_change_selects_the_op_callers_not_the_unrelated(vllm, monkeypatch) -> None:
    source = vllm[0]
    callers = sorted(
        path.relative_to(source).as_posix()
        for path in (source / "tests").rglob("test_*.py")
        if _calls_rms_norm(path.read_text(encoding="utf-8", errors="replace"))
    )
    assert callers, "the vLLM tree has tests calling the rms_norm op"
    with edited(
        source,
        "csrc/layernorm_kernels.cu",
        "  float variance = 0.0f;\n  const scalar_t* input_row;",
        "  float variance = 0.0f * 1.0f;\n  const scalar_t* input_row;",
    ):
        selection = _select(vllm, monkeypatch)
    assert [e.label for e in selection.entities] == ["vllm::rms_norm_kernel"]
    assert not selection.run_everything, selection.everything
    missing = [path for path in callers if path not in selection.files]
    assert not missing, f"tests calling torch.ops._C.rms_norm / _custom_ops.rms_norm: {missing}"
    chain = [
        hop.src for hop in selection.files["tests/kernels/core/test_layernorm.py"].reasons[0].chain
    ]
    assert "_C::rms_norm" in chain
    # Tests that build no engine and load no model (test_logger.py, for one, constructs an
    # LLM: statically it reaches every kernel of the model it would load).
    unrelated = ["tests/test_version.py", "tests/benchmarks/test_audio_dataset.py"]
    assert not [path for path in unrelated if path in selection.files]


@pytest.mark.xdist_group("vllm-clone")
def test_vllm_quantization_kernel_reaches_the_models_that_run_it(vllm, monkeypatch) -> None:
    """The AWQ dequantize kernel runs in its op's tests and wherever a linear layer runs
    the AWQ method, which it calls through the base class it sees (LinearMethodBase)."""
    source = vllm[0]
    with edited(
        source,
        "csrc/quantization/awq/gemm_kernels.cu",
        "  int N = blockDim.x * gridDim.x;  // 2",
        "  int N = gridDim.x * blockDim.x;  // 2",
    ):
        selection = _select(vllm, monkeypatch)
    assert [e.label for e in selection.entities] == ["vllm::awq::dequantize_weights"]
    for path in (
        "tests/kernels/quantization/test_awq.py",
        "tests/quantization/test_auto_awq.py",
        "tests/models/quantization/test_awq.py",
    ):
        assert path in selection.files, path
    chain = selection.files["tests/models/quantization/test_awq.py"].reasons[0].chain
    assert any(
        hop.kind == "overrides" and hop.dst.endswith("LinearMethodBase.apply") for hop in chain
    )
    unrelated = ["tests/test_version.py", "tests/benchmarks/test_audio_dataset.py"]
    assert not [path for path in unrelated if path in selection.files]
