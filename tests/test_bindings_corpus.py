"""Binding chains on the real trees: PyTorch 2.6 and vLLM.

Expected answers are computed independently of the index: the YAML is read with PyYAML,
definitions are checked by reading the C++ file at the reported line.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest
import yaml

from indexer.query.index import Index
from indexer.query.trace import trace
from indexer.workspace import Workspace

pytestmark = pytest.mark.corpus

NATIVE = "aten/src/ATen/native"
SAMPLE = 240


def open_index(corpus: tuple[Path, Path]) -> Index:
    source, cache = corpus
    previous = os.environ.get("TORCHTALK_CACHE_DIR")
    os.environ["TORCHTALK_CACHE_DIR"] = str(cache)
    try:
        return Index(Workspace.resolve(source).db_path)
    finally:
        if previous is None:
            os.environ.pop("TORCHTALK_CACHE_DIR", None)
        else:
            os.environ["TORCHTALK_CACHE_DIR"] = previous


@pytest.fixture(scope="module")
def pytorch(pytorch_index: tuple[Path, Path]) -> tuple[Path, Index]:
    return pytorch_index[0], open_index(pytorch_index)


@pytest.fixture(scope="module")
def vllm(vllm_index: tuple[Path, Path]) -> tuple[Path, Index]:
    return vllm_index[0], open_index(vllm_index)


def cpu_kernels(source: Path) -> list[tuple[str, str, bool]]:
    """(op qualname, CPU kernel name, structured) for every entry with an explicit CPU key."""
    entries = yaml.load((source / NATIVE / "native_functions.yaml").read_text(), yaml.CSafeLoader)
    found = []
    for entry in entries:
        dispatch = entry.get("dispatch") or {}
        for keys, function in dispatch.items():
            if "CPU" in [key.strip() for key in str(keys).split(",")]:
                name = entry["func"].split("(", 1)[0].strip()
                found.append((f"aten::{name}", str(function), bool(entry.get("structured"))))
    return found


def defines(path: Path, line: int, function: str, structured: bool) -> bool:
    """Whether ``path`` defines ``function`` starting at (or within 3 lines of) ``line``."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    window = "\n".join(lines[line - 1 : line + 3])
    pattern = (
        rf"TORCH_IMPL_FUNC\s*\(\s*{re.escape(function)}\s*\)"
        if structured
        else rf"(?<![\w:.>]){re.escape(function)}\s*(<[^;{{]*>)?\s*\("
    )
    match = re.search(pattern, window)
    if match is None:
        return False
    rest = "\n".join(lines[line - 1 :])[match.end() :]
    brace, semicolon = rest.find("{"), rest.find(";")
    return brace >= 0 and (semicolon < 0 or brace < semicolon)


def test_sampled_cpu_kernels_trace_to_their_definitions(pytorch: tuple[Path, Index]) -> None:
    source, index = pytorch
    candidates = cpu_kernels(source)
    assert len(candidates) > 500
    sample = random.Random(2025).sample(candidates, SAMPLE)
    failures = []
    for qualname, function, structured in sample:
        answer = trace(index, qualname, focus="CPU")
        definitions = [
            d["definition"]
            for op in answer.data.get("ops", [])
            if op["op"] == qualname
            for d in op["dispatch"]
            if "CPU" in d["keys"] and d.get("definition")
        ]
        ok = False
        for definition in definitions:
            path, _, line = definition.rpartition(":")
            if defines(source / path, int(line), function, structured):
                ok = True
                break
        if not ok:
            failures.append((qualname, function, definitions))
    rate = 1 - len(failures) / len(sample)
    assert rate >= 0.97, f"{rate:.1%} traced; first failures: {failures[:10]}"


def test_torch_matmul_reaches_its_definition_line(pytorch: tuple[Path, Index]) -> None:
    source, index = pytorch
    path = source / NATIVE / "LinearAlgebra.cpp"
    line = next(
        number
        for number, text in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"Tensor matmul\(", text)
    )
    answer = trace(index, "torch.matmul")
    dispatch = {d["target"]: d for d in answer.data["ops"][0]["dispatch"]}
    assert answer.data["ops"][0]["op"] == "aten::matmul"
    assert dispatch["at::native::matmul"]["definition"] == f"{NATIVE}/LinearAlgebra.cpp:{line}"
    assert dispatch["at::native::matmul"]["keys"] == ["CompositeImplicitAutograd"]


