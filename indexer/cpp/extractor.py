"""C++ and CUDA files -> function, kernel, class and dispatch-stub nodes; call, launch,
include and dispatch refs.

One tree-sitter query collects every node of interest (namespaces, classes, function
definitions, callees, includes, ERROR regions) in C; Python then handles only those
nodes, never the whole tree. Calls are attributed to the innermost enclosing function by
byte offset, so calls inside lambdas (``AT_DISPATCH_*`` bodies, ``gpu_kernel`` functors)
belong to the function that wrote them.
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING

from tree_sitter import Query, QueryCursor

from indexer.cpp import macros
from indexer.cpp.includes import add_include_ref, include_roots
from indexer.cpp.names import is_macro_name, signature_key, split_qualified, strip_templates
from indexer.cpp.scopes import CLASS, FUNCTION, NAMESPACE, Region, namespace_at, nest
from indexer.graph.facts import FILE_NODE, FileFacts
from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.harness import Manifest

if TYPE_CHECKING:
    from tree_sitter import Language, Node

    from indexer.extract.source import SourceFile

_QUERY = """
(namespace_definition) @ns
(class_specifier body: (_)) @cls
(struct_specifier body: (_)) @cls
(union_specifier body: (_)) @cls
(function_definition) @fn
(call_expression function: (_) @callee)
(using_declaration "namespace" (_) @using)
(namespace_alias_definition) @alias
(preproc_include path: (_) @include)
(ERROR) @error
(declaration
  type: [(type_identifier) (qualified_identifier) (template_type)]
  declarator: [(identifier) @var (init_declarator declarator: (identifier) @var)])
(parameter_declaration
  type: [(type_identifier) (qualified_identifier) (template_type)]
  declarator: [(identifier) @var
               (reference_declarator (identifier) @var)
               (pointer_declarator declarator: (identifier) @var)])
