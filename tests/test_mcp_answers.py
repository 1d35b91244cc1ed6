"""Answers an agent can act on in one call (issue 22), on the minitorch fixture with a few
files added: trace follows a composite kernel through the op it calls down to a CUDA
kernel and names library calls; an absence is claimed only after searching; a Python name
bound by assignment is a definition; kernel search finds kernels by op and host
function; tests rank direct tests first and honour @ops lists; answers keep to a budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.answers.affected import affected
from indexer.query import test_rank
from indexer.query.answer import DEFAULT_BUDGET, Answer, Item
from indexer.query.graph import graph
from indexer.query.index import Index
from indexer.query.modules import modules
from indexer.query.search import search
from indexer.query.tests import tests as find_tests
from indexer.query.trace import trace
from tests.helpers import build_private_index, commit_all, line_of, make_fixture_repo

NATIVE = "aten/src/ATen/native"

# A composite op calling an op through ATen's _symint / _out spellings, as nll_loss does;
# a CUDA kernel ending in cuBLAS, through PyTorch's wrapper and directly.
YAML = """
- func: nll_loss(Tensor self, Tensor target) -> Tensor
  python_module: nn
  dispatch:
    CompositeImplicitAutograd: nll_loss_symint

- func: nll_loss.out(Tensor self, Tensor target, *, Tensor(a!) out) -> Tensor(a!)
  python_module: nn
  dispatch:
    CompositeImplicitAutograd: nll_loss_out

- func: nll_loss_forward(Tensor self, Tensor target) -> Tensor
  python_module: nn
  dispatch:
    CPU: nll_loss_forward_cpu
    CUDA: nll_loss_forward_cuda

- func: nll_loss_forward.output(Tensor self, Tensor target, *, Tensor(a!) output) -> Tensor(a!)
  python_module: nn
  dispatch:
    CPU: nll_loss_forward_out_cpu

- func: fused_gemm(Tensor self, Tensor other) -> Tensor
  dispatch:
    CUDA: fused_gemm_cuda
"""

LOSS_CPP = """\
#include <ATen/ATen.h>

namespace at::native {

Tensor nll_loss_symint(const Tensor& self, const Tensor& target) {
  return at::nll_loss_forward_symint(self, target);
}

Tensor& nll_loss_out(const Tensor& self, const Tensor& target, Tensor& out) {
  return at::nll_loss_forward_outf(self, target, out);
}

Tensor nll_loss_forward_cpu(const Tensor& self, const Tensor& target) {
  return self;
}

Tensor& nll_loss_forward_out_cpu(const Tensor& self, const Tensor& target, Tensor& output) {
  return output;
}

} // namespace at::native
"""

LOSS_CU = """\
#include <ATen/ATen.h>

namespace at::native {

__global__ void nll_loss_forward_kernel(float* out, const float* in, int n) {}

Tensor nll_loss_forward_cuda(const Tensor& self, const Tensor& target) {
  nll_loss_forward_kernel<<<1, 32>>>(nullptr, nullptr, 0);
  return self;
}

void add_kernel_cuda_v2(TensorIteratorBase& iter, const Scalar& alpha) {}

REGISTER_CUDA_DISPATCH(add_stub, &add_kernel_cuda_v2)

} // namespace at::native
"""

CUDA_BLAS = """\
namespace at::cuda::blas {

void gemm(float alpha) {
  cublasSgemm(handle, alpha);
}

} // namespace at::cuda::blas
"""

FUSED_GEMM = """\
#include <ATen/ATen.h>

namespace at::native {

Tensor fused_gemm_cuda(const Tensor& self, const Tensor& other) {
  at::cuda::blas::gemm(1.0f);
  cublasLtMatmul(handle, self, other);
  return self;
}

} // namespace at::native
"""

# A functional bound by assignment, as torch.nn.functional.max_pool2d is.
FUNCTIONAL = """

def boolean_dispatch(if_true, if_false):
    return if_true


def _pool_with_indices(input):
    return minitorch._C._nn.linear(input, input)


def _pool(input):
    return minitorch._C._nn.linear(input, input)


