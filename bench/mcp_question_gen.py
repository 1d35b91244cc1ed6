"""Generate MCP questions about PyTorch 2.6 whose truth comes from the sources, not the index.

    python bench/mcp_question_gen.py [--pytorch PATH] [--seed N] [--per-kind N] [--out FILE]
                                     [--kinds KIND ...]

Each question is the one call an agent would make first and the truth read here by
another route than the indexer: native_functions.yaml and derivatives.yaml parsed with
yaml, and regular expressions over the C++, CUDA and Python files (definitions at the
start of a line, ``REGISTER_DISPATCH``, ``TORCH_LIBRARY_IMPL`` blocks, ``PyMethodDef``
tables, ``def test_*``). Nothing here imports ``indexer``: a check that shared the index's
parsing would not be a check.

The set is split into ``dev`` and ``held_out`` by a hash of each question's id, before
any answer is looked at: work on ``dev``, report ``held_out`` (docs/performance.md).
bench/mcp_answers.py asks them with ``--questions FILE --split dev|held_out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

import yaml
from question_sources import (
    definitions_by_head,
    make_question,
    read_cpp,
    test_functions,
    word_index,
)

DEFAULT_SOURCE = Path.home() / ".cache" / "torchtalk-corpora" / "pytorch-2.6"
OUT = Path(__file__).with_name("mcp_questions_generated.json")
OUT_VLLM = Path(__file__).with_name("mcp_questions_vllm.json")
NATIVE = "aten/src/ATen/native"
CPP_SUFFIXES = {".cpp", ".cc", ".cu", ".mm", ".h", ".cuh", ".hpp"}
CPP_ROOTS = ("aten/src/ATen", "c10", "torch/csrc")
TOLERANCE = 3


def split_of(question_id: str) -> str:
    """``dev`` or ``held_out``: fixed by the id alone, so nobody picks which half a question
    lands in after seeing its answer."""
    return "dev" if hashlib.sha256(question_id.encode()).digest()[0] % 2 == 0 else "held_out"


class Tree:
    """The PyTorch files read once: C++ sources by path, and where names are defined."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cpp = read_cpp(root, CPP_ROOTS, CPP_SUFFIXES)
        self.words = word_index(self.cpp)  # identifier -> files using it
        self.native = yaml.safe_load((root / NATIVE / "native_functions.yaml").read_text())
        self.derivatives = yaml.safe_load((root / "tools/autograd/derivatives.yaml").read_text())
        self.tests = test_functions(root, "test")  # file, line, name, body

    def definitions(
        self,
        name: str,
        suffixes: tuple[str, ...] = (".cpp", ".cu", ".mm"),
        structured: bool = False,
    ) -> list[str]:
        """file:line of each definition of C++ function ``name``: a line starting with a type
        (or ``TORCH_IMPL_FUNC(name)``) whose parameters open on it and that is not a
        declaration. A ``structured`` entry's kernel is only its ``TORCH_IMPL_FUNC``: a plain
        function of that name is another overload's (remainder.Scalar_out's remainder_out)."""
        plain = rf"|(?:template\s*<.*>\s*)?[A-Za-z_][\w:<>,\s\*&]*[\s\*&:]{name}\s*\("
        head = re.compile(rf"^(?:TORCH_IMPL_FUNC\({name}\)" + ("" if structured else plain) + ")")
        accept = lambda rel: rel.endswith(suffixes)  # noqa: E731
        return definitions_by_head(self.cpp, self.words, name, head, accept, 12)


# --- native_functions.yaml --------------------------------------------------------------


def op_table(tree: Tree) -> dict[str, dict]:
    """aten op name with overload ('add.Tensor') -> its yaml entry."""
    ops = {}
    for entry in tree.native:
        if isinstance(entry, dict) and "func" in entry:
            ops[entry["func"].split("(", 1)[0]] = entry
    return ops


def structured(ops: dict[str, dict], runs: str) -> bool:
    """Whether the entry ``runs`` (dispatch_of's first value) is a structured kernel's."""
    return bool(ops.get(runs, {}).get("structured"))


