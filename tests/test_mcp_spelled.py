"""Answers that hold on questions nobody tuned for (issue 37), on the minitorch fixture with
a file of calls added: every tool takes a structured kernel by the name native_functions.yaml
gives it (``at::native::add_out``, defined by ``TORCH_IMPL_FUNC(add_out)``), ``tests`` and
``affected`` agree on a C++ function, ``search`` finds a dispatch stub's registrations, no
"closest known name" repeats the name asked, callers keep every call site (recursion,
overload to overload, several calls from one caller), and a function re-exported by a
package's ``__init__`` (``from .boxes import nms``) is found by the name users type."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.answers.affected import affected
from indexer.query.graph import graph
from indexer.query.index import Index
from indexer.query.search import search
from indexer.query.tests import tests as find_tests
from indexer.query.trace import trace
from tests.helpers import build_private_index, commit_all, line_of, make_fixture_repo

NATIVE = "aten/src/ATen/native"

# A static helper that recurses and is called twice by one caller; two overloads, one
# calling the other twice.
CALLS_CPP = """\
namespace at::native {

static int depth_helper(int n) {
  if (n <= 0) {
    return 0;
  }
  return 1 + depth_helper(n - 1);
}

int twice_caller(int n) {
  int a = depth_helper(n);
  int b = depth_helper(n + 1);
  return a + b;
}

int pick_value(int a) {
  return a;
}

int pick_value(int a, int b) {
  int left = pick_value(a);
  int right = pick_value(b);
  return left + right;
}

} // namespace at::native
"""


# torchvision.ops style: the public name is the package's, the definition a module's.
VISION_INIT = "from .ops import nms\n"
OPS_INIT = "from .boxes import nms\n\n__all__ = ['nms']\n"
BOXES = """\
import minitorch


def nms(boxes, scores):
    return minitorch.add(boxes, scores)
"""
# Tests named for nms whose calls the index cannot follow (through a harness's getattr).
NAMED_ONLY_TEST = """\
import importlib


def run_case(module, name):
    return getattr(importlib.import_module(module), name)


def test_nms_through_a_harness():
    assert run_case("minitorch.vision." + "ops", "nms") is not None


def test_nmsx_is_another_name():
    pass
"""
VISION_TEST = """\
import minitorch
from minitorch.vision.ops import nms


def test_nms():
    assert nms(minitorch.Tensor([1.0]), minitorch.Tensor([2.0])) is not None


def test_boxes_pipeline():
    assert nms(minitorch.Tensor([3.0]), minitorch.Tensor([4.0])) is not None
"""
# The test of nms by its exact name, whose call the index cannot follow (torch_np's
# test_ceil calls torch._numpy's ceil; inductor's through self.common).
EXACT_NAMED_TEST = """\
import importlib


def test_nms():
    assert getattr(importlib.import_module("minitorch.vision." + "ops"), "nms") is not None
"""


# An op whose CUDA kernel launches through helpers as ATen's elementwise kernels do
# (host -> templated helper -> gpu_kernel -> gpu_kernel_impl -> launch_legacy_kernel -> <<<>>>).
SCALE_YAML = """
- func: masked_scale(Tensor self, Tensor mask, float scale) -> Tensor
  dispatch:
    CUDA: masked_scale_cuda
"""
SCALE_CU = """\
namespace at::native {

template <typename func_t>
__global__ void elementwise_kernel(int n, func_t f) {
  f(n);
}

template <typename func_t>
static void launch_legacy_kernel(int n, const func_t& f) {
  elementwise_kernel<<<1, 128>>>(n, f);
}

template <typename func_t>
void gpu_kernel_impl(int n, const func_t& f) {
  launch_legacy_kernel(n, f);
}

template <typename func_t>
void gpu_kernel(int n, const func_t& f) {
  gpu_kernel_impl(n, f);
}

template <typename scalar_t>
void masked_scale_kernel(int n, scalar_t scale) {
  gpu_kernel(n, [=](int i) { return i * scale; });
}

template <typename mask_t>
Tensor masked_scale_impl(const Tensor& self, double scale) {
  masked_scale_kernel<float>(4, scale);
  return self;
}

Tensor masked_scale_cuda(const Tensor& self, const Tensor& mask, double scale) {
  return masked_scale_impl<bool>(self, scale);
}

} // namespace at::native
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("spelled")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    (repo / NATIVE / "Calls.cpp").write_text(CALLS_CPP, encoding="utf-8")
    ops = repo / "minitorch/vision/ops"
    ops.mkdir(parents=True)
    (ops.parent / "__init__.py").write_text(VISION_INIT, encoding="utf-8")
    (ops / "__init__.py").write_text(OPS_INIT, encoding="utf-8")
    (ops / "boxes.py").write_text(BOXES, encoding="utf-8")
    (repo / "test/test_vision_ops.py").write_text(VISION_TEST, encoding="utf-8")
    (repo / "test/test_named_only.py").write_text(NAMED_ONLY_TEST, encoding="utf-8")
    (repo / "test/test_exact_named.py").write_text(EXACT_NAMED_TEST, encoding="utf-8")
    yaml = repo / NATIVE / "native_functions.yaml"
    yaml.write_text(yaml.read_text(encoding="utf-8") + SCALE_YAML, encoding="utf-8")
    (repo / NATIVE / "cuda/MaskedScale.cu").write_text(SCALE_CU, encoding="utf-8")
    commit_all(repo, "recursion, overloads and repeated calls; a re-exported function")
    return repo, build_private_index(repo, base)