pool2d = boolean_dispatch(
    if_true=_pool_with_indices,
    if_false=_pool,
)
"""

# @ops lists that filter op_db by name, from the test file's own literals.
FILTERED_TESTS = """\
from minitorch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    ops,
)
from minitorch.testing._internal.common_methods_invocations import op_db
from minitorch.testing._internal.common_utils import TestCase

ONLY_SUM = ["sum"]


class TestFiltered(TestCase):
    @ops([op for op in op_db if op.name in ONLY_SUM])
    def test_only_sum(self, device, dtype, op):
        pass

    @ops(filter(lambda op: op.name not in ONLY_SUM, op_db))
    def test_all_but_sum(self, device, dtype, op):
        pass


instantiate_device_type_tests(TestFiltered, globals())
"""

# One file whose only OpInfo test's list leaves sum out; a list longer than the 120
# characters the index keeps of it, which holds sum.
EXCLUDING_TESTS = """\
from minitorch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    ops,
)
from minitorch.testing._internal.common_methods_invocations import op_db
from minitorch.testing._internal.common_utils import TestCase


class TestExcluding(TestCase):
    @ops([op for op in op_db if op.name != "sum"])
    def test_everything_but_sum(self, device, dtype, op):
        pass


instantiate_device_type_tests(TestExcluding, globals())
"""

LONG_LIST_TESTS = """\
from minitorch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    ops,
)
from minitorch.testing._internal.common_methods_invocations import op_db
from minitorch.testing._internal.common_utils import TestCase


class TestLongList(TestCase):
    @ops(
        [
            op
            for op in op_db
            if op.name in ("relu", "matmul", "addmm", "a_long_name_one", "a_long_name_two", "sum")
        ]
    )
    def test_listed_at_length(self, device, dtype, op):
        pass

    @ops(
        [
            op
            for op in op_db
            if op.name in ("relu", "matmul", "addmm", "a_long_name_one", "a_long_name_two", "mm")
        ]
    )
    def test_listed_at_length_without_sum(self, device, dtype, op):
        pass


instantiate_device_type_tests(TestLongList, globals())
"""

DIRECT_TEST = """\
import minitorch


def test_sum_directly():
    assert minitorch.ops.aten.sum(minitorch.Tensor([1.0, 2.0])) is not None
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("answers")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    native = repo / NATIVE
    with open(native / "native_functions.yaml", "a", encoding="utf-8") as yaml:
        yaml.write(YAML)
    (native / "Loss.cpp").write_text(LOSS_CPP, encoding="utf-8")
    (native / "cuda/Loss.cu").write_text(LOSS_CU, encoding="utf-8")
    (native / "cuda/FusedGemm.cpp").write_text(FUSED_GEMM, encoding="utf-8")
    (repo / "aten/src/ATen/cuda").mkdir(parents=True)
    (repo / "aten/src/ATen/cuda/CUDABlas.cpp").write_text(CUDA_BLAS, encoding="utf-8")
    with open(repo / "minitorch/nn/functional.py", "a", encoding="utf-8") as functional:
        functional.write(FUNCTIONAL)
    (repo / "test/test_filtered_ops.py").write_text(FILTERED_TESTS, encoding="utf-8")
    (repo / "test/test_sum_direct.py").write_text(DIRECT_TEST, encoding="utf-8")
    (repo / "test/test_excluding_ops.py").write_text(EXCLUDING_TESTS, encoding="utf-8")
    (repo / "test/test_long_ops_list.py").write_text(LONG_LIST_TESTS, encoding="utf-8")
    commit_all(repo, "a composite op, a cuBLAS kernel, an assigned functional, filtered tests")
    return repo, build_private_index(repo, base)


def at(repo: Path, path: str, text: str) -> str:
    return f"{path}:{line_of(repo / path, text)}"