def dispatch_of(ops: dict[str, dict], name: str) -> tuple[str, dict[str, str]]:
    """The op whose dispatch entry runs ``name`` (its structured delegate, if any) and that
    entry as key -> C++ function, keys split ('CPU, CUDA: f' -> both)."""
    entry = ops[name]
    if "structured_delegate" in entry:
        name = entry["structured_delegate"]
        entry = ops.get(name, {})
    table = {}
    for keys, function in (entry.get("dispatch") or {}).items():
        for key in str(keys).split(","):
            table[key.strip()] = str(function)
    return name, table


def public_torch_name(entry: dict) -> str | None:
    """torch.X for an op exposed as a function of the torch module, else None."""
    name = entry["func"].split("(", 1)[0]
    base, _, _overload = name.partition(".")
    if base.startswith("_") or base.endswith("_") or "python_module" in entry:
        return None
    if "function" not in str(entry.get("variants", "function")):
        return None
    return f"torch.{base}"


# --- the kinds ----------------------------------------------------------------------------


def q(kind: str, key: str, text: str, tool: str, args: dict, expect, why: str) -> dict:
    return make_question("pytorch", "gen", kind, key, text, tool, args, expect, why)


def gen_impl(tree: Tree, ops: dict, key: str, kind: str, focus: str) -> list[dict]:
    """Where is torch.X implemented for ``key``: the definition of its dispatch entry."""
    out = []
    for name, entry in ops.items():
        if "." in name:
            continue
        public = public_torch_name(entry)
        if public is None:
            continue
        runs, table = dispatch_of(ops, name)
        function = table.get(key)
        if not function or table.get("CPU") == table.get("CUDA"):
            continue
        found = tree.definitions(function, structured=structured(ops, runs))
        if 0 < len(found) <= 3:
            out.append(
                q(
                    kind,
                    name,
                    f"Where is {public} implemented for {key}?",
                    "trace",
                    {"func": public, "focus": focus},
                    [found],
                    f"native_functions.yaml: {runs} dispatch {key}: {function}, defined at "
                    + ", ".join(found),
                )
            )
    return out


_LAUNCH = re.compile(r"\b(\w+)\s*(?:<[^<>;]*(?:<[^<>;]*>[^<>;]*)*>)?\s*<<<")


def body_of(lines: list[str], start: int) -> list[tuple[int, str]]:
    """The lines of the definition starting at line ``start`` (1-based), to its closing
    brace at column 0."""
    body = []
    for number in range(start, min(len(lines), start + 400) + 1):
        line = lines[number - 1]
        body.append((number, line))
        if number > start and line.startswith("}"):
            break
    return body


def gen_cuda_kernel(tree: Tree, ops: dict) -> list[dict]:
    """Which CUDA kernel does torch.X launch: a __global__ kernel launched (<<<) in the body
    of its CUDA dispatch function or of a function defined once in a .cu file that it calls
    (a few levels)."""
    out = []
    for name, entry in ops.items():
        if "." in name:
            continue
        public = public_torch_name(entry)
        if public is None:
            continue
        runs, table = dispatch_of(ops, name)
        function = table.get("CUDA")
        if not function:
            continue
        kernels: set[str] = set()
        todo = tree.definitions(function, (".cu", ".cpp"))[:1]
        done: set[str] = set()
        while todo and len(done) < 8:
            location = todo.pop()
            if location in done:
                continue
            done.add(location)
            rel, line = location.rsplit(":", 1)
            for _, text in body_of(tree.cpp[rel], int(line)):
                kernels.update(_LAUNCH.findall(text))
                for callee in re.findall(r"\b(\w+)\s*(?:<[^<>;()]*>)?\s*\(", text):
                    if callee in (function, "if", "for", "while", "switch", "return"):
                        continue
                    found = tree.definitions(callee, (".cu", ".cuh"))
                    if len(found) == 1:
                        todo.append(found[0])
        where = []
        for kernel in sorted(kernels):
            for rel in sorted(tree.words.get(kernel, ())):
                lines = tree.cpp[rel]
                for number, text in enumerate(lines, 1):
                    if (
                        re.search(rf"\b{kernel}\s*\(", text)
                        and "__global__" in "\n".join(lines[max(0, number - 4) : number])
                        and not text.rstrip().endswith(";")
                    ):
                        where.append(f"{rel}:{number}")
        if where and len(kernels) <= 4:
            out.append(
                q(
                    "cuda_kernel",
                    name,
                    f"Which CUDA kernel does {public} launch?",
                    "trace",
                    {"func": public, "focus": "cuda"},
                    [where],
                    f"{runs} dispatch CUDA: {function}, which launches (itself or through a"
                    " function it calls) " + ", ".join(sorted(kernels)),
                )
            )
    return out


