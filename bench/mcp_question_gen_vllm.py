"""Generate MCP questions about vLLM whose truth comes from the sources, not the index.

    python bench/mcp_question_gen.py --vllm PATH [--seed N] [--per-kind N] [--out FILE]

The vLLM counterpart of bench/mcp_question_gen.py (which asks about PyTorch): regular
expressions over csrc/ and vllm/ find the ops registered in ``TORCH_LIBRARY*`` blocks
(``m.impl("X", TORCH_BOX(&f))`` for CUDA, ``ops.impl("X", torch::kCPU, &f)`` in the CPU
build), the definitions of their C++ functions, the ``__global__`` kernels those launch
(``<<<``, directly, through functions defined once, or through a ``#define`` they use),
the Python wrappers in vllm/_custom_ops.py calling ``torch.ops.NS.X``, the test functions
naming ``torch.ops.NS.X`` and the top-level classes of vllm/. Nothing here imports
``indexer``: a check that shared the index's parsing would not be a check.

Split into ``dev`` and ``held_out`` by the same hash of each id as the PyTorch set, before
any answer is looked at (docs/performance.md).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from question_sources import (
    definitions_by_head,
    make_question,
    read_cpp,
    test_functions,
    word_index,
)

SUFFIXES = {".cpp", ".cc", ".cu", ".h", ".cuh", ".hpp"}
# Builds other than the CUDA one: their registrations and definitions are asked separately.
OTHER_BUILDS = ("csrc/rocm/", "csrc/cpu/")
_BLOCK = re.compile(r"TORCH_LIBRARY_IMPL\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)")
_CPU_IMPL = re.compile(r'\.impl\(\s*"(\w+)"\s*,\s*torch::kCPU\s*,\s*&\s*([\w:]+)\s*\)')
_LAUNCH = re.compile(r"\b(\w+)\s*(?:<[^<>;]*(?:<[^<>;]*>[^<>;]*)*>)?\s*<<<")
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;()]*>)?\s*\(")
_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "static_cast", "defined"}


def _q(kind: str, key: str, text: str, tool: str, args: dict, expect, why: str) -> dict:
    return make_question("vllm", "vgen", kind, key, text, tool, args, expect, why)


class VllmTree:
    """vLLM's csrc/ files, its Python files under vllm/ and its test functions, read once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cpp = read_cpp(root, ("csrc",), SUFFIXES)
        self.words = word_index(self.cpp)
        self.tests = [  # file, line, name, body
            (rel, number, name, "\n".join(body))
            for rel, number, name, body in test_functions(root, "tests", async_defs=True)
        ]

    def definitions(self, name: str, where) -> list[str]:
        """file:line of each definition of C++ function ``name`` in files ``where(rel)``
        accepts: a line starting with a type, the name and its '(' whose text reaches '{'
        before any ';'."""
        head = re.compile(
            rf"^(?:template\s*<.*>\s*)?(?:static\s+|inline\s+)*[A-Za-z_][\w:<>,\s\*&]*"
            rf"[\s\*&:]{re.escape(name)}\s*\("
        )
        cpp = (".cpp", ".cu", ".cc", ".cuh", ".h")
        accept = lambda rel: where(rel) and rel.endswith(cpp)  # noqa: E731
        return definitions_by_head(self.cpp, self.words, name, head, accept, 15)

    def body(self, location: str) -> str:
        """The text of the definition at ``location`` to its closing brace at column 0."""
        rel, line = location.rsplit(":", 1)
        lines = self.cpp[rel]
        start = int(line)
        out = []
        for number in range(start, min(len(lines), start + 500) + 1):
            out.append(lines[number - 1])
            if number > start and lines[number - 1].startswith("}"):
                break
        return "\n".join(out)

    def macro(self, rel: str, name: str) -> str | None:
        """The text of ``#define name(`` in ``rel`` (its continued lines), if any."""
        lines = self.cpp[rel]
        for number, line in enumerate(lines):
            if re.match(rf"\s*#\s*define\s+{re.escape(name)}\(", line):
                out = [line]
                while out[-1].rstrip().endswith("\\") and number + len(out) < len(lines):
                    out.append(lines[number + len(out)])
                return "\n".join(out)
        return None

    def kernel_definitions(self, kernel: str) -> list[str]:
        """file:line of each ``__global__`` definition of ``kernel``."""
        where = []
        for rel in sorted(self.words.get(kernel, ())):
            if rel.startswith(OTHER_BUILDS):
                continue
            lines = self.cpp[rel]
            for number, text in enumerate(lines, 1):
                if (
                    re.search(rf"\b{re.escape(kernel)}\s*\(", text)
                    and "__global__" in "\n".join(lines[max(0, number - 4) : number])
                    and not text.rstrip().endswith(";")
                    and not text.lstrip().startswith(("//", "#"))
                ):
                    where.append(f"{rel}:{number}")
        return where