def test_composite_kernel_is_followed_through_the_op_it_calls_to_the_cuda_kernel(built) -> None:
    repo, index = built
    answer = trace(index, "aten::nll_loss", focus="cuda")
    text = answer.to_text()
    call_site = at(repo, f"{NATIVE}/Loss.cpp", "at::nll_loss_forward_symint(")
    followed = [item for item in answer.items if item.label == "-> aten::nll_loss_forward"]
    assert followed and f"op called at {call_site}" in followed[0].detail
    kernel = at(repo, f"{NATIVE}/cuda/Loss.cu", "Tensor nll_loss_forward_cuda(")
    launched = at(repo, f"{NATIVE}/cuda/Loss.cu", "__global__ void nll_loss_forward_kernel(")
    launch = at(repo, f"{NATIVE}/cuda/Loss.cu", "nll_loss_forward_kernel<<<")
    assert "CUDA: at::native::nll_loss_forward_cuda" in text and kernel in text
    assert launched in text and f"CUDA kernel launched at {launch}" in text
    # The CPU kernel is not what focus asked for.
    assert "nll_loss_forward_cpu" not in text
    summary = answer.data["ops"]
    assert summary[0]["calls_ops"][0] == {
        "from": "at::native::nll_loss_symint",
        "op": "aten::nll_loss_forward",
        "called_at": call_site,
    }


def test_the_out_spelling_of_the_api_reaches_the_out_overload(built) -> None:
    repo, index = built
    answer = trace(index, "aten::nll_loss.out", focus="CPU")
    call_site = at(repo, f"{NATIVE}/Loss.cpp", "at::nll_loss_forward_outf(")
    followed = [item for item in answer.items if item.label == "-> aten::nll_loss_forward.output"]
    assert followed and call_site in followed[0].detail
    assert at(repo, f"{NATIVE}/Loss.cpp", "Tensor& nll_loss_forward_out_cpu(") in answer.to_text()


def test_unfocused_trace_lists_the_ops_a_composite_calls_and_says_how_to_follow(built) -> None:
    _, index = built
    answer = trace(index, "aten::nll_loss")
    followed = [item for item in answer.items if item.label == "-> aten::nll_loss_forward"]
    assert followed and "focus='CUDA' or 'CPU' traces it on" in followed[0].detail
    assert not any("nll_loss_forward_cuda" in item.label for item in answer.items)


def test_library_calls_are_named_with_their_call_sites(built) -> None:
    repo, index = built
    answer = trace(index, "aten::fused_gemm", focus="cuda")
    by_label = {item.label: item for item in answer.items}
    wrapper = by_label["cuBLAS: at::cuda::blas::gemm"]
    assert wrapper.evidence == at(repo, "aten/src/ATen/cuda/CUDABlas.cpp", "void gemm(")
    assert at(repo, f"{NATIVE}/cuda/FusedGemm.cpp", "at::cuda::blas::gemm(") in wrapper.detail
    raw = by_label["cuBLASLt: cublasLtMatmul"]
    assert raw.evidence == at(repo, f"{NATIVE}/cuda/FusedGemm.cpp", "cublasLtMatmul(")
    libraries = {call["library"] for call in answer.data["ops"][0]["library_calls"]}
    assert libraries == {"cuBLAS", "cuBLASLt"}
    # CPU libraries only for a CPU focus: this op has none.
    assert not any(
        item.label.startswith("cu") for item in trace(index, "aten::fused_gemm", focus="CPU").items
    )


def test_a_cuda_stub_registration_is_a_kernel_of_the_stub(built) -> None:
    repo, index = built
    text = trace(index, "torch.add", focus="cuda").to_text()
    assert at(repo, f"{NATIVE}/cuda/Loss.cu", "void add_kernel_cuda_v2(") in text


def test_a_name_bound_by_assignment_is_a_definition(built) -> None:
    repo, index = built
    where = at(repo, "minitorch/nn/functional.py", "pool2d = boolean_dispatch(")
    answer = modules(index, "minitorch.nn.functional.pool2d")
    assert answer.found and answer.items[0].evidence == where
    assert answer.items[0].detail == "module-level assignment"
    named = {item.label for item in answer.items[1:]}
    assert named == {
        "minitorch.nn.functional.boolean_dispatch",
        "minitorch.nn.functional._pool_with_indices",
        "minitorch.nn.functional._pool",
    }
    traced = trace(index, "minitorch.nn.functional.pool2d")
    assert traced.found and traced.items[0].evidence == where
    assert "bound by assignment" in traced.items[0].detail
    assert "aten::linear" in traced.to_text() or "_nn.linear" in traced.to_text()