def gen_backends(tree: Tree, ops: dict) -> list[dict]:
    """Which backends implement aten::X: every CPU / CUDA / MPS entry's definition."""
    out = []
    for name, _entry in ops.items():
        if "." in name or name.startswith("_"):
            continue
        runs, table = dispatch_of(ops, name)
        keys = [k for k in ("CPU", "CUDA", "MPS") if k in table]
        if len(keys) < 2 or len({table[k] for k in keys}) < len(keys):
            continue
        expect = [tree.definitions(table[k], structured=structured(ops, runs)) for k in keys]
        if all(0 < len(group) <= 3 for group in expect):
            out.append(
                q(
                    "backends",
                    name,
                    f"Which backends implement aten::{name}, and where?",
                    "trace",
                    {"func": f"aten::{name}", "focus": "dispatch"},
                    expect,
                    f"{runs} dispatch " + ", ".join(f"{k}: {table[k]}" for k in keys),
                )
            )
    return out


def gen_overload(tree: Tree, ops: dict) -> list[dict]:
    """Where is torch.ops.aten.X.overload implemented: its own dispatch entry's definition."""
    out = []
    for name in ops:
        base, _, overload = name.partition(".")
        if not overload or base.startswith("_"):
            continue
        runs, table = dispatch_of(ops, name)
        function = table.get("CPU") or table.get("CompositeExplicitAutograd")
        if not function:
            continue
        key = "CPU" if "CPU" in table else "CompositeExplicitAutograd"
        found = tree.definitions(function, structured=structured(ops, runs))
        if 0 < len(found) <= 2:
            spelled = f"torch.ops.aten.{base}.{overload}"
            out.append(
                q(
                    "overload",
                    name,
                    f"Which C++ function runs {spelled} on CPU?",
                    "trace",
                    {"func": spelled},
                    [found],
                    f"{runs} dispatch {key}: {function} at " + ", ".join(found),
                )
            )
    return out


def gen_reverse(tree: Tree, ops: dict) -> list[dict]:
    """Which Python API reaches C++ function F: the torch.X whose dispatch names F."""
    users: dict[str, set[str]] = defaultdict(set)
    for name, _entry in ops.items():
        public = public_torch_name(ops[name.split(".")[0]]) if name.split(".")[0] in ops else None
        if public is None:
            continue
        _, table = dispatch_of(ops, name)
        for key in ("CPU", "CUDA"):
            if key in table:
                users[table[key]].add(public)
    out = []
    for function, publics in sorted(users.items()):
        if len(publics) == 1 and tree.definitions(function):
            public = next(iter(publics))
            out.append(
                q(
                    "reverse",
                    function,
                    f"Which Python API reaches C++ function {function}?",
                    "trace",
                    {"func": f"at::native::{function}"},
                    [[public]],
                    f"native_functions.yaml dispatches to {function} only from {public}",
                )
            )
    return out


