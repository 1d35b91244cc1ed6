"""vLLM's csrc/torch_bindings.cpp on the real tree: every op it defines traces to its host
function, and to the CUDA kernels that host launches.

The expected answers are read independently of the index, by regex over the source: the
ops from the ``m.def`` lines, the kernels from ``<<<`` launches reachable from the host
function's body (see :class:`LaunchOracle`). A failure lists every op that falls short and
why, so the gap is visible by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from indexer.query.index import Index
from indexer.query.trace import trace
from tests.helpers import corpus_db

pytestmark = pytest.mark.corpus

CALL_DEPTH = 2  # calls from the host to the function holding the launch (trace's LAUNCH_DEPTH - 1)
_SOURCES = (".cu", ".cuh", ".cpp", ".h", ".hpp")
_NOT_FUNCTIONS = {
    "if",
    "for",
    "while",
    "switch",
    "catch",
    "return",
    "sizeof",
    "decltype",
    "alignof",
    "static_assert",
    "defined",
    "constexpr",
}
_CALL = re.compile(r"\b(\w+)\s*(?:<[^;{}()]*>\s*)?\(")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)((?:[^\n]*\\\n)*[^\n]*)", re.M)


@pytest.fixture(scope="module")
def vllm(vllm_index: tuple[Path, Path]) -> tuple[Path, Index]:
    return vllm_index[0], Index(corpus_db(vllm_index))


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def launched_names(text: str) -> list[str]:
    """The name before each ``<<<``, past its template arguments (nested to any depth), and
    the names passed to ``cudaLaunchKernel*`` (the caller keeps those naming a kernel)."""
    names = []
    for match in re.finditer(r"\bcudaLaunch(?:Cooperative)?Kernel\w*\s*\(", text):
        arguments = text[match.end() - 1 : _closing(text, match.end() - 1, "(", ")") + 1]
        names.extend(re.findall(r"\w+", arguments))  # the kernel is one of them
    for match in re.finditer(r"<<<", text):
        index = match.start() - 1
        while index >= 0 and text[index].isspace():
            index -= 1
        if index >= 0 and text[index] == ">":
            depth = 0
            while index >= 0:
                depth += {">": 1, "<": -1}.get(text[index], 0)
                index -= 1
                if depth == 0:
                    break
            while index >= 0 and text[index].isspace():
                index -= 1
        name = re.search(r"(\w+)$", text[max(0, index - 200) : index + 1])
        if name:
            names.append(name.group(1))
    return names


def _closing(text: str, start: int, opening: str, closing: str) -> int:
    depth = 0
    for index in range(start, len(text)):
        if text[index] == opening:
            depth += 1
        elif text[index] == closing:
            depth -= 1
            if depth == 0:
                return index
    return len(text)


@dataclass
class Definition:
    path: str
    line: int
    body: str


@dataclass
class LaunchOracle:
    """Function definitions, #define bodies and ``__global__`` names of csrc, by regex.

    ``launches`` follows a host body through the macros it uses (inlined, as the
    preprocessor does) and the functions it calls, defined in the same file or under a name
    defined in one file only, up to CALL_DEPTH calls; it keeps ``<<<`` launches of a name
    some file defines ``__global__`` (a launch through a function-pointer variable names no
    kernel, so it is not expected of the index either), or passed to ``cudaLaunchKernel*``."""

    root: Path
    functions: dict[str, list[Definition]] = field(default_factory=dict)
    macros: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    kernels: set[str] = field(default_factory=set)
    by_file: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for path in sorted((self.root / "csrc").rglob("*")):
            if path.suffix in _SOURCES:
                self._scan(str(path.relative_to(self.root)), path.read_text(errors="replace"))

    def _scan(self, rel: str, text: str) -> None:
        text = re.sub(r"//[^\n]*|/\*.*?\*/", _blank, text, flags=re.S)
        self.kernels.update(re.findall(r"__global__[^;{(]*?\b(\w+)\s*\(", text))
        for match in _DEFINE.finditer(text):
            body = match.group(2).replace("\\\n", "\n")
            params = re.match(r"\(([^)]*)\)", body)
            if params:  # a parameter is not a use of the macro of that name
                body = body[params.end() :]
                for param in re.findall(r"\w+", params.group(1)):
                    body = re.sub(rf"\b{param}\b", "__param__", body)
            self.macros.setdefault(match.group(1), []).append((rel, body))
        code = _DEFINE.sub(_blank, text)
        for match in _CALL.finditer(code):
            name = match.group(1)
            if name in _NOT_FUNCTIONS:
                continue
            close = _closing(code, match.end() - 1, "(", ")")
            head = re.match(
                r"\s*(?:const\s*)?(?:noexcept\s*)?(?:->\s*[\w:<>, *&]+\s*)?\{",
                code[close + 1 : close + 200],
            )
            before = code[max(0, match.start() - 40) : match.start()].rstrip()
            if head is None or before.endswith(("=", ",", "(", "return", "&&", "||", "?")):
                continue
            start = close + head.end()
            end = _closing(code, start, "{", "}")
            line = code.count("\n", 0, match.start()) + 1
            self.functions.setdefault(name, []).append(Definition(rel, line, code[start : end + 1]))
            self.by_file.setdefault(rel, []).append((line, name))

    def function_at(self, path: str, line: int) -> Definition | None:
        """The function whose name is written at ``line`` (or up to 3 lines below)."""
        for start, name in self.by_file.get(path, []):
            if line <= start <= line + 3:
                return next(d for d in self.functions[name] if d.line == start and d.path == path)
        return None

    def _pick(self, table: dict, name: str, path: str) -> list:
        found = table.get(name, [])
        here = [d for d in found if (d.path if isinstance(d, Definition) else d[0]) == path]
        files = {d.path if isinstance(d, Definition) else d[0] for d in found}
        return here or (found if len(files) == 1 else [])

    def launches(self, host: Definition) -> dict[str, str]:
        """kernel name -> how the host reaches its launch (the chain of functions/macros)."""
        found: dict[str, str] = {}
        seen: set[str] = set()
        frontier = [(host.path, host.body, "host")]
        for level in range(CALL_DEPTH + 1):
            following = []
            for path, body, how in frontier:
                texts = [(body, how)]
                used: set[str] = set()
                for text, via in texts:  # grows as macros are inlined
                    for name in re.findall(r"\b[A-Z_][A-Z0-9_]*\b", text):
                        if name not in used and len(texts) < 60:
                            used.add(name)
                            texts.extend(
                                (macro, f"{via} > #define {name}")
                                for _, macro in self._pick(self.macros, name, path)
                            )
                for text, via in texts:
                    for kernel in launched_names(text):
                        if kernel in self.kernels:
                            found.setdefault(kernel, via)
                    if level == CALL_DEPTH:
                        continue
                    for name in _CALL.findall(text):
                        if name in seen or name in _NOT_FUNCTIONS or name in self.kernels:
                            continue  # device code calls no host function
                        seen.add(name)
                        following.extend(
                            (d.path, d.body, f"{via} > {name} ({d.path}:{d.line})")
                            for d in self._pick(self.functions, name, path)
                        )
            frontier = following
        return found


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
    return list(dict.fromkeys(ops))


def impl_names(source: Path) -> set[str]:
    names = set()
    for path in (source / "csrc").rglob("*"):
        if path.suffix in _SOURCES:
            names.update(re.findall(r"\.impl\(\s*\"(\w+)\"", path.read_text(errors="replace")))
    return names


@dataclass
class Traced:
    op: str
    hosts: list[str]  # file:line of each host definition
    candidates: list[str]  # same-name definitions of a host the linker could not resolve
    kernels: set[str]  # last name component of every CUDA kernel trace lists


@pytest.fixture(scope="module")
def traced(vllm: tuple[Path, Index]) -> list[Traced]:
    source, index = vllm
    ops = torch_bindings_ops(source)
    assert len(ops) > 100
    implemented = impl_names(source)
    found = []
    for namespace, name in ops:
        if name not in implemented:
            continue  # defined, implemented by no source file (a disabled build option)
        answer = trace(index, f"torch.ops.{namespace}.{name}")
        assert answer.found, name
        ops_traced = [op for op in answer.data["ops"] if op["op"] == f"{namespace}::{name}"]
        assert ops_traced, name
        dispatch = [d for op in ops_traced for d in op["dispatch"]]
        found.append(
            Traced(
                f"{namespace}::{name}",
                sorted({d["definition"] for d in dispatch if d.get("definition")}),
                sorted({c for d in dispatch for c in d.get("candidates", [])}),
                {
                    k["kernel"].rpartition("::")[2]
                    for op in ops_traced
                    for k in op.get("cuda_kernels", [])
                },
            )
        )
    return found


def test_every_op_reaches_its_host_definition(traced: list[Traced]) -> None:
    assert len(traced) > 100
    unlinked = [f"{t.op} (same name at {t.candidates})" for t in traced if not t.hosts]
    assert not unlinked, f"{len(unlinked)}/{len(traced)} ops reach no host definition: {unlinked}"


def test_every_op_reaches_the_kernels_its_host_launches(
    vllm: tuple[Path, Index], traced: list[Traced]
) -> None:
    source, _ = vllm
    oracle = LaunchOracle(source)
    expected_ops, short = 0, []
    for t in traced:
        expected: dict[str, str] = {}
        for host in t.hosts:
            path, _, line = host.rpartition(":")
            definition = oracle.function_at(path, int(line))
            if definition is not None:
                expected.update(oracle.launches(definition))
        if not expected:
            continue  # the host launches nothing visible in the tree (CUTLASS, a pointer...)
        expected_ops += 1
        missing = {kernel: via for kernel, via in expected.items() if kernel not in t.kernels}
        if missing:
            shown = "; ".join(f"{kernel} via {via}" for kernel, via in sorted(missing.items())[:2])
            short.append(f"{t.op}: {len(missing)}/{len(expected)} kernels missing ({shown})")
    assert expected_ops >= 60  # the oracle sees the launches (it cannot pass vacuously)
    assert not short, (
        f"{len(short)} of the {expected_ops} ops whose host launches a kernel miss some:\n"
        + "\n".join(short)
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