def test_an_absence_names_what_was_searched(built) -> None:
    _, index = built
    answer = search(index, "no_such_kernel_anywhere", mode="kernels")
    assert not answer.found
    assert "ops, C++ host functions and __global__ kernels" in answer.title


def test_kernel_search_finds_kernels_by_op_and_by_host_function(built) -> None:
    repo, index = built
    kernel = at(repo, f"{NATIVE}/cuda/Loss.cu", "__global__ void nll_loss_forward_kernel(")
    launch = at(repo, f"{NATIVE}/cuda/Loss.cu", "nll_loss_forward_kernel<<<")
    by_op = search(index, "nll_loss_forward", mode="kernels")
    launched = [item for item in by_op.items if item.label == "at::native::nll_loss_forward_kernel"]
    assert launched and launched[0].evidence == kernel and launch in launched[0].detail
    by_host = search(index, "nll_loss_forward_cuda", mode="kernels")
    assert by_host.items[0].label == "at::native::nll_loss_forward_cuda"
    assert by_host.items[1].evidence == kernel
    # A composite op's kernels are those of the op it calls.
    composite = search(index, "nll_loss", mode="kernels", backend="CUDA")
    assert kernel in composite.to_text()


def test_tests_rank_direct_tests_first_and_honour_ops_lists(built) -> None:
    _, index = built
    answer = find_tests(index, "sum", limit=100)
    names = [item.label for item in answer.items]
    tiers = [item.data["tier"] for item in answer.items]
    assert tiers == sorted(tiers)
    assert names[0] == "test/test_sum_direct.py::test_sum_directly"
    assert any(name.endswith("::test_only_sum") for name in names)
    assert not any(name.endswith("::test_all_but_sum") for name in names)
    assert "3 OpInfo tests left out: their @ops list excludes sum" in " ".join(answer.notes)
    assert any(name.endswith("::test_all_but_sum") for name in answer.data["excluded_by_ops_list"])
    other = [item.label for item in find_tests(index, "add", limit=100).items]
    assert any(name.endswith("::test_all_but_sum") for name in other)
    assert not any(name.endswith("::test_only_sum") for name in other)


def test_tests_reads_an_ops_list_too_long_for_the_index_from_the_source(built) -> None:
    _, index = built
    answer = find_tests(index, "sum", limit=100)
    tiers = {item.label.rsplit("::", 1)[-1]: item.data["tier"] for item in answer.items}
    # The index keeps 120 characters of the list: the rest is read from the decorator.
    assert tiers["test_listed_at_length"] == test_rank.OPINFO
    assert "test_listed_at_length_without_sum" not in tiers
    assert any(
        name.endswith("::test_listed_at_length_without_sum")
        for name in answer.data["excluded_by_ops_list"]
    )


def test_affected_ranks_files_as_tests_ranks_tests_and_honours_ops_lists(built) -> None:
    repo, index = built
    ranked = [item.label for item in find_tests(index, "aten::sum", limit=100).items]
    answer = affected(index, "aten::sum")
    files = answer.data["ranked_files"]
    # Each file where its most direct test ranks in tests' answer: same order, one ranking.
    first_of = {}
    for label in ranked:
        first_of.setdefault(label.split("::", 1)[0], len(first_of))
    assert files == sorted(files, key=lambda path: first_of.get(path, len(first_of)))
    assert files[:2] == ["test/test_sum_direct.py", "test/test_tensor.py"]
    tiers = [item.data["tier"] for item in answer.items if "tier" in item.data]
    assert tiers == sorted(tiers) and tiers[0] == test_rank.DIRECT
    assert tiers[-1] == test_rank.OPINFO
    # The file whose only OpInfo test's @ops list leaves sum out is not listed; said so.
    assert "test/test_excluding_ops.py" not in files
    assert answer.data["excluded_by_ops_list"] == ["test/test_excluding_ops.py"]
    assert "1 test file left out" in answer.to_text()
    # ... but is for an op its list holds.
    assert "test/test_excluding_ops.py" in affected(index, "aten::add.Tensor").data["test_files"]
    # Each file names its most direct tests; the structured output holds them all.
    tensor = next(item for item in answer.items if item.label == "test/test_tensor.py")
    assert [(test["name"], test["line"]) for test in tensor.data["tests"]] == [
        ("test_sum", line_of(repo / "test/test_tensor.py", "def test_sum(")),
        ("test_sum_dim", line_of(repo / "test/test_tensor.py", "def test_sum_dim(")),
    ]
    assert "test_sum, test_sum_dim" in tensor.detail