def gen_backward(tree: Tree, ops: dict) -> list[dict]:
    """What computes torch.X's gradient: its derivatives.yaml entry and the CPU kernel of the
    backward op the formula calls."""
    lines = (tree.root / "tools/autograd/derivatives.yaml").read_text().splitlines()
    at = {}
    for number, line in enumerate(lines, 1):
        match = re.match(r"- name: ([\w.]+)\(", line)
        if match:
            at[match.group(1)] = number
    out = []
    for entry in tree.derivatives:
        name = entry["name"].split("(", 1)[0]
        if "." in name or name not in ops or name not in at:
            continue
        public = public_torch_name(ops[name]) or f"aten::{name}"
        formulas = " ".join(str(v) for k, v in entry.items() if k not in ("name", "result"))
        called = [c for c in re.findall(r"(\w+_backward)\(", formulas) if c in ops]
        if not called:
            continue
        _, table = dispatch_of(ops, called[0])
        function = table.get("CPU")
        found = tree.definitions(function) if function else []
        if 0 < len(found) <= 2:
            out.append(
                q(
                    "backward",
                    name,
                    f"What computes the gradient of {public}, and where is its CPU kernel?",
                    "trace",
                    {"func": public, "focus": "backward"},
                    [[f"tools/autograd/derivatives.yaml:{at[name]}"], found],
                    f"derivatives.yaml:{at[name]} calls {called[0]}(...); its CPU"
                    f" dispatch {function}",
                )
            )
    return out


def gen_stubs(tree: Tree) -> list[dict]:
    """Which CPU kernel is registered for dispatch stub S: REGISTER_DISPATCH(S, &k) under
    native/cpu and k's definition."""
    reg = re.compile(r"^\s*(?:ALSO_)?REGISTER_(?:AVX512_|ARCH_)?DISPATCH\((\w+),\s*&?\s*([\w:]+)")
    seen: dict[str, list] = defaultdict(list)
    for rel, lines in tree.cpp.items():
        if not rel.startswith(f"{NATIVE}/cpu/"):
            continue
        for number, line in enumerate(lines, 1):
            match = reg.match(line)
            if match:
                seen[match.group(1)].append((rel, number, match.group(2).split("::")[-1]))
    out = []
    for stub, places in sorted(seen.items()):
        if len(places) != 1:
            continue
        rel, number, kernel = places[0]
        kernel_at = [
            loc for loc in tree.definitions(kernel, (".cpp",)) if loc.startswith(rel + ":")
        ]
        out.append(
            q(
                "stub",
                stub,
                f"Which CPU kernel is registered for dispatch stub {stub}?",
                "search",
                {"query": stub},
                [[f"{rel}:{number}", *kernel_at]],
                f"REGISTER_DISPATCH({stub}, &{kernel}) at {rel}:{number}",
            )
        )
    return out


def gen_key_registration(tree: Tree) -> list[dict]:
    """Where is aten::X registered for dispatch key K: m.impl("X", ...) or KERNEL*(X, ...)
    lines inside TORCH_LIBRARY_IMPL(aten, K, m) blocks."""
    block = re.compile(r"TORCH_LIBRARY_IMPL\(\s*aten\s*,\s*(\w+)\s*,\s*(\w+)\s*\)")
    impl = re.compile(r'\.impl\(\s*(?:TORCH_SELECTIVE_NAME\()?"(?:aten::)?([\w.]+)"')
    macro = re.compile(r"^\s*KERNEL_(?:CPU|CUDA|MPS|XPU)\((\w+)\s*,\s*(?:(\w+)\s*,\s*)?\w+\)")
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rel, lines in tree.cpp.items():
        depth = None
        key = None
        for number, line in enumerate(lines, 1):
            match = block.search(line)
            if match and depth is None:
                key, depth = match.group(1), 0
            if depth is None:
                continue
            for hit in impl.finditer(line):
                found[(key, hit.group(1))].append(f"{rel}:{number}")
            hit = macro.match(line)
            if hit:
                op = hit.group(1) + (f".{hit.group(2)}" if hit.group(2) else "")
                found[(key, op)].append(f"{rel}:{number}")
            depth += line.count("{") - line.count("}")
            if depth <= 0 and "}" in line:
                depth = None
    out = []
    for (key, op), places in sorted(found.items()):
        if len(places) == 1:
            out.append(
                q(
                    "key_registration",
                    f"{key}-{op}",
                    f"Where is aten::{op} registered for dispatch key {key}?",
                    "trace",
                    {"func": f"aten::{op}", "focus": key},
                    [places],
                    f"inside TORCH_LIBRARY_IMPL(aten, {key}, m) at {places[0]}",
                )
            )
    return out