def cuda_registrations(tree: VllmTree) -> dict[tuple[str, str], list[tuple[str, int, str]]]:
    """(namespace, op) -> (file, line, C++ function) of each ``m.impl`` inside a
    ``TORCH_LIBRARY_IMPL(NS, CUDA, m)`` block of the CUDA build."""
    found: dict[tuple[str, str], list] = defaultdict(list)
    for rel, lines in tree.cpp.items():
        if rel.startswith(OTHER_BUILDS):
            continue
        depth = None
        for number, line in enumerate(lines, 1):
            match = _BLOCK.search(line)
            if match and depth is None and match.group(2) == "CUDA":
                namespace, handle, depth = match.group(1), match.group(3), 0
                impl = re.compile(
                    rf'\b{handle}\.impl\(\s*"([\w.]+)"\s*,\s*(?:TORCH_BOX\()?\s*&\s*([\w:]+)'
                )
            if depth is None:
                continue
            # an impl may span two lines: ops.impl("x",\n TORCH_BOX(&f));
            text = line + " " + (lines[number] if number < len(lines) else "")
            for hit in impl.finditer(text):
                if hit.start() < len(line):
                    found[(namespace, hit.group(1))].append(
                        (rel, number, hit.group(2).split("::")[-1])
                    )
            depth += line.count("{") - line.count("}")
            if depth <= 0 and "}" in line:
                depth = None
    return found


def cpu_registrations(tree: VllmTree) -> dict[str, list[tuple[str, int, str]]]:
    """op -> (file, line, C++ function) of ``ops.impl("X", torch::kCPU, &f)`` in
    csrc/cpu/torch_bindings.cpp (the CPU build's ``_C``)."""
    found: dict[str, list] = defaultdict(list)
    rel = "csrc/cpu/torch_bindings.cpp"
    lines = tree.cpp.get(rel, [])
    for number, line in enumerate(lines, 1):
        text = line + " " + (lines[number] if number < len(lines) else "")
        hit = _CPU_IMPL.search(text)
        if hit and hit.start() < len(line):
            found[hit.group(1)].append((rel, number, hit.group(2).split("::")[-1]))
    return found


def _cuda_build(rel: str) -> bool:
    return not rel.startswith(OTHER_BUILDS)


def _cpu_build(rel: str) -> bool:
    return rel.startswith("csrc/cpu/")


def launched_kernels(tree: VllmTree, start: str) -> set[str]:
    """The kernels launched (``<<<``) in the definition at ``start``, in functions it calls
    that are defined once in the CUDA build, and in the ``#define`` macros it uses (a few
    levels)."""
    kernels: set[str] = set()
    todo = [("def", start)]
    done: set[str] = set()
    while todo and len(done) < 10:
        what, where = todo.pop()
        if where in done:
            continue
        done.add(where)
        if what == "def":
            rel = where.rsplit(":", 1)[0]
            text = tree.body(where)
        else:
            rel, name = where.split("#", 1)
            text = tree.macro(rel, name) or ""
        kernels.update(k for k in _LAUNCH.findall(text) if k not in _KEYWORDS)
        for callee in set(_CALL.findall(text)) - _KEYWORDS:
            if tree.macro(rel, callee) is not None:
                todo.append(("macro", f"{rel}#{callee}"))
                continue
            found = tree.definitions(
                callee, lambda r: _cuda_build(r) and r.endswith((".cu", ".cuh"))
            )
            if len(found) == 1:
                todo.append(("def", found[0]))
    return kernels


def gen_cuda_kernel(tree: VllmTree, cuda: dict) -> list[dict]:
    """Which CUDA kernel does torch.ops.NS.X launch: the ``__global__`` definitions of the
    kernels its CUDA function launches."""
    out = []
    for (namespace, op), places in sorted(cuda.items()):
        if len(places) != 1 or "." in op:
            continue
        function = places[0][2]
        found = tree.definitions(function, lambda r: _cuda_build(r) and r.endswith(".cu"))
        if len(found) != 1:
            continue
        kernels = launched_kernels(tree, found[0])
        where = sorted({loc for k in kernels for loc in tree.kernel_definitions(k)})
        if where and len(kernels) <= 4:
            spelled = f"torch.ops.{namespace}.{op}"
            out.append(
                _q(
                    "cuda_kernel",
                    f"{namespace}.{op}",
                    f"Which CUDA kernel does {spelled} launch?",
                    "trace",
                    {"func": spelled, "focus": "cuda"},
                    [where],
                    f"{places[0][0]}:{places[0][1]} registers {function} ({found[0]}) for"
                    f" CUDA; it launches " + ", ".join(sorted(kernels)),
                )
            )
    return out


