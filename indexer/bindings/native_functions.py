"""native_functions.yaml -> ``op`` nodes and the refs to their kernels.

Each entry becomes ``aten::<name>[.<overload>]`` at the entry's line, with its schema,
variants, dispatch table (comma-joined keys split), structured fields, tags and Python
spellings. Its kernels, following torchgen's rules:

- ``dispatch: {Key: fn}`` -> ``at::native::fn`` (``ns::fn`` -> ``ns::native::fn``), one
  ``dispatches`` ref per key, carrying ``key``;
- in a ``structured: True`` entry the CPU/CUDA/MPS/XPU kernels are ``TORCH_IMPL_FUNC(fn)``,
  i.e. ``at::native::structured_fn::impl``; the group's meta function is
  ``at::meta::structured_<functional name>::meta`` (``TORCH_META_FUNC2(add, Tensor)``);
- ``ufunc_inner_loop`` -> torchgen generates the CPU/CUDA kernels at build time (none of
  them is in the source): the op dispatches (CPU) to the ``<name>_stub`` DispatchStub the
  generated CPU kernel calls, and (CPU, CUDA) to the inner loops ``at::native::ufunc::<loop>``
  (ufunc/*.h) the generated kernels run; the refs say what is generated, and where;
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
        loops = ufunc_loops(entry.data.get("ufunc_inner_loop"))
        if loops:
            stub_base = split_op_name(functional[0])[1] if functional else schema.name
            self._add_ufunc_refs(entry, schema.name, stub_base, node, loops, explicit)

    def _add_ufunc_refs(
        self,
        entry: Entry,
        name: str,
        stub_base: str,
        node: int,
        loops: dict[str, list[str]],
        explicit: set[str],
    ) -> None:
        """What torchgen generates for ``ufunc_inner_loop`` (torchgen/dest/ufunc.py), none of
        it in the source tree: per device key a ``TORCH_IMPL_FUNC(ufunc_<name>_<Key>)``; the
        CPU one calls ``<stub>(device_type(), ...)`` whose kernel ``<stub base>_kernel``
        (UfuncCPUKernel_<name>.cpp, REGISTER_DISPATCH) runs the inner loops; the CUDA one
        calls its ``<stub base>_kernel`` (UfuncCUDA_<name>.cu) directly. So the op's edges
        go to what the source does hold: the stub (CPU) and the inner loops (CPU, CUDA)."""
        line = entry.line_of("ufunc_inner_loop")
        keys = [key for key in UFUNC_KEYS if key in loops and key not in explicit]
        kernel = f"{stub_base}_kernel"
        files = {
            "CPU": [f"UfuncCPU_{name}.cpp", f"UfuncCPUKernel_{name}.cpp"],
            "CUDA": [f"UfuncCUDA_{name}.cu"],
        }
        via = {
            "CPU": f"ufunc_{name}_CPU -> {stub_base}_stub -> {kernel}",
            "CUDA": f"ufunc_{name}_CUDA -> {kernel} (called directly, not through the stub)",
        }
        if "CPU" in keys:
            self._dispatch_ref(
                node,
                f"at::native::{stub_base}_stub",
                NATIVE_SCOPE,
                line,
                key="CPU",
                keys=["CPU"],
                role="ufunc_stub",
                generated=f"ufunc_{name}_CPU",
                generated_kernel=kernel,
                generated_files=files["CPU"],
                want=["dispatch_stub"],
            )
        for key in keys:
            for loop in loops[key]:
                self._dispatch_ref(
                    node,
                    f"at::native::ufunc::{loop}",
                    ["at", "native", "ufunc"],
                    line,
                    key=key,
                    keys=[key],
                    role="ufunc_inner_loop",
                    generated=f"ufunc_{name}_{key}",
                    generated_via=via[key],
                    generated_files=files[key],
                )


# torchgen's UfuncKey -> the device keys whose generated kernels call that inner loop.
_UFUNC_DEVICES = {
    "Generic": ("CPU", "CUDA"),
    "ScalarOnly": ("CPU", "CUDA"),
    "CPUScalar": ("CPU",),
    "CPUVector": ("CPU",),
    "CUDAFunctor": ("CUDA",),
    "CUDAFunctorOnSelf": ("CUDA",),
    "CUDAFunctorOnOther": ("CUDA",),
}


def ufunc_loops(raw: Any) -> dict[str, list[str]]:
    """``ufunc_inner_loop`` (``'add (AllAndComplex)'`` or ``{Generic: 'add (...)', ...}``)
    -> device key -> inner-loop names, in first-seen order."""
    if isinstance(raw, str):
        raw = {"Generic": raw}
    if not isinstance(raw, dict):
        return {}
    loops: dict[str, list[str]] = {}
    for ufunc_key, value in raw.items():
        loop = str(value).split("(")[0].strip()
        for device in _UFUNC_DEVICES.get(str(ufunc_key), ()) if loop else ():
            names = loops.setdefault(device, [])
            if loop not in names:
                names.append(loop)
    return loops