def gen_listed_registration(tree: Tree) -> list[dict]:
    """Where is aten::X registered for dispatch key K, through an x-macro list: a line
    ``LIST(WRAPPER)`` inside TORCH_LIBRARY_IMPL(aten, K, m) (PyTorch's CUDA and XPU
    Autocast), where a header's ``#define LIST(_)`` has the entry ``_(X[, overload])`` (or
    ``_(f, "X.overload", ...)``) and WRAPPER is a #define writing a KERNEL_* or an
    ``.impl(``. The truth is both lines: the use and the entry."""
    lists: dict[str, list[tuple[str, int, list[str]]]] = {}
    for rel, lines in tree.cpp.items():
        for number, line in enumerate(lines, 1):
            head = re.match(r"#define (\w+)\(_\)\s*\\$", line)
            if not head:
                continue
            body, at = [], number
            while at < len(lines) and lines[at - 1].rstrip().endswith("\\"):
                at += 1
                body.append((at, lines[at - 1].rstrip().rstrip("\\").strip()))
            entries = []
            for position, (at, text) in enumerate(body):
                if not text.startswith("_("):
                    continue
                rest = [more for _, more in body[position + 1 :]]
                following = next((i for i, more in enumerate(rest) if more.startswith("_(")), None)
                whole = " ".join([text, *rest[:following]])[2:].rstrip().removesuffix(")")
                entries.append((rel, at, [a.strip() for a in whole.split(",")]))
            lists.setdefault(head.group(1), []).extend(entries)
    writers = set()
    for lines in tree.cpp.values():
        for number, line in enumerate(lines, 1):
            define = re.match(r"#define (\w+)\(", line)
            body = " ".join(lines[number - 1 : number + 3])
            if define and re.search(r"KERNEL_\w+\(__VA_ARGS__|KERNEL_DIFFERENT_\w+\(", body):
                writers.add(define.group(1))
    direct = _key_registrations(tree)
    block = re.compile(r"TORCH_LIBRARY_IMPL\(\s*aten\s*,\s*(\w+)\s*,\s*(\w+)\s*\)")
    found: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for rel, lines in tree.cpp.items():
        if not rel.endswith(".cpp"):
            continue
        key = None
        depth = 0
        for number, line in enumerate(lines, 1):
            match = block.search(line)
            if match and key is None:
                key, depth = match.group(1), 0
            if key is None:
                continue
            joined = line  # a use may wrap after its '('
            if line.rstrip().endswith("(") and number < len(lines):
                joined += " " + lines[number]
            use = re.match(r"\s*(\w+)\(\s*(\w+)\s*\)", joined)
            if use and use.group(1) in lists and use.group(2) in writers:
                for header, at, args in lists[use.group(1)]:
                    string = re.search(r'"([\w.]+)"', ",".join(args))
                    if string:
                        op = string.group(1)
                    elif len(args) <= 2 and all(re.fullmatch(r"\w+", a) for a in args):
                        op = ".".join(args)
                    else:
                        continue
                    found[(key, op)].append((f"{rel}:{number}", f"{header}:{at}"))
            depth += line.count("{") - line.count("}")
            if depth <= 0 and "}" in line:
                key = None
    out = []
    for (key, op), places in sorted(found.items()):
        if len(places) != 1 or (key, op) in direct:
            continue  # registered twice for the key: no one answer
        use, entry = places[0]
        out.append(
            q(
                "listed_registration",
                f"{key}-{op}",
                f"Where is aten::{op} registered for dispatch key {key}?",
                "trace",
                {"func": f"aten::{op}", "focus": key},
                [[use], [entry]],
                f"the list use at {use} applies its macro to the entry at {entry}",
            )
        )
    return out


def _key_registrations(tree: Tree) -> set[tuple[str, str]]:
    """(key, op) of gen_key_registration's direct registrations."""
    pairs = (question["id"].split("-", 2)[2] for question in gen_key_registration(tree))
    return {tuple(pair.split("-", 1)) for pair in pairs}