"""
# In CUDA code a kernel can be launched by passing it to a helper.
_KERNEL_ARGUMENTS = """
(argument_list [(identifier) (template_function) (qualified_identifier)] @karg)
(argument_list (pointer_expression argument: [(identifier) (template_function) (qualified_identifier)] @karg))
(argument_list (cast_expression value: [(identifier) (template_function) (qualified_identifier)] @karg))
"""

_queries: dict[tuple[int, bool], Query] = {}
_queries_lock = threading.Lock()

_WRAPPERS = frozenset(
    {
        "pointer_declarator",
        "reference_declarator",
        "attributed_declarator",
        "parenthesized_declarator",
    }
)
_STATIC = re.compile(rb"\bstatic\b")
_CONST = re.compile(rb"\bconst\b")
_LAUNCH_HELPER = re.compile(r"launch", re.I)
_CASTS = ("static_cast<", "const_cast<", "reinterpret_cast<", "dynamic_cast<", "bit_cast<")
_CPP = "cpp"
_CALLS = EdgeKind.CALLS.value
_LAUNCHES = EdgeKind.LAUNCHES.value
_KERNEL_ONLY = [NodeKind.CUDA_KERNEL.value]


def _query(language: Language, cuda: bool) -> Query:
    key = (id(language), cuda)
    query = _queries.get(key)
    if query is None:
        with _queries_lock:
            query = _queries.get(key)
            if query is None:
                query = Query(language, _QUERY + (_KERNEL_ARGUMENTS if cuda else ""))
                _queries[key] = query
    return query


class CppExtractor:
    """The C++/CUDA extractor (registered in indexer.extract.extractor.EXTRACTORS)."""

    name = "cpp"

    def __init__(self, manifest: Manifest) -> None:
        self.registration_macros = frozenset(
            manifest.list("bindings", "torch_library_macros")
            + manifest.list("bindings", "pybind_macros")
            + manifest.list("bindings", "registration_wrappers")
        )
        self.stub_pattern = macros.macro_pattern(manifest.list("bindings", "dispatch_stub_macros"))
        self.roots = include_roots(manifest.list("sources", "cpp"))

    def wants(self, src: SourceFile) -> bool:
        return src.language in ("cpp", "cuda")

    def extract(self, src: SourceFile, facts: FileFacts) -> None:
        _FileExtraction(self, src, facts).run()


class _Function:
    """A function definition that owns calls: its node and the scope its body sees."""

    __slots__ = ("end", "local", "ref_scope", "start", "this_class", "usings")

    def __init__(self, region: Region, local: int, ref_scope: list[str], this_class: str | None):
        self.start = region.start
        self.end = region.end
        self.local = local
        self.ref_scope = ref_scope
        self.this_class = this_class
        self.usings: list[str] = []


class _FileExtraction:
    def __init__(self, extractor: CppExtractor, src: SourceFile, facts: FileFacts) -> None:
        self.extractor = extractor
        self.src = src
        self.facts = facts
        self.prepared = src.cpp_prepared
        self.data = self.prepared.data
        self.functions: list[_Function] = []
        self.kernel_names: set[str] = set()
        self.usings: list[tuple[int, int, str]] = []  # (start, end of its scope, namespace)
        self.aliases: dict[str, str] = {}
        self.var_types: dict[int, str | None] = {}
        self.variables: dict[bytes, list[tuple[int, Node]]] = {}
        self.helper_arguments: set[int] = set()
        self.defined: dict[tuple[str, str], int] = {}  # (qualname, signature) -> node
        self.classes: dict[str, int] = {}  # qualname -> node, for out-of-line methods

    def text(self, node: Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    def run(self) -> None:
        self.src.text  # noqa: B018 - decoding records a non-UTF-8 file on src.decode_error
        tree = self.src.cpp_tree
        prepared = self.prepared
        cuda = self.src.language == "cuda" or bool(prepared.global_at or prepared.launch_at)
        captures = QueryCursor(_query(tree.language, cuda)).captures(tree.root_node)
        self.facts.parse_errors = max(
            self.facts.parse_errors, _outermost(captures.get("error", ()))
        )
        for node in captures.get("include", ()):
            add_include_ref(
                self.facts, self.text(node), node.start_point[0] + 1, self.extractor.roots
            )
        regions = nest(
            self.data, captures.get("ns", []), captures.get("cls", []), captures.get("fn", [])
        )
        namespaces = [region for region in regions if region.kind == NAMESPACE]
        self._collect_usings(captures, regions)
        for region in regions:
            if region.in_function:
                continue
            if region.kind == CLASS:
                self._add_class(region)
            elif region.kind == FUNCTION:
                self._add_function(region)
        for function in self.functions:
            function.usings = [
                name
                for start, end, name in self.usings
                if start < function.end and end > function.start
            ]
        if self.extractor.stub_pattern is not None and b"DISPATCH" in self.data:
            self._dispatch_stubs(namespaces)
        self._calls(captures)
        if "karg" in captures:
            self._kernel_arguments(captures["karg"])

    # -- structure -------------------------------------------------------------------

    def _collect_usings(self, captures: dict[str, list[Node]], regions: list[Region]) -> None:
        if "using" not in captures and "alias" not in captures:
            return
        enclosing = [r for r in regions if r.kind != CLASS and not r.in_function]
        for node in captures.get("using", ()):
            start = node.start_byte
            end = len(self.data)
            for region in enclosing:  # the innermost namespace or function around it
                if region.start > start:
                    break
                if start < region.end:
                    end = region.end
            self.usings.append((start, end, "::".join(split_qualified(self.text(node)))))
        for node in captures.get("alias", ()):
            name = node.child_by_field_name("name")
            value = node.named_children[-1] if node.named_child_count else None
            if name is not None and value is not None and value is not name:
                self.aliases[self.text(name)] = "::".join(split_qualified(self.text(value)))

    def _add_class(self, region: Region) -> None:
        if not region.names:
            return
        owner = region.owner
        bases = []
        for child in region.node.named_children:
            if child.type == "base_class_clause":
                bases = [
                    strip_templates(self.text(base))
                    for base in child.named_children
                    if base.type in ("type_identifier", "qualified_identifier", "template_type")
                ]
        qualname = "::".join(region.scope + region.names)
        line = region.node.start_point[0] + 1
        attrs = {"bases": bases} if bases else {}
        parent = owner.local if owner is not None and owner.local else FILE_NODE
        region.local = self.classes[qualname] = self.facts.add_node(
            NodeKind.CPP_CLASS.value,
            region.names[-1],
            qualname,
            line,
            region.node.end_point[0] + 1,
            parent,
            **attrs,
        )
        self.facts.add_local_edge(parent, region.local, EdgeKind.CONTAINS.value, line)

    def _add_function(self, region: Region) -> None:
        node = region.node
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.type in _WRAPPERS:
            inner = declarator.child_by_field_name("declarator")
            if inner is None and declarator.named_child_count:
                inner = declarator.named_children[-1]
            declarator = inner
        if declarator is None:
            return
        attrs: dict[str, object] = {}
        if declarator.type == "function_declarator":
            name_node = declarator.child_by_field_name("declarator")
            params = declarator.child_by_field_name("parameters")
            if name_node is None or params is None:
                return
            name_start = name_node.start_byte
            trailing = self.data[params.end_byte : declarator.end_byte]
            signature = signature_key(self.text(params), "const" if _CONST.search(trailing) else "")
            if name_node.type == "function_declarator":  # MACRO(args) (params) {...}
                described = self._macro_function(region, name_node, attrs)
            elif (
                name_node.type == "identifier"
                and node.child_by_field_name("type") is None
                and is_macro_name(self.text(name_node))
            ):
                described = self._macro_block(region, self.text(name_node), params, attrs)
            else:
                components = split_qualified(self.text(name_node))
                described = (
                    (components[-1], region.scope + components, region.scope + components[:-1])
                    if components
                    else None
                )
        elif declarator.type in ("qualified_identifier", "operator_cast"):  # A::operator T()
            text = self.text(declarator)
            cut = text.find("(")
            if cut < 0:
                return
            name_start = declarator.start_byte
            signature = signature_key(
                text[cut : text.rfind(")") + 1],
                "const" if "const" in text[text.rfind(")") :] else "",
            )
            components = split_qualified(text[:cut])
            described = (
                (components[-1], region.scope + components, region.scope + components[:-1])
                if components
                else None
            )
        else:
            return
        if described is None:
            return
        name, qual_components, ref_scope = described
        qualname = "::".join(qual_components)
        kind = NodeKind.CPP_FUNCTION.value
        prepared = self.prepared
        if prepared.global_at and self._marked(prepared.global_at, name_start):
            kind = NodeKind.CUDA_KERNEL.value
            self.kernel_names.add(name)
        elif (prepared.device_at or prepared.host_device_at) and (
            self._marked(prepared.device_at, name_start)
            or self._marked(prepared.host_device_at, name_start)
        ):
            attrs["device"] = True
            if self._marked(prepared.host_at, name_start) or self._marked(
                prepared.host_device_at, name_start
            ):
                attrs["host"] = True
        member = region.owner is not None or len(ref_scope) > len(region.scope)
        if (
            not member
            and "macro" not in attrs
            and _STATIC.search(self.data, node.start_byte, declarator.start_byte)
        ):
            attrs["static"] = True  # internal linkage: visible from its own file only
        parent_type = node.parent.type if node.parent is not None else ""
        if parent_type == "template_declaration":
            attrs["template"] = True
        if region.owner is not None and region.owner.local:
            parent = region.owner.local
        elif member:
            parent = self.classes.get("::".join(ref_scope), FILE_NODE)
        else:
            parent = FILE_NODE
        line = node.start_point[0] + 1
        end_line = node.end_point[0] + 1
        this_class = "::".join(ref_scope) if member and ref_scope else None
        local = self.defined.get((qualname, signature))
        if local is not None:
            # The same definition again in another #if branch: one function, several bodies.
            self.facts.nodes[local].attrs.setdefault("alt_lines", []).append([line, end_line])
            self.functions.append(_Function(region, local, ref_scope, this_class))
            return
        local = self.facts.add_node(
            kind, name, qualname, line, end_line, parent, signature=signature, **attrs
        )
        self.defined[(qualname, signature)] = local
        self.facts.add_local_edge(parent, local, EdgeKind.CONTAINS.value, line)
        self.functions.append(_Function(region, local, ref_scope, this_class))

    def _macro_function(self, region: Region, name_node: Node, attrs: dict[str, object]):
        """``TORCH_IMPL_FUNC(add_out) (...) {...}`` and other MACRO(args)(params) forms."""
        macro_node = name_node.child_by_field_name("declarator")
        arguments_node = name_node.child_by_field_name("parameters")
        if macro_node is None or arguments_node is None:
            return None
        macro = self.text(macro_node)
        arguments = macros.split_arguments(self.text(arguments_node)[1:-1])
        attrs["macro"] = macro
        expanded = macros.structured(macro, arguments)
        if expanded is not None:
            name, members = expanded
            return name, region.scope + members, region.scope + members[:-1]
        label = macros.macro_label(macro, arguments)
        return label, [*region.scope, label], region.scope

    def _macro_block(self, region: Region, macro: str, params: Node, attrs: dict[str, object]):
        """``TORCH_LIBRARY_IMPL(aten, CPU, m) {...}``: a macro tree-sitter reads as a function.

        Registration blocks are the bindings extractor's; their calls are still recorded,
        from a node standing for the block, so no body is lost.
        """
        arguments = macros.split_arguments(self.text(params)[1:-1])
        attrs["macro"] = macro
        expanded = macros.structured(macro, arguments)
        if expanded is not None:
            name, members = expanded
            return name, region.scope + members, region.scope + members[:-1]
        if macro in self.extractor.registration_macros:
            attrs["registration"] = True
            label = macros.registration_label(macro, arguments)
            return label, [label], region.scope
        label = macros.macro_label(macro, arguments)
        return label, [*region.scope, label], region.scope

    def _marked(self, offsets: list[int], name_start: int) -> bool:
        """Whether a blanked qualifier (``__global__``...) belongs to the declaration whose
        name starts at ``name_start``: nothing that ends a declaration lies between."""
        index = bisect_left(offsets, name_start) - 1
        if index < 0:
            return False
        data = self.data
        start = offsets[index]
        return (
            data.find(b";", start, name_start) < 0
            and data.find(b"{", start, name_start) < 0
            and data.find(b"}", start, name_start) < 0
        )

    # -- dispatch stubs --------------------------------------------------------------

    def _dispatch_stubs(self, namespaces: list[Region]) -> None:
        facts = self.facts
        for use in macros.find_macro_uses(self.data, self.extractor.stub_pattern):
            scope = namespace_at(namespaces, use.offset)
            if use.macro == macros.DECLARE:
                if len(use.arguments) < 2 or not use.arguments[-1].isidentifier():
                    continue
                name = use.arguments[-1]
                local = facts.add_node(
                    NodeKind.DISPATCH_STUB.value,
                    name,
                    "::".join([*scope, name]),
                    use.line,
                    use.line,
                    FILE_NODE,
                    macro=use.macro,
                    fn_type=use.arguments[0],
                )
                facts.add_local_edge(FILE_NODE, local, EdgeKind.CONTAINS.value, use.line)
            elif use.macro != macros.DEFINE and len(use.arguments) >= 2:
                kernel = macros.callable_name(use.arguments[-1])
                if kernel is None or not use.arguments[0].isidentifier():
                    continue
                usings = [name for start, end, name in self.usings if start < use.offset < end]
                attrs: dict[str, object] = {
                    "scope": scope,
                    "stub": use.arguments[0],
                    "macro": use.macro,
                }
                if usings:
                    attrs["using"] = usings
                facts.add_ref(FILE_NODE, EdgeKind.DISPATCHES.value, _CPP, kernel, use.line, **attrs)

    # -- calls -----------------------------------------------------------------------

    def _calls(self, captures: dict[str, list[Node]]) -> None:
        callees = captures.get("callee")
        if not callees or not self.functions:
            return
        functions = sorted(self.functions, key=lambda function: function.start)
        starts = [function.start for function in functions]
        ends = [function.end for function in functions]
        data = self.data
        add_ref = self.facts.add_ref
        aliases = self.aliases
        launch_ends = self._launch_ends()
        variables = self.variables = self._variables(captures.get("var", ()))
        for callee in callees:
            start = callee.start_byte
            index = bisect_right(starts, start) - 1
            if index < 0 or start >= ends[index]:
                continue  # namespace scope: macros and static initializers
            function = functions[index]
            end = callee.end_byte
            kind = callee.type
            attrs: dict[str, object] = {"scope": function.ref_scope}
            if function.usings:
                attrs["using"] = function.usings
            launch = end in launch_ends if launch_ends else False
            if kind == "identifier":
                written = data[start:end]
                target = written.decode("utf-8", "replace")
                if is_macro_name(target):
                    continue
                if variables and not launch:
                    receiver = self._variable_type(variables, written, start, function)
                    if receiver is not None:  # an object called: its operator()
                        attrs["receiver"] = receiver
                        target = "operator()"
            elif kind == "qualified_identifier" or kind == "template_function":
                target = data[start:end].decode("utf-8", "replace")
                if target.startswith(_CASTS):
                    continue
                if " " in target or "\n" in target:
                    target = " ".join(target.split()).replace(" ::", "::").replace(":: ", "::")
                if aliases:
                    head, sep, rest = target.partition("::")
                    if sep and head in aliases:
                        target = f"{aliases[head]}::{rest}"
            elif kind == "field_expression":
                field = callee.child_by_field_name("field")
                if field is None:
                    continue
                target = strip_templates(
                    data[field.start_byte : field.end_byte].decode("utf-8", "replace")
                )
                target = (
                    target.replace("template", "").strip()
                    if target.startswith("template")
                    else target
                )
                receiver_node = callee.child_by_field_name("argument")
                receiver = None
                if receiver_node is not None:
                    receiver_kind = receiver_node.type
                    if receiver_kind == "this":
                        receiver = function.this_class
                    elif receiver_kind == "identifier" and variables:
                        receiver = self._variable_type(
                            variables,
                            data[receiver_node.start_byte : receiver_node.end_byte],
                            start,
                            function,
                        )
                if receiver is not None:
                    attrs["receiver"] = receiver
                else:
                    attrs["member"] = True
            else:
                continue  # (*fn)(...), lambda(...)(...), f()(...): no name to resolve
            line = callee.start_point[0] + 1
            if launch:
                attrs["want"] = _KERNEL_ONLY
                add_ref(function.local, _LAUNCHES, _CPP, target, line, **attrs)
                continue
            add_ref(function.local, _CALLS, _CPP, target, line, **attrs)
            if "karg" in captures and _LAUNCH_HELPER.search(target):
                arguments = callee.next_named_sibling
                if arguments is not None:
                    self.helper_arguments.add(arguments.start_byte)
        self._sorted_functions = functions

    def _launch_ends(self) -> set[int]:
        """Where the callee of each ``<<<...>>>`` launch ends (the launch config is blanked)."""
        ends = set()
        data = self.data
        for offset in self.prepared.launch_at:
            end = offset
            while end > 0 and data[end - 1] in b" \t\r\n":
                end -= 1
            ends.add(end)
        return ends

    def _variables(self, nodes: list[Node]) -> dict[bytes, list[tuple[int, Node]]]:
        data = self.data
        variables: dict[bytes, list[tuple[int, Node]]] = {}
        for node in nodes:
            start = node.start_byte
            variables.setdefault(data[start : node.end_byte], []).append((start, node))
        return variables

    def _variable_type(
        self,
        variables: dict[bytes, list[tuple[int, Node]]],
        name: bytes,
        at: int,
        function: _Function,
    ) -> str | None:
        """The class a local variable or parameter of ``function`` was declared with."""
        found = None
        for start, node in variables.get(name, ()):
            if function.start <= start < at:
                found = node
            elif start >= at:
                break
        if found is None:
            return None
        key = found.id
        if key in self.var_types:
            return self.var_types[key]
        written = None
        owner = found.parent
        for _ in range(3):
            if owner is None:
                break
            if owner.type in (
                "declaration",
                "parameter_declaration",
                "optional_parameter_declaration",
            ):
                type_node = owner.child_by_field_name("type")
                if type_node is not None:
                    written = "::".join(split_qualified(self.text(type_node))) or None
                break
            owner = owner.parent
        self.var_types[key] = written
        return written

    def _kernel_arguments(self, arguments: list[Node]) -> None:
        """Kernels passed as arguments: ``launch_kernel(k<T>, ...)``, ``cudaLaunchKernel((void*)k)``."""
        functions = getattr(self, "_sorted_functions", None)
        if not functions:
            return
        starts = [function.start for function in functions]
        helper_arguments = self.helper_arguments
        for node in arguments:
            start = node.start_byte
            index = bisect_right(starts, start) - 1
            if index < 0 or start >= functions[index].end:
                continue
            written = "".join(self.text(node).split())
            name = split_qualified(written)[-1:] if written else []
            if not name:
                continue
            if name[0] not in self.kernel_names:
                # Passed to a launch helper: as its first argument, as a template
                # instance, or cast / address-of, the way kernels are passed.
                if not helper_arguments:
                    continue
                holder = node.parent
                direct = holder is not None and holder.type == "argument_list"
                if holder is not None and not direct:
                    holder = holder.parent
                if holder is None or holder.start_byte not in helper_arguments:
                    continue
                if (
                    direct
                    and node.type != "template_function"
                    and node.prev_named_sibling is not None
                ):
                    continue
                if any(
                    functions[index].start <= at < start
                    for at, _ in self.variables.get(written.encode(), ())
                ):
                    continue  # a local variable or parameter, not a kernel
            function = functions[index]
            attrs: dict[str, object] = {
                "scope": function.ref_scope,
                "want": _KERNEL_ONLY,
                "via": "argument",
            }
            if function.usings:
                attrs["using"] = function.usings
            self.facts.add_ref(
                function.local, _LAUNCHES, _CPP, written, node.start_point[0] + 1, **attrs
            )


def _outermost(errors: list[Node]) -> int:
    count = 0
    last_end = -1
    for node in errors:
        if node.start_byte >= last_end:
            count += 1
            last_end = node.end_byte
    return count