def gen_cpu_impl(tree: VllmTree, cpu: dict) -> list[dict]:
    """Where is vLLM's op X implemented for its CPU build: the definition under csrc/cpu/
    of the function csrc/cpu/torch_bindings.cpp registers for torch::kCPU."""
    out = []
    for op, places in sorted(cpu.items()):
        if len(places) != 1:
            continue
        rel, number, function = places[0]
        found = tree.definitions(function, _cpu_build)
        found = [loc for loc in found if not loc.startswith("csrc/cpu/torch_bindings.cpp")]
        if 0 < len(found) <= 2:
            out.append(
                _q(
                    "cpu_impl",
                    op,
                    f"Where is vLLM's {op} op implemented for its CPU build?",
                    "trace",
                    {"func": f"torch.ops._C.{op}", "focus": "cpu"},
                    [found],
                    f"{rel}:{number} ops.impl({op!r}, torch::kCPU, &{function}); defined at "
                    + ", ".join(found),
                )
            )
    return out


def gen_backends(tree: VllmTree, cuda: dict, cpu: dict) -> list[dict]:
    """Which backends implement vLLM op X: its CUDA build's function and its CPU build's."""
    out = []
    for op, cpu_places in sorted(cpu.items()):
        cuda_places = cuda.get(("_C", op), [])
        if len(cpu_places) != 1 or len(cuda_places) != 1:
            continue
        on_cuda = tree.definitions(
            cuda_places[0][2], lambda r: _cuda_build(r) and r.endswith(".cu")
        )
        on_cpu = [
            loc for loc in tree.definitions(cpu_places[0][2], _cpu_build)
            if not loc.startswith("csrc/cpu/torch_bindings.cpp")
        ]  # fmt: skip
        if 0 < len(on_cuda) <= 2 and 0 < len(on_cpu) <= 2:
            out.append(
                _q(
                    "backends",
                    op,
                    f"Which backends implement vLLM's {op} op, and where?",
                    "trace",
                    {"func": f"torch.ops._C.{op}", "focus": "dispatch"},
                    [on_cuda, on_cpu],
                    f"CUDA: {cuda_places[0][2]} ({cuda_places[0][0]}:{cuda_places[0][1]}),"
                    f" CPU: {cpu_places[0][2]} ({cpu_places[0][0]}:{cpu_places[0][1]})",
                )
            )
    return out


def gen_callers(tree: VllmTree) -> list[dict]:
    """Who launches kernel K: every ``K<<<`` line, where K is defined once and named in one
    file only, and no launch is inside a ``#define``."""
    out = []
    kernels: set[str] = set()
    for lines in tree.cpp.values():
        kernels.update(_LAUNCH.findall("\n".join(lines)))
    for kernel in sorted(kernels - _KEYWORDS):
        files = tree.words.get(kernel, set())
        definitions = tree.kernel_definitions(kernel)
        if len(files) != 1 or len(definitions) != 1:
            continue
        rel = next(iter(files))
        lines = tree.cpp[rel]
        text = "\n".join(lines)
        launches = []
        for hit in re.finditer(
            rf"\b{re.escape(kernel)}\s*(?:<[^<>;]*(?:<[^<>;]*>[^<>;]*)*>)?\s*<<<", text
        ):
            number = text.count("\n", 0, hit.start()) + 1
            launches.append(number)
        if not 0 < len(launches) <= 4:
            continue
        if any(lines[n - 1].rstrip().endswith("\\") for n in launches):
            continue
        # every other use of the name is its definition, a launch or a comment
        uses = [
            n for n, line in enumerate(lines, 1)
            if re.search(rf"\b{re.escape(kernel)}\b", line)
            and not line.lstrip().startswith(("//", "*"))
        ]  # fmt: skip
        if len(uses) != len(launches) + 1:
            continue
        out.append(
            _q(
                "callers",
                kernel,
                f"Who launches CUDA kernel {kernel}?",
                "graph",
                {"func": kernel, "mode": "callers"},
                [[f"{rel}:{n}"] for n in launches],
                f"__global__ {kernel} at {definitions[0]}, launched at lines {launches}",
            )
        )
    return out