def gen_pymethods(tree: Tree) -> list[dict]:
    """Which C++ function implements torch._C.T.name: the PyMethodDef / PyGetSetDef table a
    PyTypeObject names as its tp_methods / tp_getset."""
    out = []
    entry = re.compile(
        r'\{\s*(?:\(char\s*\*\))?"(\w+)"\s*,\s*(?:castPyCFunction\w*\()?'
        r"(?:\((?:PyCFunction|getter)\))?\s*(\w+)"
    )
    for rel, lines in tree.cpp.items():
        if not rel.startswith("torch/csrc/"):
            continue
        text = "\n".join(lines)
        for match in re.finditer(r'"(torch\._C\.\w+)",\s*/\*\s*tp_name\s*\*/', text):
            tp_name = match.group(1)
            rest = text[match.end() : match.end() + 3000]
            for slot in ("tp_methods", "tp_getset"):
                table = re.search(rf"(\w+)\)*,\s*/\*\s*{slot}\s*\*/", rest)
                if not table or table.group(1) == "nullptr":
                    continue
                start = re.search(rf"\b{table.group(1)}\b[^;]*?=\s*\{{", text)
                if not start:
                    continue
                body = text[start.end() : text.find("{nullptr}", start.end())]
                for hit in entry.finditer(body):
                    attr, function = hit.groups()
                    if function in ("nullptr", "THPUtils_"):
                        continue
                    where = tree.definitions(function, (".cpp",))
                    if 0 < len(where) <= 2:
                        spelled = f"{tp_name}.{attr}"
                        out.append(
                            q(
                                "pymethod",
                                spelled,
                                f"Which C++ function implements {spelled}?",
                                "trace",
                                {"func": spelled},
                                [where],
                                f"{rel}: {tp_name} {slot} table maps {attr!r} to {function}",
                            )
                        )
    return out


def gen_callers(tree: Tree) -> list[dict]:
    """Who calls static function F (in one native file, its name used nowhere else): every
    line of that file that calls it."""
    out = []
    for rel, lines in sorted(tree.cpp.items()):
        if not rel.startswith(NATIVE) or not rel.endswith(".cpp"):
            continue
        for number, line in enumerate(lines, 1):
            match = re.match(r"^static (?:inline )?[\w:<>\s\*&]+?[\s\*&](\w+)\(", line)
            if not match:
                continue
            name = match.group(1)
            if tree.words.get(name) != {rel}:
                continue
            # an extern "C" prototype (BatchLinearAlgebra.cpp's #else branch) is no call
            uses = [
                n for n, text in enumerate(lines, 1)
                if re.search(rf"\b{name}\b", text) and n != number
                and not text.lstrip().startswith(("//", "*", "extern"))
            ]  # fmt: skip
            calls = [n for n in uses if re.search(rf"\b{name}\s*(?:<[^>]*>)?\(", lines[n - 1])]
            if 0 < len(calls) <= 4 and calls == uses:
                out.append(
                    q(
                        "callers",
                        name,
                        f"Who calls {name}?",
                        "graph",
                        {"func": name, "mode": "callers"},
                        [[f"{rel}:{n}"] for n in calls],
                        f"{name} is static in {rel} and called at lines {calls}",
                    )
                )
    return out


def gen_header_impact(tree: Tree) -> list[dict]:
    """What does a change to inline header helper H reach: each .cpp/.cu file calling it."""
    out = []
    for rel, lines in sorted(tree.cpp.items()):
        if not rel.startswith(NATIVE) or not rel.endswith(".h"):
            continue
        for number, line in enumerate(lines, 1):
            match = re.match(r"^(?:static )?inline [\w:<>\s\*&]+?[\s\*&](\w+)\(", line)
            if not match:
                continue
            name = match.group(1)
            users = tree.words.get(name, set()) - {rel}
            if not users or len(users) > 3 or any(not u.endswith((".cpp", ".cu")) for u in users):
                continue
            if len(tree.definitions(name, (".h", ".cpp", ".cu"))) != 1:
                continue
            expect = []
            for user in sorted(users):
                calls = [
                    f"{user}:{n}" for n, text in enumerate(tree.cpp[user], 1)
                    if re.search(rf"\b{name}\s*(?:<[^>]*>)?\(", text)
                ]  # fmt: skip
                if calls:
                    expect.append(calls)
            if expect:
                out.append(
                    q(
                        "header_impact",
                        name,
                        f"What does a change to header helper {name} ({rel}) reach?",
                        "graph",
                        {"func": name, "mode": "impact"},
                        expect,
                        f"{name} defined inline at {rel}:{number}, called from "
                        + ", ".join(sorted(users)),
                    )
                )
    return out


