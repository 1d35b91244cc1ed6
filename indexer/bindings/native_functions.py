"""native_functions.yaml -> ``op`` nodes and the refs to their kernels.

Each entry becomes ``aten::<name>[.<overload>]`` at the entry's line, with its schema,
variants, dispatch table (comma-joined keys split), structured fields, tags and Python
spellings. Its kernels, following torchgen's rules:

- ``dispatch: {Key: fn}`` -> ``at::native::fn`` (``ns::fn`` -> ``ns::native::fn``), one
  ``dispatches`` ref per key, carrying ``key``;
- in a ``structured: True`` entry the CPU/CUDA/MPS/XPU kernels are ``TORCH_IMPL_FUNC(fn)``,
  i.e. ``at::native::structured_fn::impl``; the group's meta function is
  ``at::meta::structured_<functional name>::meta`` (``TORCH_META_FUNC2(add, Tensor)``);
- ``ufunc_inner_loop`` -> CPU/CUDA kernels are generated at build time: the op dispatches
  to the ``<name>_stub`` DispatchStub and to the inner loop ``at::native::ufunc::<loop>``;
- ``structured_delegate: add.out`` -> a ``dispatches`` edge to that op;
- no dispatch table and no delegate -> CompositeImplicitAutograd ``at::native::<cpp name>``;
- ``autogen: x.out`` -> an op node for the generated variant, dispatching to its source.

Every op also asks (scheme ``op_impl``) for the ``registration`` nodes other files make
with ``m.impl`` for it.
"""

from __future__ import annotations

from typing import Any

from indexer.bindings.python_names import aten_python_names
from indexer.bindings.schema import parse_schema, split_op_name
from indexer.bindings.yaml_entries import Entry
from indexer.graph.facts import FileFacts
from indexer.graph.vocabulary import EdgeKind, NodeKind

STRUCTURED_KEYS = frozenset({"CPU", "CUDA", "MPS", "XPU"})
UFUNC_KEYS = ("CPU", "CUDA")
IMPLICIT_KEY = "CompositeImplicitAutograd"
NATIVE_SCOPE = ["at", "native"]


def split_list(value: Any) -> list[str]:
    """``'function, method'`` or ``['core', 'pointwise']`` -> a list of names."""
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


def dispatch_table(entry: Entry) -> list[tuple[str, str, int, list[str]]]:
    """(key, function, line, keys sharing the line) for each key of the dispatch table."""
    raw = entry.data.get("dispatch")
    if not isinstance(raw, dict):
        return []
    lines = entry.nested_lines.get("dispatch", {})
    table = []
    for raw_key, function in raw.items():
        keys = split_list(raw_key)
        for key in keys:
            table.append((key, str(function).strip(), lines.get(raw_key, entry.line), keys))
    return table


def kernel_target(function: str) -> tuple[str, list[str]]:
    """The C++ name torchgen gives a dispatch entry's kernel, and its namespace scope."""
    if "::" in function:
        namespace, _, name = function.rpartition("::")
        scope = [*namespace.split("::"), "native"]
        return f"{namespace}::native::{name}", scope
    return f"at::native::{function}", NATIVE_SCOPE


def cpp_name(schema_name: str, is_out: bool) -> str:
    """torchgen's cpp.name: the base name, ``_out`` appended for out= variants."""
    return f"{schema_name}_out" if is_out else schema_name