def test_torch_add_reaches_its_stub_and_inner_loop(pytorch: tuple[Path, Index]) -> None:
    """PyTorch 2.6 generates add's CPU/CUDA kernels from ``ufunc_inner_loop`` at build time:
    the source holds the DispatchStub (BinaryOps.h) and the inner loop (ufunc/add.h)."""
    source, index = pytorch
    answer = trace(index, "torch.add")
    ops = {op["op"]: op for op in answer.data["ops"]}
    assert "aten::add.Tensor" in ops and "aten::add.out" in ops
    out = {d["target"]: d for d in ops["aten::add.out"]["dispatch"]}
    header = (source / NATIVE / "BinaryOps.h").read_text().splitlines()
    stub_line = next(
        i for i, t in enumerate(header, 1) if re.search(r"DECLARE_DISPATCH\(.*\badd_stub\)", t)
    )
    assert out["at::native::add_stub"]["definition"] == f"{NATIVE}/BinaryOps.h:{stub_line}"
    assert sorted(out["at::native::add_stub"]["keys"]) == ["CPU", "CUDA"]
    assert out["at::native::ufunc::add"]["definition"].startswith(f"{NATIVE}/ufunc/add.h:")
    assert out["at::native::add_out_mps"]["keys"] == ["MPS"] or "at::native::add_out_mps" not in out
    delegated = [i for i in answer.items if i.label == "structured_delegate -> aten::add.out"]
    assert delegated
    assert any("derivatives.yaml" in (i.evidence or "") for i in answer.items)


def torch_bindings_ops(source: Path) -> list[tuple[str, str]]:
    """(namespace, op name) of every m.def in csrc/torch_bindings.cpp, read by regex."""
    text = (source / "csrc/torch_bindings.cpp").read_text()
    text = re.sub(r"//[^\n]*", "", text)
    ops = []
    blocks = re.finditer(r"STABLE_TORCH_LIBRARY(?:_FRAGMENT)?\((\w+),\s*(\w+)\)\s*\{", text)
    for block in blocks:
        namespace, var = block.groups()
        end = text.find("\n}", block.end())
        body = text[block.end() : end]
        for match in re.finditer(rf"\b{var}\.def\(\s*\"(\w+)", body):
            ops.append((namespace, match.group(1)))
    return ops


def impl_names(source: Path) -> set[str]:
    names = set()
    for path in (source / "csrc").rglob("*"):
        if path.suffix in (".cpp", ".cu", ".h", ".cuh"):
            names.update(re.findall(r"\.impl\(\s*\"(\w+)\"", path.read_text(errors="replace")))
    return names


def body_of(path: Path, line: int) -> str:
    """The text of the function defined at ``line``: from its first ``{`` to the matching
    ``}``, without comments and #define bodies."""
    text = "\n".join(path.read_text(errors="replace").splitlines()[line - 1 :])
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    # Macro bodies are the macro's text, not the function's (launches written inside a
    # #define are not attributed to the functions expanding it yet).
    text = re.sub(r"^[ \t]*#[ \t]*define(?:[^\n]*\\\n)*[^\n]*", "", text, flags=re.M)
    start = text.find("{")
    depth = 0
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[start : index + 1]
    return text[start:]


def test_vllm_ops_trace_to_host_functions_and_kernels(vllm: tuple[Path, Index]) -> None:
    source, index = vllm
    ops = torch_bindings_ops(source)
    assert len(ops) > 100
    implemented = impl_names(source)
    no_host, by_name_only, linked = [], [], 0
    launching, missing_kernels = 0, []
    for namespace, name in ops:
        answer = trace(index, f"torch.ops.{namespace}.{name}")
        assert answer.found, name
        traced = [op for op in answer.data["ops"] if op["op"] == f"{namespace}::{name}"]
        assert traced, name
        dispatch = [d for op in traced for d in op["dispatch"]]
        hosts = [d["definition"] for d in dispatch if d.get("definition")]
        candidates = [c for d in dispatch for c in d.get("candidates", [])]
        if name not in implemented:
            continue  # defined here, implemented by no source file (a disabled build option)
        if hosts:
            linked += 1
        elif candidates:
            by_name_only.append(name)
        else:
            no_host.append(name)
        # A host function whose own body launches a kernel must show one.
        direct = [
            h
            for h in hosts
            if "<<<" in body_of(source / h.rpartition(":")[0], int(h.rpartition(":")[2]))
        ]
        if direct:
            launching += 1
            if not any(op.get("cuda_kernels") for op in traced):
                missing_kernels.append(name)
    assert not no_host, f"ops with an impl but no host definition: {no_host}"
    assert linked / (linked + len(by_name_only)) >= 0.97, by_name_only
    assert launching >= 20
    # A launch through a function-pointer variable (``auto k = &kernel; k<<<...>>>``) names
    # no kernel at the launch site: allow a few.
    assert len(missing_kernels) <= max(1, launching // 30), (
        f"hosts that launch a kernel, none traced: {missing_kernels}"
    )


def test_vllm_rms_norm(vllm: tuple[Path, Index]) -> None:
    source, index = vllm
    answer = trace(index, "torch.ops._C.rms_norm")
    op = next(op for op in answer.data["ops"] if op["op"] == "_C::rms_norm")
    hosts = {d["definition"] for d in op["dispatch"] if d.get("definition")}
    path = source / "csrc/layernorm_kernels.cu"
    line = next(
        number
        for number, text in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"void rms_norm\(", text)
    )
    assert f"csrc/layernorm_kernels.cu:{line}" in hosts
    kernels = {k["kernel"] for k in op.get("cuda_kernels", [])}
    assert any("rms_norm_kernel" in kernel for kernel in kernels), kernels