def tests_named(tree: Tree, op: str) -> list[str]:
    return [
        f"{rel}:{line}" for rel, line, name, _ in tree.tests
        if name == f"test_{op}" or name.startswith(f"test_{op}_")
    ]  # fmt: skip


def gen_tests(tree: Tree, ops: dict) -> list[dict]:
    """Which tests exercise torch.X: tests named test_X or test_X_*."""
    out = []
    for name, entry in ops.items():
        if "." in name or public_torch_name(entry) is None or len(name) < 4:
            continue
        named = tests_named(tree, name)
        if 0 < len(named) <= 12:
            out.append(
                q(
                    "tests",
                    name,
                    f"Which tests exercise torch.{name}?",
                    "tests",
                    {"query": name},
                    [named],
                    f"def test_{name}* at " + ", ".join(named),
                )
            )
    return out


def gen_cpp_tests(tree: Tree, ops: dict) -> list[dict]:
    """Which tests exercise C++ function F: F is the CPU kernel of torch.X only, and the
    tests named test_X."""
    out = []
    for name, entry in ops.items():
        if "." in name or public_torch_name(entry) is None or len(name) < 4:
            continue
        _, table = dispatch_of(ops, name)
        function = table.get("CPU")
        if not function or function == name or not tree.definitions(function):
            continue
        named = tests_named(tree, name)
        if 0 < len(named) <= 12:
            out.append(
                q(
                    "cpp_tests",
                    function,
                    f"Which tests exercise C++ function {function}?",
                    "tests",
                    {"query": f"at::native::{function}"},
                    [named],
                    f"{function} is the CPU kernel of torch.{name}; def test_{name}* at "
                    + ", ".join(named),
                )
            )
    return out


def gen_affected(tree: Tree, ops: dict) -> list[dict]:
    """Which tests should run after a change to torch.nn.functional.X: tests named test_X
    whose own code calls X(."""
    functional = tree.root / "torch/nn/functional.py"
    names = re.findall(r"^def ([a-z]\w+)\(", functional.read_text(), re.M)
    out = []
    for name in names:
        hits = [
            f"{rel}:{line}" for rel, line, test, body in tree.tests
            if (test == f"test_{name}" or test.startswith(f"test_{name}_"))
            and re.search(rf"\b{name}\(", "\n".join(body))
        ]  # fmt: skip
        if 0 < len(hits) <= 12:
            out.append(
                q(
                    "affected",
                    name,
                    f"I changed torch.nn.functional.{name}: which tests should I run first?",
                    "affected",
                    {"funcs": f"torch.nn.functional.{name}"},
                    [hits],
                    f"tests named test_{name}* calling {name}( at " + ", ".join(hits),
                )
            )
    return out


def gen_python_class(tree: Tree) -> list[dict]:
    """Where is torch.<pkg>.C defined: a class re-exported by the package's __init__."""
    out = []
    for package, sub in (
        ("torch.nn", "torch/nn/modules"),
        ("torch.optim", "torch/optim"),
        ("torch.distributions", "torch/distributions"),
        ("torch.utils.data", "torch/utils/data"),
    ):
        init = (tree.root / sub.replace("/modules", "") / "__init__.py").read_text()
        if sub.endswith("modules"):
            init += (tree.root / sub / "__init__.py").read_text()
        for path in sorted((tree.root / sub).rglob("*.py")):
            rel = path.relative_to(tree.root).as_posix()
            for number, line in enumerate(path.read_text().splitlines(), 1):
                match = re.match(r"class ([A-Z]\w+)\(", line)
                if match and re.search(rf"\b{match.group(1)}\b", init):
                    name = f"{package}.{match.group(1)}"
                    out.append(
                        q(
                            "python_class",
                            name,
                            f"Where is {name} defined?",
                            "modules",
                            {"name": name},
                            [[f"{rel}:{number}"]],
                            f"class {match.group(1)} at {rel}:{number}, named in {package}",
                        )
                    )
    return out