class NativeFunctionsReader:
    """Turns the entries of one native_functions.yaml into nodes and refs on ``facts``."""

    def __init__(self, facts: FileFacts, packages: list[str]) -> None:
        self.facts = facts
        self.packages = packages
        self.op_nodes: dict[str, int] = {}  # 'add.out' -> local node index
        self.delegators: dict[str, list[str]] = {}  # 'add.out' -> ['add.Tensor', 'add_.Tensor']

    def read(self, entries: list[Entry]) -> None:
        parsed = []
        for entry in entries:
            schema = parse_schema(entry.text("func"))
            if schema is None or not schema.has_signature:
                self.facts.parse_errors += 1
                continue
            parsed.append((entry, schema))
            delegate = entry.text("structured_delegate").strip()
            if delegate:
                self.delegators.setdefault(delegate, []).append(schema.full_name)
        for entry, schema in parsed:
            self._add_op(entry, schema)
        for entry, schema in parsed:
            self._add_kernel_refs(entry, schema)

    def _add_op(self, entry: Entry, schema) -> None:
        variants = split_list(entry.data.get("variants")) or ["function"]
        python_module = entry.text("python_module").strip() or None
        table = dispatch_table(entry)
        attrs: dict[str, Any] = {
            "namespace": "aten",
            "overload": schema.overload,
            "schema": " ".join(entry.text("func").split()),
            "arguments": [arg.as_dict() for arg in schema.arguments],
            "returns": schema.returns,
            "variants": variants,
            "dispatch": {key: function for key, function, _, _ in table},
            "structured": bool(entry.data.get("structured")),
            "structured_delegate": entry.text("structured_delegate").strip() or None,
            "structured_inherits": entry.text("structured_inherits").strip() or None,
            "tags": split_list(entry.data.get("tags")),
            "python_module": python_module,
            "python_names": aten_python_names(
                self.packages, schema.name, schema.overload, variants, python_module
            ),
            "source": "native_functions.yaml",
        }
        if isinstance(entry.data.get("ufunc_inner_loop"), (dict, str)):
            attrs["ufunc_inner_loop"] = entry.data["ufunc_inner_loop"]
        autogen = split_list(entry.data.get("autogen"))
        if autogen:
            attrs["autogen"] = autogen
        qualname = f"aten::{schema.full_name}"
        node = self.facts.add_node(
            NodeKind.OP.value, schema.name, qualname, entry.line, entry.end_line, **attrs
        )
        self.op_nodes[schema.full_name] = node
        self.facts.add_ref(node, EdgeKind.DISPATCHES.value, "op_impl", qualname, entry.line)
        for generated in autogen:
            _, name, overload = split_op_name(generated)
            full = f"{name}.{overload}" if overload else name
            line = entry.line_of("autogen")
            gen_node = self.facts.add_node(
                NodeKind.OP.value,
                name,
                f"aten::{full}",
                line,
                line,
                namespace="aten",
                overload=overload,
                autogen_from=qualname,
                python_names=aten_python_names(self.packages, name, overload, [], None),
                source="native_functions.yaml",
            )
            self.op_nodes.setdefault(full, gen_node)
            self.facts.add_local_edge(
                gen_node,
                node,
                EdgeKind.DISPATCHES.value,
                line,
                key="CompositeExplicitAutograd",
                autogen=True,
            )

    def _dispatch_ref(self, node: int, target: str, scope: list[str], line: int, **attrs) -> None:
        self.facts.add_ref(
            node, EdgeKind.DISPATCHES.value, "cpp", target, line, scope=scope, using=[], **attrs
        )

    def _add_kernel_refs(self, entry: Entry, schema) -> None:
        node = self.op_nodes[schema.full_name]
        structured = bool(entry.data.get("structured"))
        table = dispatch_table(entry)
        for key, function, line, keys in table:
            if structured and key in STRUCTURED_KEYS:
                target = f"at::native::structured_{function}::impl"
                self._dispatch_ref(
                    node,
                    target,
                    NATIVE_SCOPE,
                    line,
                    key=key,
                    keys=keys,
                    kernel=function,
                    structured=True,
                )
            else:
                target, scope = kernel_target(function)
                self._dispatch_ref(node, target, scope, line, key=key, keys=keys, kernel=function)
        if structured:
            explicit = {key for key, _, _, _ in table}
            self._add_structured_refs(entry, schema, node, explicit)
        delegate = entry.text("structured_delegate").strip()
        if delegate:
            line = entry.line_of("structured_delegate")
            if delegate in self.op_nodes:
                self.facts.add_local_edge(
                    node,
                    self.op_nodes[delegate],
                    EdgeKind.DISPATCHES.value,
                    line,
                    structured_delegate=True,
                )
            else:
                self.facts.add_ref(
                    node,
                    EdgeKind.DISPATCHES.value,
                    "op",
                    f"aten::{delegate}",
                    line,
                    exact=True,
                    structured_delegate=True,
                )
        elif not table and not structured:
            name = cpp_name(schema.name, schema.is_out)
            self._dispatch_ref(
                node,
                f"at::native::{name}",
                NATIVE_SCOPE,
                entry.line,
                key=IMPLICIT_KEY,
                keys=[IMPLICIT_KEY],
                kernel=name,
                implicit=True,
            )

    def _add_structured_refs(self, entry: Entry, schema, node: int, explicit: set[str]) -> None:
        functional = [
            name
            for name in self.delegators.get(schema.full_name, [])
            if not split_op_name(name)[1].endswith("_")
        ]
        if functional:
            meta = functional[0].replace(".", "_")
            self._dispatch_ref(
                node,
                f"at::meta::structured_{meta}::meta",
                ["at", "meta"],
                entry.line,
                key="Meta",
                keys=["Meta"],
                role="meta",
                kernel=meta,
            )
        loops = entry.data.get("ufunc_inner_loop")
        generated_keys = [key for key in UFUNC_KEYS if key not in explicit]
        if not loops or not generated_keys:
            return
        line = entry.line_of("ufunc_inner_loop")
        stub_base = split_op_name(functional[0])[1] if functional else schema.name
        for key in generated_keys:
            self._dispatch_ref(
                node,
                f"at::native::{stub_base}_stub",
                NATIVE_SCOPE,
                line,
                key=key,
                keys=[key],
                role="ufunc_stub",
                generated=f"ufunc_{schema.name}_{key}",
                want=["dispatch_stub"],
            )
        loop_values = loops.values() if isinstance(loops, dict) else [loops]
        for loop in dict.fromkeys(str(value).split("(")[0].strip() for value in loop_values):
            for key in generated_keys if loop else ():
                self._dispatch_ref(
                    node,
                    f"at::native::ufunc::{loop}",
                    ["at", "native", "ufunc"],
                    line,
                    key=key,
                    keys=generated_keys,
                    role="ufunc_inner_loop",
                )
