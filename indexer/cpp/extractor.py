"""C++ and CUDA files -> function, kernel, class and dispatch-stub nodes; call, launch,
include and dispatch refs.

One tree-sitter query collects every node of interest (namespaces, classes, function
definitions, callees, includes, macro definitions, ERROR regions) in C; Python then
handles only those nodes, never the whole tree. The parse is of ``SourceFile.cpp_prepared``
(CUDA qualifiers, attribute macros and launch configurations blanked, positions kept).
Uses of the file's own function-defining macros, and namespace- or class-scope uses of
the tree's shared header macros, are expanded (indexer/cpp/expand.py,
indexer/cpp/shared_macros.py) and extracted from a second, synthetic buffer whose lines
map back to the uses.
"""

from __future__ import annotations

import gc
import itertools
import re
import threading
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING

from tree_sitter import Query, QueryCursor

from indexer.cpp import macros
from indexer.cpp.calls import Caller, CallSites
from indexer.cpp.expand import FUNCTION_LIKE_DEFINE, Expander, Macro, definitions
from indexer.cpp.functions import describe, macro_names
from indexer.cpp.includes import add_include_ref, include_roots
from indexer.cpp.names import ANONYMOUS, owner_arguments, split_qualified, strip_templates
from indexer.cpp.operators import QUERY as _OPERATOR_QUERY
from indexer.cpp.operators import OperatorUses
from indexer.cpp.scopes import CLASS, FUNCTION, NAMESPACE, Region, nest
from indexer.extract.source import SourceFile, cpp_parser
from indexer.graph.facts import FILE_NODE, FileFacts, RefFact
from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.harness import Manifest

if TYPE_CHECKING:
    from tree_sitter import Node

_QUERY = """
(namespace_definition) @ns
(class_specifier body: (_)) @cls
(struct_specifier body: (_)) @cls
(function_definition) @fn
(call_expression) @call
(using_declaration "namespace" (_) @using)
(namespace_alias_definition) @alias
(preproc_include path: (_) @include)
(ERROR) @error
(declaration
  type: [(type_identifier) (qualified_identifier) (template_type)] @vtype
  declarator: [(identifier) @var (init_declarator declarator: (identifier) @var)])
(parameter_declaration
  type: [(type_identifier) (qualified_identifier) (template_type)] @vtype
  declarator: [(identifier) @var
               (reference_declarator (identifier) @var)
               (pointer_declarator declarator: (identifier) @var)])
"""
# In CUDA code a kernel can be launched by passing it to a helper.
_KERNEL_ARGUMENTS = """
(argument_list [(identifier) (template_function) (qualified_identifier)] @karg)
(argument_list (pointer_expression argument: [(identifier) (template_function) (qualified_identifier)] @karg))
(argument_list (cast_expression value: [(identifier) (template_function) (qualified_identifier)] @karg))
(argument_list (parenthesized_expression [(identifier) (template_function) (qualified_identifier)] @karg))
"""

_queries: dict[bool, Query] = {}
_queries_lock = threading.Lock()
_STATIC = re.compile(rb"\bstatic\b")
_DISPATCH = b"DISPATCH"
_NEWLINE = re.compile(rb"\n")
_STAND_IN = "__torchtalk_macro_use_"
# Captures whose order makes refs or counts (nest() and add_variables() sort their own).
_ORDERED_CAPTURES = ("error", "using", "alias", "include", "call", "karg")
_DEFINE = b"define"
# Access specifiers in a macro written for class scope, expanded inside namespaces.
_ACCESS = re.compile(r"\b(?:public|private|protected)\s*:(?!:)")