def choose(kinds: dict[str, list[dict]], seed: int, per_kind: int) -> list[dict]:
    """``per_kind`` questions of each kind drawn with ``seed``, each given its half."""
    rng = random.Random(seed)
    questions = []
    for kind, found in kinds.items():
        unique = {question["id"]: question for question in found}
        chosen = sorted(unique)
        rng.shuffle(chosen)
        print(
            f"{kind:18} {len(unique):5} candidates, {min(per_kind, len(unique))} chosen",
            file=sys.stderr,
        )
        for key in sorted(chosen[:per_kind]):
            question = unique[key]
            question["split"] = split_of(question["id"])
            questions.append(question)
    return questions


def generate(root: Path, seed: int, per_kind: int, only: list[str] | None = None) -> list[dict]:
    tree = Tree(root)
    ops = op_table(tree)
    kinds = {
        "cpu_impl": gen_impl(tree, ops, "CPU", "cpu_impl", "CPU"),
        "cuda_kernel": gen_cuda_kernel(tree, ops),
        "callers": gen_callers(tree),
        "tests": gen_tests(tree, ops),
        "backends": gen_backends(tree, ops),
        "python_class": gen_python_class(tree),
        "affected": gen_affected(tree, ops),
        "reverse": gen_reverse(tree, ops),
        "backward": gen_backward(tree, ops),
        "stub": gen_stubs(tree),
        "overload": gen_overload(tree, ops),
        "header_impact": gen_header_impact(tree),
        "key_registration": gen_key_registration(tree),
        "pymethod": gen_pymethods(tree),
        "cpp_tests": gen_cpp_tests(tree, ops),
        # added after seed 37's set was drawn: a kind last keeps the earlier kinds' draws
        "listed_registration": gen_listed_registration(tree),
    }
    if only:  # one rng runs through the kinds: a subset draws its own set for a seed
        kinds = {kind: found for kind, found in kinds.items() if kind in only}
    return choose(kinds, seed, per_kind)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pytorch", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument(
        "--vllm",
        type=Path,
        help="ask about this vLLM tree instead (bench/mcp_question_gen_vllm.py)",
    )
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--per-kind", type=int, default=14)
    parser.add_argument("--out", type=Path, help=f"default {OUT.name}, or {OUT_VLLM.name}")
    parser.add_argument("--kinds", nargs="*", help="only these kinds (listed_registration ...)")
    args = parser.parse_args()
    if args.vllm is not None:
        return write_vllm(args)
    if not (args.pytorch / NATIVE / "native_functions.yaml").is_file():
        print(f"error: {args.pytorch} is not a PyTorch source tree", file=sys.stderr)
        return 2
    questions = generate(args.pytorch, args.seed, args.per_kind, args.kinds)
    return write(args.out or OUT, questions, args.seed, "the C++, CUDA and Python files and yaml")


def write_vllm(args: argparse.Namespace) -> int:
    from mcp_question_gen_vllm import generate_vllm  # bench/, beside this script

    if not (args.vllm / "csrc" / "torch_bindings.cpp").is_file():
        print(f"error: {args.vllm} is not a vLLM source tree", file=sys.stderr)
        return 2
    questions = choose(generate_vllm(args.vllm), args.seed, args.per_kind)
    return write(args.out or OUT_VLLM, questions, args.seed, "csrc/ and vllm/")


def write(out: Path, questions: list[dict], seed: int, read: str) -> int:
    halves = {split: sum(q["split"] == split for q in questions) for split in ("dev", "held_out")}
    data = {
        "about": "Generated by bench/mcp_question_gen.py (truth from the sources by regular "
        f"expressions over {read}, not the index); split by a hash of each id into dev and "
        "held_out before any answer was looked at.",
        "tolerance": TOLERANCE,
        "seed": seed,
        "questions": questions,
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out)
    print(f"{len(questions)} questions ({halves}) -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