def at(repo: Path, path: str, text: str, occurrence: int = 1) -> str:
    return f"{path}:{line_of(repo / path, text, occurrence)}"


def test_a_structured_kernel_is_found_by_its_yaml_name(built) -> None:
    repo, index = built
    answer = trace(index, "at::native::add_out")
    assert answer.found, answer.to_text()
    assert "aten::add" in answer.to_text()
    assert at(repo, f"{NATIVE}/BinaryOps.cpp", "TORCH_IMPL_FUNC(add_out)") in answer.to_text()


def test_tests_and_affected_take_a_cpp_function_and_agree(built) -> None:
    _, index = built
    found = find_tests(index, "at::native::add_out", limit=500)
    assert found.found, found.to_text()
    # the tests a path reaches (not those only named for it): what a change can break
    listed = {
        item.evidence.split(":")[0]
        for item in found.items
        if item.evidence and "named for it" not in item.detail
    }
    assert listed, found.to_text()
    impacted = affected(index, ["at::native::add_out"], limit=500)
    assert impacted.found, impacted.to_text()
    files = {item.label for item in impacted.items}
    assert listed <= files, (listed - files, impacted.to_text())


def test_search_finds_a_dispatch_stubs_registrations(built) -> None:
    repo, index = built
    answer = search(index, "add_stub")
    text = answer.to_text()
    assert answer.found, text
    assert at(repo, f"{NATIVE}/cpu/BinaryOpsKernel.cpp", "REGISTER_DISPATCH(add_stub") in text
    assert at(repo, f"{NATIVE}/cuda/BinaryAddKernel.cu", "REGISTER_DISPATCH(add_stub") in text
    cpu = search(index, "at::native::add_stub", backend="CPU").to_text()
    assert at(repo, f"{NATIVE}/cpu/BinaryOpsKernel.cpp", "REGISTER_DISPATCH(add_stub") in cpu
    assert "BinaryAddKernel.cu" not in cpu


def test_no_closest_name_is_the_name_asked(built) -> None:
    _, index = built
    for answer in (
        search(index, "at::native::add_stub"),
        search(index, "at::native::nowhere_stub"),
        trace(index, "at::native::twice_callerx"),
        find_tests(index, "at::native::twice_callerx"),
    ):
        assert answer.found or answer.query not in answer.suggestions, answer.to_text()
    # the name asked, qualified, is the definition asked for: found, not suggested
    answer = graph(index, "native::twice_caller", mode="calls")
    assert answer.found, answer.to_text()


def test_callers_keep_every_call_site(built) -> None:
    repo, index = built
    calls = f"{NATIVE}/Calls.cpp"
    text = graph(index, "depth_helper", mode="callers").to_text()
    assert at(repo, calls, "int a = depth_helper(n)") in text, text
    assert at(repo, calls, "int b = depth_helper(n + 1)") in text, text
    # the recursive call is a call site too
    assert at(repo, calls, "return 1 + depth_helper(n - 1)") in text, text


def test_an_overload_calling_another_is_its_caller(built) -> None:
    repo, index = built
    calls = f"{NATIVE}/Calls.cpp"
    text = graph(index, "at::native::pick_value", mode="callers").to_text()
    assert at(repo, calls, "int left = pick_value(a)") in text, text
    assert at(repo, calls, "int right = pick_value(b)") in text, text