def _query(cuda: bool) -> Query:
    """The compiled query (with the kernel-argument patterns for CUDA code), once per process."""
    query = _queries.get(cuda)
    if query is None:
        with _queries_lock:
            query = _queries.get(cuda)
            if query is None:
                text = _QUERY + _OPERATOR_QUERY + (_KERNEL_ARGUMENTS if cuda else "")
                query = Query(cpp_parser().language, text)
                _queries[cuda] = query
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
        if not src.data.isascii():
            src.text  # noqa: B018 - decoding records a non-UTF-8 file on src.decode_error
        # A file makes hundreds of thousands of small acyclic objects (refs, attrs, nodes):
        # cyclic collections during it find nothing and cost ~7% of the extraction.
        collecting = gc.isenabled()
        gc.disable()
        try:
            _Extraction(self, src, facts).run()
        finally:
            if collecting:
                gc.enable()


class _Extraction:
    """One parsed buffer: the file itself, or the expansions of its macros (``line_map``
    then gives the line of the use that each synthetic line expands)."""

    def __init__(
        self,
        extractor: CppExtractor,
        src: SourceFile,
        facts: FileFacts,
        line_map: list[int] | None = None,
        parent: _Extraction | None = None,
        hosts: dict[str, Caller] | None = None,
    ) -> None:
        self.extractor = extractor
        self.src = src
        self.facts = facts
        self.prepared = src.cpp_prepared
        self.data = self.prepared.data
        self.line_map = line_map
        self.newlines = [match.start() for match in _NEWLINE.finditer(self.data)]
        prepared = self.prepared
        self.cuda_marks = bool(prepared.global_at or prepared.device_at or prepared.host_device_at)
        self.callers: list[Caller] = []
        # Stand-in function name -> the function whose body used the macro it expands.
        self.hosts = hosts or {}
        self.kernel_names: set[str] = parent.kernel_names if parent else set()
        # Dispatch stubs the file declares or defines: passed as a value
        # (``unary_op_impl_float_out(result, self, logit_stub)``), a stub is called there.
        self.stub_names: set[str] = parent.stub_names if parent else set()
        self.usings: list[tuple[int, int, str]] = []  # (start, end of its scope, namespace)
        self.aliases: dict[str, str] = {}
        # Shared with the file's own extraction when expanding its macros.
        # (qualname, signature, specialization) -> node: a definition seen again (in another
        # #if branch) is the same function.
        self.defined: dict[tuple[str, str, str | None], int] = parent.defined if parent else {}
        self.classes: dict[str, int] = parent.classes if parent else {}

    def text(self, node: Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    def line(self, row: int) -> int:
        return self.line_map[row] if self.line_map is not None else row + 1

    def run(self) -> None:
        prepared = self.prepared
        cuda = self.src.language == "cuda" or bool(prepared.global_at or prepared.launch_at)
        stubs = self.extractor.stub_pattern is not None and _DISPATCH in self.data
        # In source order, outermost first: the order captures come in varies between runs,
        # and the index must not (update equals rebuild, snapshots compare).
        arguments = cuda or stubs or bool(self.stub_names)
        captures = QueryCursor(_query(arguments)).captures(self.src.cpp_tree.root_node)
        for name in _ORDERED_CAPTURES:  # the others are sorted where they are used
            if name in captures:
                captures[name] = sorted(captures[name], key=_source_order)
        expansion = self.line_map is not None
        if not expansion:
            errors = _outermost(captures.get("error", ()))
            self.facts.parse_errors = max(self.facts.parse_errors, errors)
            for node in captures.get("include", ()):
                add_include_ref(
                    self.facts, self.text(node), node.start_point[0] + 1, self.extractor.roots
                )
        regions = nest(
            self.data, captures.get("ns", []), captures.get("cls", []), captures.get("fn", [])
        )
        self._collect_usings(captures, regions)
        for region in regions:
            if region.kind == CLASS and not region.in_function:
                self._add_class(region)
            elif region.kind == FUNCTION:
                self._add_function(region)
        for caller in self.callers:
            caller.set_usings(self._usings_between(caller.start, caller.end))
        outer = [r for r in regions if r.kind != FUNCTION and not r.in_function]
        if stubs:
            self.stub_names |= macros.add_dispatch_stubs(
                self.facts,
                self.data,
                self.extractor.stub_pattern,
                lambda offset: _scope_at(outer, offset, namespaces_only=True),
                lambda offset: self._usings_between(offset, offset + 1),
                lambda use: self.line(use.line - 1),
            )
        sites = CallSites(
            self.data,
            self.facts,
            self.callers,
            self.aliases,
            prepared.launch_at,
            self.line_map,
            self.newlines,
        )
        sites.add_variables(captures.get("var", []), captures.get("vtype", []))
        sites.add_calls(captures.get("call", []), cuda and "karg" in captures)
        OperatorUses(sites).add(captures)
        if "karg" in captures:
            kernels = self.kernel_names if cuda else set()
            sites.add_kernel_arguments(captures["karg"], kernels, self.stub_names)
        if not expansion:
            self._expand_macros(outer)

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
            if name is not None and value is not None and value != name:
                self.aliases[self.text(name)] = "::".join(split_qualified(self.text(value)))

    def _usings_between(self, start: int, end: int) -> list[str]:
        """The using-directives in effect anywhere in [start, end)."""
        return [name for at, until, name in self.usings if at < end and until > start]

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
        line = self.line(region.node.start_point[0])
        end_line = line if self.line_map is not None else region.node.end_point[0] + 1
        attrs = {"bases": bases} if bases else {}
        parent = owner.local if owner is not None and owner.local else FILE_NODE
        region.local = self.classes[qualname] = self.facts.add_node(
            NodeKind.CPP_CLASS.value, region.names[-1], qualname, line, end_line, parent, **attrs
        )
        self.facts.add_local_edge(parent, region.local, EdgeKind.CONTAINS.value, line)

    def _enclosing(self, region: Region) -> tuple[list[str], Caller | None]:
        """The scope a definition sits in: for a method of a class local to a function, the
        function's qualified name and the classes in between."""
        if not region.in_function:
            return region.scope, None
        classes: list[str] = []
        outer = region.parent
        while outer is not None and outer.kind == CLASS:
            classes = outer.names + classes
            outer = outer.parent
        if region.in_function and outer is not None and outer.kind == FUNCTION and outer.qual:
            return outer.qual + classes, outer.caller
        return region.scope, None

    def _add_function(self, region: Region) -> None:
        if region.parent is not None and region.parent.kind == FUNCTION:
            # C++ has no nested functions: this is a loop macro read as one
            # (CUDA_KERNEL_LOOP(i, n) { ... }); its body belongs to the function around it.
            return
        node = region.node
        shape = describe(node, self.data)
        if shape is None:
            return
        if self.hosts and not region.in_function and shape.components:
            host = self.hosts.get(shape.components[-1])
            if host is not None:
                caller = Caller(region.start, region.end, host.local, [], host.this_class, None)
                caller.plain = host.plain  # its scope and usings, shared, never mutated
                region.caller = caller
                self.callers.append(caller)
                return
        scope, outer_caller = self._enclosing(region)
        if region.in_function and outer_caller is None:
            return  # nested in a function we could not name: its calls stay with that one
        if (shape.macro is not None or region.in_function) and self._in_define(node.start_byte):
            return  # a #define in a body read as code: its uses are expanded instead
        attrs: dict[str, object] = {}
        if shape.macro is not None:
            name, components, scope_tail, attrs = macro_names(
                shape, self.extractor.registration_macros
            )
            qual = components if attrs.get("registration") else scope + components
            ref_scope = scope + scope_tail
        else:
            components = shape.components
            name = components[-1]
            qual = scope + components
            ref_scope = scope + components[:-1]
        region.qual = qual
        qualname = "::".join(qual)
        kind = NodeKind.CPP_FUNCTION.value
        prepared = self.prepared
        if self.cuda_marks:
            if self._marked(prepared.global_at, shape.name_start):
                kind = NodeKind.CUDA_KERNEL.value
                self.kernel_names.add(name)
            elif self._marked(prepared.device_at, shape.name_start):
                attrs["device"] = True
                if self._marked(prepared.host_at, shape.name_start):
                    attrs["host"] = True
            elif self._marked(prepared.host_device_at, shape.name_start):
                attrs["device"] = attrs["host"] = True
        member = region.owner is not None or len(ref_scope) > len(scope)
        if (
            not member
            and shape.macro is None
            and _STATIC.search(self.data, node.start_byte, shape.declarator_start)
        ):
            attrs["static"] = True  # internal linkage: visible from its own file only
        if self._after_template_parameters(node.start_byte):
            attrs["template"] = True
        if region.owner is not None and region.owner.local:
            parent = region.owner.local
        elif member:
            parent = self.classes.get("::".join(ref_scope), FILE_NODE)
        else:
            parent = FILE_NODE
        row = bisect_right(self.newlines, region.start)
        line = self.line(row)
        end_line = (
            line if self.line_map is not None else bisect_right(self.newlines, region.end - 1) + 1
        )
        this_class = "::".join(ref_scope) if member and ref_scope else None
        # The class's template arguments as written: its own head (struct Vectorized<float>)
        # or the qualifier of an out-of-line member (Vectorized<float>::loadu).
        specialization = owner_arguments(shape.specialization) if shape.specialization else None
        owner = region.owner
        while owner is not None and specialization is None:
            specialization = owner.specialization
            owner = owner.owner
        if specialization:
            attrs["specialization"] = specialization
        identity = (qualname, shape.signature, shape.specialization or specialization)
        local = self.defined.get(identity)
        if local is not None:
            # The same definition again in another #if branch: one function, several bodies.
            self.facts.nodes[local].attrs.setdefault("alt_lines", []).append([line, end_line])
        else:
            local = self.facts.add_node(
                kind,
                name,
                qualname,
                line,
                end_line,
                parent,
                signature=shape.signature,
                arity=list(shape.arity),
                **attrs,
            )
            self.defined[identity] = local
            self.facts.add_local_edge(parent, local, EdgeKind.CONTAINS.value, line)
        region.caller = Caller(region.start, region.end, local, ref_scope, this_class, outer_caller)
        self.callers.append(region.caller)

    def _in_define(self, start: int) -> bool:
        """Whether ``start`` lies on a #define line or a line continuing one."""
        data = self.data
        line_start = data.rfind(b"\n", 0, start) + 1
        if data[line_start:start].lstrip().startswith(b"#"):
            return True
        previous = data[max(0, line_start - 3) : line_start].rstrip()
        return previous.endswith(b"\\")

    def _after_template_parameters(self, start: int) -> bool:
        """Whether a definition follows ``template <...>`` (cheaper than asking the tree)."""
        data = self.data
        while start > 0 and data[start - 1] in b" \t\r\n":
            start -= 1
        if start == 0 or data[start - 1] != 62:  # '>'
            return False
        line = data[data.rfind(b"\n", 0, start) + 1 : start].lstrip()
        return not line.startswith((b"#", b"//"))  # not `#include <x.h>` or a comment

    def _marked(self, offsets: list[int], name_start: int) -> bool:
        """Whether a blanked qualifier (``__global__``...) belongs to the declaration whose
        name starts at ``name_start``: nothing that ends a declaration lies between."""
        if not offsets:
            return False
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

    # -- macro expansion -------------------------------------------------------------

    def _expand_macros(self, outer: list[Region]) -> None:
        # Macro text comes from the original bytes (same offsets as the prepared ones, where
        # `<<<...>>>` and `__global__` are blanked): the synthetic buffer is prepared again.
        # Definitions are found in the text: a #define inside a function body does not
        # always parse as one.
        original = self.src.data
        own = _DEFINE in original and FUNCTION_LIKE_DEFINE.search(original) is not None
        shared = self.prepared.shared_macros_used
        if not own and not shared:
            return
        text = original.decode("latin-1")  # one character per byte: offsets stay byte offsets
        blanked = frozenset(
            text[offset : offset + 200].split("(", 1)[0].strip()
            for offset in self.prepared.macro_use_at
        )
        found = definitions(text, blanked) if own else []
        defined_here = {macro.name for macro in found}
        if shared:
            by_name = self.src.context.cpp_macros.by_name  # type: ignore[union-attr]
            found += [by_name[name] for name in shared if name not in defined_here]
        if not found:
            return
        expander = Expander(found)
        prepared = self.data
        callers = sorted(self.callers, key=lambda caller: caller.start)
        body_starts = [caller.start for caller in callers]
        reach = list(itertools.accumulate((caller.end for caller in callers), max))

        def host_at(offset: int) -> Caller | None:
            """The innermost named function whose body holds ``offset``."""
            index = bisect_right(body_starts, offset) - 1
            caller: Caller | None = callers[index] if index >= 0 else None
            while caller is not None and offset >= caller.end:
                caller = caller.outer
            return caller

        typed_uses = set(self.prepared.macro_use_at)

        def wanted(offset: int, macro: Macro, called: bool) -> bool:
            end = offset + len(macro.name)
            if prepared[offset:end] != original[offset:end] and offset not in typed_uses:
                return False  # in a branch kept out of the parse
            blanked = offset in typed_uses  # the parser saw none of it: read its expansion
            if macro.shared and not blanked:
                return False  # a header's macro: expanded where it was blanked, only there
            index = bisect_right(body_starts, offset) - 1
            if index < 0 or offset >= reach[index]:
                return called and (macro.defines or blanked)  # namespace scope
            return (macro.calls or blanked) and host_at(offset) is not None  # a body

        lines: list[str] = []
        line_map: list[int] = []
        hosts: dict[str, Caller] = {}
        for start, _, expansion in expander.uses(text, wanted):
            flat = " ".join(expansion.split("\n"))
            host = host_at(start)
            if host is None:
                flat = _ACCESS.sub(" ", flat)
                scope = _scope_at(outer, start, namespaces_only=False)
                opening = "".join(
                    "namespace { " if part == ANONYMOUS else f"namespace {part} {{ "
                    for part in scope
                )
                lines.append(opening + flat + " }" * len(scope))
            else:
                # A body of its own whose calls the host function owns.
                stand_in = f"{_STAND_IN}{len(hosts)}"
                hosts[stand_in] = host
                lines.append(f"void {stand_in}() {{ {flat} ; }}")
            line_map.append(bisect_right(self.newlines, start) + 1)
        if not lines:
            return
        synthetic = SourceFile(self.src.path, "\n".join(lines).encode("latin-1"), self.src.language)
        refs = self.facts.refs
        before = len(refs)
        _Extraction(self.extractor, synthetic, self.facts, line_map, self, hosts).run()
        if hosts:
            _drop_repeated_calls(refs, before, {host.local for host in hosts.values()})


def _scope_at(regions: list[Region], offset: int, namespaces_only: bool) -> list[str]:
    """The namespace (and class) components enclosing a byte offset."""
    scope: list[str] = []
    for region in regions:
        if region.start > offset:
            break
        if offset < region.end and (region.kind == NAMESPACE or not namespaces_only):
            scope = region.scope + region.names
    return scope


def _source_order(node: Node) -> tuple[int, int]:
    return node.start_byte, -node.end_byte


def _outermost(errors: list[Node]) -> int:
    """ERROR regions not inside another (``errors`` in source order, outermost first)."""
    count = 0
    last_end = -1
    for node in errors:
        if node.start_byte >= last_end:
            count += 1
            last_end = node.end_byte
    return count


def _drop_repeated_calls(refs: list[RefFact], before: int, hosts: set[int]) -> None:
    """A call written in a macro use's arguments (``CHECK(f(x))``) was already found in the
    host function: its expansion adds nothing at that line."""
    seen = {(ref.src, ref.kind, ref.target, ref.line) for ref in refs[:before] if ref.src in hosts}
    kept = []
    for ref in refs[before:]:
        key = (ref.src, ref.kind, ref.target, ref.line)
        if ref.src in hosts and key in seen:
            continue
        seen.add(key)
        kept.append(ref)
    del refs[before:]
    refs.extend(kept)