def test_affected_keeps_to_the_budget_unless_given_a_limit(built) -> None:
    _, index = built
    answer = affected(index, "aten::add.Tensor")
    assert len(answer.to_text()) <= DEFAULT_BUDGET
    answer.budget = None
    full = answer.to_text()
    answer.budget = 700  # a smaller screen: the files beyond it are counted, and how to ask
    text = answer.to_text()
    assert len(full) > 700 >= len(text)
    assert "more not shown" in text and "pass limit=N" in text
    two = affected(index, "aten::add.Tensor", limit=2)
    assert len(two.data["test_files"]) <= 2 and two.budget is None
    with pytest.raises(ValueError, match="limit"):
        affected(index, "aten::add.Tensor", limit=0)


def test_a_recorded_run_ranks_the_tests_that_ran_it_first() -> None:
    ran = test_rank.RecordedIds(
        [
            "test/test_x.py::TestFooCPU::test_bar_cpu_float32",
            "test/test_y.py::test_plain[3]",
        ]
    )
    assert ran.ran("test_function", "test/test_x.py::TestFoo::test_bar")
    assert ran.ran("test_class", "test/test_x.py::TestFoo")
    assert ran.ran("test_file", "test/test_x.py")
    assert ran.ran("test_function", "test/test_y.py::test_plain")
    assert not ran.ran("test_function", "test/test_y.py::test_plain_other")
    assert not ran.ran("test_function", "test/test_x.py::TestFoo::test_baz")
    assert not ran.ran("test_function", "test/test_z.py::test_plain")


def test_answers_keep_to_the_budget_and_the_structured_output_keeps_everything() -> None:
    answer = Answer("trace", "x", title="a long answer")
    answer.items = [Item(f"at::native::kernel_{i}", f"a.cpp:{i}", "kernel") for i in range(400)]
    answer.more = "pass limit=N"
    text = answer.to_text()
    assert len(text) <= DEFAULT_BUDGET
    assert "more not shown (in the structured output); pass limit=N" in text
    assert len(answer.to_dict()["items"]) == 400
    answer.budget = None
    assert len(answer.to_text().splitlines()) == 401


def test_a_kernels_callers_through_its_op_are_listed(built) -> None:
    repo, index = built
    answer = graph(index, "at::native::nll_loss_forward_cuda", mode="callers")
    site = at(repo, f"{NATIVE}/Loss.cpp", "at::nll_loss_forward_symint(")
    assert any(item.evidence == site for item in answer.items)


def test_the_native_walk_over_the_edges_in_memory_is_the_walk_over_sqlite(built) -> None:
    """affected's and the record's walk from native code reads the adjacency when the server
    holds it: the same nodes reached by the same steps, in the same order, from every
    native node of the fixture (and through ops, as a drifted call site makes it walk)."""
    from indexer.query import adjacency
    from indexer.query.native_reach import NATIVE, walk_native

    _, index = built
    graph = adjacency.shared(index.db_path, index.conn, index.meta)
    starts = [
        node_id
        for (node_id,) in index.conn.execute(
            f"SELECT id FROM nodes WHERE kind IN ({','.join('?' * len(NATIVE))}) ORDER BY id",
            sorted(NATIVE),
        )
    ]
    every_path = frozenset(index.file_paths().values())
    reaching_ops = 0
    for drifted in (frozenset(), every_path):
        for start in starts:
            walks = [walk_native(index, [start], drifted, graph=g) for g in (None, graph)]
            sql, memory = (
                [
                    (node_id, None if e is None else (e.src, e.dst, e.kind, e.evidence))
                    for node_id, e in walk.steps.items()
                ]
                for walk in walks
            )
            assert sql == memory, index.node(start).qualname
            assert walks[0].ops == walks[1].ops and walks[0].bindings == walks[1].bindings
            assert walks[0].origin == walks[1].origin
            reaching_ops += len(walks[0].ops) > 1
    assert len(starts) > 100 and reaching_ops > 20  # the fixture's walks branch and reach ops