def test_a_reexported_function_is_found_by_its_public_name(built) -> None:
    repo, index = built
    where = at(repo, "minitorch/vision/ops/boxes.py", "def nms(")
    traced = trace(index, "minitorch.vision.ops.nms")
    assert traced.found, traced.to_text()
    assert where in traced.to_text() and "aten::add" in traced.to_text()
    callers = graph(index, "minitorch.vision.ops.nms", mode="callers")
    assert callers.found and where in callers.to_text(), callers.to_text()
    assert "test/test_vision_ops.py" in callers.to_text(), callers.to_text()
    found = find_tests(index, "minitorch.vision.ops.nms")
    assert "test/test_vision_ops.py" in found.to_text(), found.to_text()
    impacted = affected(index, ["minitorch.vision.ops.nms"])
    assert "test/test_vision_ops.py" in {item.label for item in impacted.items}, impacted.to_text()


def test_a_cpp_function_names_the_python_apis_that_reach_it_first(built) -> None:
    """ "Which Python APIs reach add_out": the public names of the ops dispatching to it and
    of the ops delegating to those (add.Tensor -> add.out), in the answer's first lines."""
    _, index = built
    answer = trace(index, "at::native::add_out")
    head = answer.items[0]
    assert head.label.startswith("Python APIs reaching it: "), answer.to_text()
    assert "minitorch.add" in head.label.split(": ", 1)[1].split(", "), answer.to_text()


def test_tests_named_for_it_are_listed_after_those_that_call_it(built) -> None:
    repo, index = built
    answer = find_tests(index, "minitorch.vision.ops.nms")
    labels = [item.label for item in answer.items]
    calling = labels.index("test/test_vision_ops.py::test_nms")
    named = labels.index("test/test_named_only.py::test_nms_through_a_harness")
    assert calling < named, answer.to_text()
    assert "named for it" in answer.items[named].detail
    assert at(repo, "test/test_named_only.py", "def test_nms_through") in answer.to_text()
    assert not any("test_nmsx" in label for label in labels), answer.to_text()


def test_a_test_named_exactly_for_it_ranks_before_those_that_only_call_it(built) -> None:
    """test_nms, whose call no path follows, is the test of nms: after the reached tests
    named for it, before a test that calls it among other things; a test only prefixed
    (test_nms_through_a_harness) stays after the callers."""
    _, index = built
    labels = [item.label for item in find_tests(index, "minitorch.vision.ops.nms").items]
    reached_named = labels.index("test/test_vision_ops.py::test_nms")
    exact = labels.index("test/test_exact_named.py::test_nms")
    caller = labels.index("test/test_vision_ops.py::test_boxes_pipeline")
    prefixed = labels.index("test/test_named_only.py::test_nms_through_a_harness")
    assert reached_named < exact < caller < prefixed, labels
    files = [item.label for item in affected(index, ["minitorch.vision.ops.nms"]).items]
    assert files.index("test/test_exact_named.py") < files.index("test/test_named_only.py")


def test_affected_lists_files_of_tests_named_for_it_and_says_no_path_reaches_them(built) -> None:
    # `tests` and `affected` agree: a test named for the function whose call the index cannot
    # follow is a file a change may break, listed after those a path reaches, and said so.
    repo, index = built
    answer = affected(index, ["minitorch.vision.ops.nms"])
    labels = [item.label for item in answer.items if not item.data.get("minor")]
    assert labels.index("test/test_vision_ops.py") < labels.index("test/test_named_only.py")
    named = next(item for item in answer.items if item.label == "test/test_named_only.py")
    assert "named for it" in named.detail and "test_nms_through_a_harness" in named.detail
    assert named.evidence == at(repo, "test/test_named_only.py", "def test_nms_through")
    assert "2 more hold a test named for it" in answer.title, answer.title
    assert "test/test_named_only.py" in answer.data["named_only_files"]


def test_a_kernel_launched_through_elementwise_helpers_is_named(built) -> None:
    # Six calls from the op's CUDA kernel to the launch, as gpu_kernel's are in ATen.
    repo, index = built
    answer = trace(index, "aten::masked_scale", focus="cuda")
    text = answer.to_text()
    cu = f"{NATIVE}/cuda/MaskedScale.cu"
    assert "at::native::elementwise_kernel" in text, text
    assert at(repo, cu, "elementwise_kernel<<<") in text, text


def test_the_structured_answer_is_the_same_encoded_in_one_pass(built) -> None:
    """Answer.to_json, what the server sends as structured content, says what to_dict says
    (dataclasses as their fields, tuples as lists, anything else as its text)."""
    import json

    _, index = built
    for answer in (
        affected(index, ["minitorch.vision.ops.nms"]),
        find_tests(index, "minitorch.vision.ops.nms"),
        trace(index, "aten::masked_scale", focus="cuda"),
    ):
        assert json.loads(answer.to_json()) == json.loads(json.dumps(answer.to_dict(), default=str))