def python_wrappers(tree: VllmTree) -> dict[tuple[str, str], list[tuple[str, int]]]:
    """(namespace, op) -> (Python function, its def line) of each function of
    vllm/_custom_ops.py whose body calls ``torch.ops.NS.X(``."""
    path = tree.root / "vllm/_custom_ops.py"
    lines = path.read_text().splitlines()
    found: dict[tuple[str, str], list] = defaultdict(list)
    current: tuple[str, int] | None = None
    for number, line in enumerate(lines, 1):
        match = re.match(r"def (\w+)\(", line)
        if match:
            current = (match.group(1), number)
        elif line and not line[0].isspace() and not line.startswith((")", "#")):
            current = None
        if current is None:
            continue
        for hit in re.finditer(r"torch\.ops\.(\w+)\.(\w+)\s*(?:\.default\s*)?\(", line):
            if current not in found[(hit.group(1), hit.group(2))]:
                found[(hit.group(1), hit.group(2))].append(current)
    return found


def gen_reverse(tree: VllmTree, cuda: dict, wrappers: dict) -> list[dict]:
    """Which Python API reaches C++ function f: the one vllm._custom_ops function calling
    the op f is registered for (for CUDA, and f defined once in the CUDA build)."""
    out = []
    by_function: dict[str, list] = defaultdict(list)
    for (namespace, op), places in cuda.items():
        for place in places:
            by_function[place[2]].append((namespace, op))
    for function, ops in sorted(by_function.items()):
        if len(ops) != 1:
            continue
        namespace, op = ops[0]
        callers = wrappers.get((namespace, op), [])
        if len(callers) != 1:
            continue
        if len(tree.definitions(function, _cuda_build)) != 1:
            continue
        wrapper, line = callers[0]
        out.append(
            _q(
                "reverse",
                function,
                f"Which Python API reaches C++ function {function}?",
                "trace",
                {"func": function},
                [[f"vllm._custom_ops.{wrapper}", f"vllm/_custom_ops.py:{line}"]],
                f"{function} is registered for torch.ops.{namespace}.{op}, which"
                f" vllm._custom_ops.{wrapper} (vllm/_custom_ops.py:{line}) calls",
            )
        )
    return out


def gen_tests(tree: VllmTree, cuda: dict) -> list[dict]:
    """Which tests exercise torch.ops.NS.X: the test functions whose own body names it."""
    out = []
    for namespace, op in sorted(cuda):
        if "." in op:
            continue
        spelled = f"torch.ops.{namespace}.{op}"
        pattern = re.compile(rf"{re.escape(spelled)}\b(?!\.\w)")
        hits = [f"{rel}:{line}" for rel, line, _name, body in tree.tests if pattern.search(body)]
        if 0 < len(hits) <= 12:
            out.append(
                _q(
                    "tests",
                    f"{namespace}.{op}",
                    f"Which tests exercise {spelled}?",
                    "tests",
                    {"query": spelled},
                    [hits],
                    f"test functions naming {spelled}: " + ", ".join(hits),
                )
            )
    return out


def gen_python_class(tree: VllmTree) -> list[dict]:
    """Where is vllm.<module>.C defined: top-level classes of vllm/ by their module path."""
    out = []
    for path in sorted((tree.root / "vllm").rglob("*.py")):
        rel = path.relative_to(tree.root).as_posix()
        parts = rel[: -len(".py")].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(not part.isidentifier() for part in parts):
            continue
        module = ".".join(parts)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = re.match(r"class ([A-Z]\w+)\s*[(:]", line)
            if match:
                name = f"{module}.{match.group(1)}"
                out.append(
                    _q(
                        "python_class",
                        name,
                        f"Where is {name} defined?",
                        "modules",
                        {"name": name},
                        [[f"{rel}:{number}"]],
                        f"class {match.group(1)} at {rel}:{number}",
                    )
                )
    # a class defined twice in one module (under if/else) has no single answer
    seen: dict[str, int] = defaultdict(int)
    for question in out:
        seen[question["id"]] += 1
    return [question for question in out if seen[question["id"]] == 1]


def generate_vllm(root: Path) -> dict[str, list[dict]]:
    """Every candidate question, by kind."""
    tree = VllmTree(root)
    cuda = cuda_registrations(tree)
    cpu = cpu_registrations(tree)
    wrappers = python_wrappers(tree)
    return {
        "cuda_kernel": gen_cuda_kernel(tree, cuda),
        "cpu_impl": gen_cpu_impl(tree, cpu),
        "backends": gen_backends(tree, cuda, cpu),
        "callers": gen_callers(tree),
        "reverse": gen_reverse(tree, cuda, wrappers),
        "tests": gen_tests(tree, cuda),
        "python_class": gen_python_class(tree),
    }