def test_the_structured_output_is_asdict_without_its_copies() -> None:
    """to_dict answers leaves at once; what it gives is what dataclasses.asdict gives."""
    from collections import namedtuple
    from dataclasses import asdict
    from enum import Enum

    class Tier(str, Enum):
        DIRECT = "direct"

    hop = namedtuple("hop", "src dst")
    answer = Answer("affected", "x", title="t")
    answer.items = [
        Item("a", "a.py:1", "d", depth=1, data={"tier": Tier.DIRECT, "n": 3, "ok": True}),
        Item("b", data={"chain": [hop("u", "v")], "pair": (1, 2.5), "none": None}),
    ]
    answer.data = {"nested": {"k": [{"deep": ("x", False)}]}, 7: "int key"}
    assert answer.to_dict() == asdict(answer)
    assert answer.to_dict()["items"][1]["data"]["chain"][0] == hop("u", "v")
    assert answer.to_dict()["items"][0]["data"]["tier"] is Tier.DIRECT


# vLLM builds csrc/cpu/ for its CPU target and csrc/*.cu for CUDA, each with a function of
# the same name: which one a registration binds, text alone does not tell.
CPU_LAYERNORM = """\
#include "ops.h"

void rms_norm(torch::Tensor& out, torch::Tensor& input, torch::Tensor& weight,
              double epsilon) {
  out.copy_(input);
}
"""
CPU_BINDINGS = """\
#include "ops.h"

#include <torch/library.h>

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("rms_norm(Tensor! out, Tensor input, Tensor weight, float epsilon) -> ()");
  ops.impl("rms_norm", torch::kCPU, &rms_norm);
}
"""


def test_a_kernel_name_with_two_definitions_is_said_to_be_ambiguous_everywhere(
    tmp_path: Path,
) -> None:
    """search lists every definition a registration's name has, as trace does, and says
    of each that it is one of several: a CPU registration must not read as a .cu kernel."""
    repo = make_fixture_repo("miniext", tmp_path / "miniext")
    (repo / "csrc/cpu").mkdir()
    (repo / "csrc/cpu/layernorm.cpp").write_text(CPU_LAYERNORM, encoding="utf-8")
    (repo / "csrc/cpu/torch_bindings.cpp").write_text(CPU_BINDINGS, encoding="utf-8")
    commit_all(repo, "a CPU build's rms_norm")
    index = build_private_index(repo, tmp_path)
    cuda = at(repo, "csrc/layernorm_kernels.cu", "void rms_norm(")
    cpu = at(repo, "csrc/cpu/layernorm.cpp", "void rms_norm(")
    doubt = "ambiguous: one of 2 definitions of the name"
    for answer in (search(index, "rms_norm"), search(index, "rms_norm", mode="kernels")):
        kernels = [item for item in answer.items if item.label.endswith(": rms_norm")]
        assert {item.evidence for item in kernels} == {cuda, cpu}
        assert all(doubt in item.detail for item in kernels if item.detail != "as above")
        assert len([item for item in kernels if doubt in item.detail]) >= 2
    listed = search(index, "silu_and_mul").items
    assert listed and not any("ambiguous" in item.detail for item in listed)  # one definition
    traced = [i for i in trace(index, "rms_norm").items if i.label.endswith(": rms_norm")]
    assert traced and all(doubt in item.detail for item in traced)
