"""TORCH_LIBRARY-style registrations -> ``op`` and ``registration`` nodes.

Forms read (any module variable name; namespaces through the manifest's aliases):

- ``TORCH_LIBRARY(ns, m)`` / ``TORCH_LIBRARY_FRAGMENT`` / ``STABLE_TORCH_LIBRARY[_FRAGMENT]``
  and project wrappers with two arguments: ``m.def(schema)`` defines the op ``ns::name``;
  ``m.def(name, fn)`` also registers ``fn`` as its catch-all (CompositeImplicitAutograd)
  kernel;
- ``TORCH_LIBRARY_IMPL(ns, Key, m)`` / ``STABLE_TORCH_LIBRARY_IMPL`` and three-argument
  wrappers: ``m.impl(name, fn)``, ``m.impl(name, Key, fn)`` (vLLM's ``torch::kCUDA``),
  with ``fn`` written ``&fn``, ``fn``, ``TORCH_FN(fn)``, ``TORCH_BOX(&fn)``,
  ``torch::dispatch(Key, fn)`` or a lambda (-> the functions it calls);
- ``torch::RegisterOperators().op("ns::name", &fn)`` chains;
- uses of the manifest's ``impl_macros`` inside an IMPL block (Autocast's ``KERNEL_CPU(op,
  policy)``: indexer/bindings/impl_macros.py), each a registration for the block's key;
- x-macro lists applied to a registering macro inside a block
  (``AT_FORALL_FP32(_KERNEL_CUDA_FP32)``), and the file's registering macros: expanded
  (indexer/bindings/xmacro_impls.py), each entry a registration with its file:line.
  Uses in a block that may register something but cannot be read are kept on the file
  node (``unread_registrations``), for trace and the health to say.

A kernel registered in the file that defines its op is a ``dispatches`` ref of the op; one
registered elsewhere hangs off a ``registration`` node (one per op and key per file: the
line of each key's registration is its own), which the op
finds through its ``op_impl`` ref. Registrations the preprocessor drops (``#if 0``) and
commented-out code are not registrations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import tree_sitter

from indexer.bindings.cpp_site import (
    DeadCode,
    UsingIndex,
    arguments_of,
    callables,
    end_line,
    in_comment_or_string,
    line,
    plain_name,
    string_value,
    text,
    walk,
)
from indexer.bindings.impl_macros import MacroImpl, Unread, macro_impls
from indexer.bindings.python_names import ops_names, packages_with_torch
from indexer.bindings.schema import Schema, parse_schema, split_op_name
from indexer.bindings.xmacro_impls import FileMacros, ListedImpl, listed_impls
from indexer.cpp.shared_macros import SharedMacros
from indexer.graph.facts import FILE_NODE, FileFacts
from indexer.graph.vocabulary import EdgeKind, NodeKind

CATCH_ALL_KEY = "CompositeImplicitAutograd"
_DEVICE_KEY = re.compile(r"^k([A-Z][A-Za-z0-9]*)$")


@dataclass(frozen=True, slots=True)
class Block:
    macro: str
    namespace: str
    key: str | None  # the dispatch key of an IMPL block
    var: str  # the module variable: 'm', 'ops', 'lib'
    node: tree_sitter.Node  # the function_definition the macro expands to
    body: tree_sitter.Node


def dispatch_key(node: tree_sitter.Node | None) -> str | None:
    """``torch::kCUDA`` / ``c10::DispatchKey::CPU`` / ``c10::DeviceType::CUDA`` -> the key."""
    if node is None:
        return None
    if node.type == "call_expression":
        arguments = arguments_of(node)
        return dispatch_key(arguments[0]) if arguments else None
    if node.type not in ("identifier", "qualified_identifier", "field_expression"):
        return None
    written = plain_name(node).replace(".", "::")
    last = written.split("::")[-1]
    if "DispatchKey::" in written or "DeviceType::" in written:
        return last
    match = _DEVICE_KEY.match(last)
    return match.group(1) if match else None


_DEFINE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+(\w+)\s*\([^)]*\)\s*(?:\\\n\s*)*(\w+)\s*\(", re.M)


def local_wrappers(data: bytes, macros: list[str]) -> list[str]:
    """Macros this file defines as a registration macro: ``#define W(N, M) TORCH_LIBRARY(N, M)``."""
    known = set(macros)
    return [
        match.group(1).decode()
        for match in _DEFINE.finditer(data)
        if match.group(2).decode() in known and match.group(1).decode() not in known
    ]


def find_macro_blocks(
    data: bytes,
    root: tree_sitter.Node,
    macros: list[str],
    aliases: dict[str, str],
    dead: DeadCode | None = None,
) -> list[Block]:
    """Every live ``MACRO(ns, [Key,] m) { ... }`` of the given macro names."""
    if not macros:
        return []
    pattern = re.compile(rb"\b(" + b"|".join(re.escape(m.encode()) for m in macros) + rb")\s*\(")
    dead = dead or DeadCode(data)
    blocks = []
    for match in pattern.finditer(data):
        node = root.descendant_for_byte_range(match.start(1), match.end(1))
        if node is None or node.type != "identifier" or in_comment_or_string(node):
            continue
        declarator = node.parent
        definition = declarator.parent if declarator is not None else None
        if (
            declarator is None
            or declarator.type != "function_declarator"
            or definition is None
            or definition.type != "function_definition"
        ):
            continue
        body = definition.child_by_field_name("body")
        parameters = declarator.child_by_field_name("parameters")
        if body is None or parameters is None or dead.covers(definition):
            continue
        params = [plain_name(p) for p in parameters.named_children if p.type != "comment"]
        if len(params) not in (2, 3):
            continue
        namespace = aliases.get(params[0], params[0])
        key = params[1] if len(params) == 3 else None
        blocks.append(Block(match.group(1).decode(), namespace, key, params[-1], definition, body))
    return blocks


def method_site(call: tree_sitter.Node) -> tree_sitter.Node:
    """The ``def`` of ``m.def(...)``: where a chained or multi-line call is written."""
    function = call.child_by_field_name("function")
    field = function.child_by_field_name("field") if function is not None else None
    return field if field is not None else call


def module_calls(block: Block, dead: DeadCode) -> list[tuple[str, tree_sitter.Node]]:
    """``(method, call)`` for each live ``m.def`` / ``m.impl`` on the block's variable."""
    calls = []
    for node in walk(block.body):
        if node.type != "call_expression":
            continue
        function = node.child_by_field_name("function")
        if function is None or function.type != "field_expression":
            continue
        receiver = function.child_by_field_name("argument")
        method = text(function.child_by_field_name("field"))
        if method not in ("def", "impl") or not _on_variable(function, receiver, block.var):
            continue
        if not dead.covers(node):
            calls.append((method, node))
    return calls


def _on_variable(function: tree_sitter.Node, receiver: tree_sitter.Node | None, var: str) -> bool:
    """Whether ``m.impl`` is called on the block's variable, also where a macro use with no
    semicolon before it (``AT_FORALL_PROMOTE(K)`` then ``m.impl(...)``) made tree-sitter
    read ``AT_FORALL_PROMOTE(K) m`` as the receiver, ``m`` an ERROR child."""
    if text(receiver) == var:
        return True
    return any(child.type == "ERROR" and text(child) == var for child in function.children)


class LibraryReader:
    """Reads one file's TORCH_LIBRARY blocks and RegisterOperators chains."""

    def __init__(
        self,
        facts: FileFacts,
        data: bytes,
        root: tree_sitter.Node,
        macros: list[str],
        aliases: dict[str, str],
        packages: list[str],
        impl_macros: list[str] | None = None,
        shared: SharedMacros | None = None,
    ) -> None:
        self.facts = facts
        self.impl_macros = impl_macros or []
        self.shared = shared  # the tree's x-macro lists and registration writers
        self._file_macros: FileMacros | None = None
        self.data = data
        self.root = root
        self.macros = macros
        self.aliases = aliases
        self.packages = packages_with_torch(packages)
        self.usings = UsingIndex(root)
        self.dead = DeadCode(data)
        self.ops: dict[str, int] = {}  # qualname -> op node defined in this file
        self.registrations: dict[tuple[str, str], int] = {}  # (qualname, key) -> registration

    def read(self) -> None:
        macros = self.macros + local_wrappers(self.data, self.macros)
        blocks = find_macro_blocks(self.data, self.root, macros, self.aliases, self.dead)
        pending_impls = []
        pending_macros: list[tuple[Block, MacroImpl | ListedImpl]] = []
        for block in blocks:
            if block.namespace == "_":  # fallback-only blocks name no op
                continue
            for method, call in module_calls(block, self.dead):
                if method == "def":
                    self._define(block, call)
                else:
                    pending_impls.append((block, call))
            if block.key is not None:
                found, unread = macro_impls(
                    self.data, self.root, block.body, self.impl_macros, self.dead
                )
                pending_macros.extend((block, impl) for impl in found)
                self._unread(block, unread)
            if b"(" in self.data[block.body.start_byte : block.body.end_byte]:
                listed, unread = listed_impls(
                    self.data, self.root, block.body, block.var, self.file_macros, self.dead
                )
                pending_macros.extend((block, impl) for impl in listed)
                self._unread(block, unread)
        for chain_call in self._register_operators_calls():
            self._legacy_op(chain_call)
        # Impls after every def of the file, so an impl above its def still finds it.
        for block, call in pending_impls:
            self._implement(block, call)
        for block, impl in pending_macros:
            self._implement_macro(block, impl)
        for qualname, node in self.ops.items():
            self.facts.add_ref(
                node, EdgeKind.DISPATCHES.value, "op_impl", qualname, self.facts.nodes[node].line
            )

    # --- ops ---------------------------------------------------------------------------

    def _namespace(self, written: str | None, default: str) -> str:
        return self.aliases.get(written, written) if written else default

    def _op_node(self, schema: Schema, namespace: str, site: tree_sitter.Node, **attrs: Any) -> int:
        qualname = f"{namespace}::{schema.full_name}"
        existing = self.ops.get(qualname)
        if existing is not None:
            self.facts.nodes[existing].attrs.setdefault("also_defined_at", []).append(line(site))
            return existing
        node = self.facts.add_node(
            NodeKind.OP.value,
            schema.name,
            qualname,
            line(site),
            end_line(site),
            namespace=namespace,
            overload=schema.overload,
            schema=schema_text(schema, namespace) if schema.has_signature else None,
            arguments=[arg.as_dict() for arg in schema.arguments],
            returns=schema.returns,
            python_names=ops_names(self.packages, namespace, schema.name, schema.overload),
            **attrs,
        )
        self.ops[qualname] = node
        return node

    def _define(self, block: Block, call: tree_sitter.Node) -> None:
        arguments = arguments_of(call)
        schema = parse_schema(string_value(arguments[0]) or "") if arguments else None
        if schema is None:
            return
        namespace = self._namespace(schema.namespace, block.namespace)
        node = self._op_node(
            schema, namespace, method_site(call), source=block.macro, block_line=line(block.node)
        )
        for argument in arguments[1:]:
            key = dispatch_key(argument) if argument.type == "call_expression" else None
            self._kernel_refs(node, argument, key or CATCH_ALL_KEY, catch_all=key is None)

    def _implement(self, block: Block, call: tree_sitter.Node) -> None:
        arguments = arguments_of(call)
        written = string_value(arguments[0]) if arguments else None
        if not written or len(arguments) < 2:
            return
        namespace, name, overload = split_op_name(written)
        namespace = self._namespace(namespace, block.namespace)
        qualname = f"{namespace}::{name}.{overload}" if overload else f"{namespace}::{name}"
        key = block.key or CATCH_ALL_KEY
        if len(arguments) >= 3:
            key = dispatch_key(arguments[1]) or key
        kernel = arguments[-1]
        if kernel.type == "call_expression" and plain_name(
            kernel.child_by_field_name("function") or kernel
        ).endswith("dispatch"):
            key = dispatch_key(kernel) or key
        source = self.ops.get(qualname)
        if source is None:
            site = method_site(call)
            source = self._registration(qualname, name, overload, namespace, block, key, site, call)
        self._add_key(source, key)
        self._kernel_refs(source, kernel, key)

    @property
    def file_macros(self) -> FileMacros:
        if self._file_macros is None:
            text = self.data.decode("latin-1")
            self._file_macros = FileMacros(text, self.facts.path, self.impl_macros, self.shared)
        return self._file_macros

    def _unread(self, block: Block, unread: list[Unread]) -> None:
        """Uses that may register something the index could not read, kept on the file."""
        kept = self.facts.nodes[FILE_NODE].attrs.setdefault("unread_registrations", [])
        for use in unread:
            kept.append(
                {
                    "line": use.line,
                    "use": use.text,
                    "why": use.why,
                    "key": block.key or CATCH_ALL_KEY,
                    "namespace": block.namespace,
                    "block_line": line(block.node),
                }
            )
        if not kept:
            del self.facts.nodes[FILE_NODE].attrs["unread_registrations"]

    def _implement_macro(self, block: Block, impl: MacroImpl | ListedImpl) -> None:
        """A registration macro's use: the op for the block's key at the use's line; the
        kernel is the macro's template instance, no function of the tree, unless an
        expanded ``m.impl`` names one. Through a list, the entry's file:line is kept."""
        namespace = block.namespace
        listed = isinstance(impl, ListedImpl)
        if listed and impl.namespace:
            namespace = self._namespace(impl.namespace, block.namespace)
        qualname = f"{namespace}::{impl.name}" + (f".{impl.overload}" if impl.overload else "")
        key = (impl.key if listed else None) or block.key or CATCH_ALL_KEY
        source = self.ops.get(qualname)
        if source is None:
            source = self._registration(
                qualname, impl.name, impl.overload, namespace, block, key, impl.site, impl.site
            )
        self._add_key(source, key)
        if not listed:
            if source not in self.ops.values():
                self.facts.nodes[source].attrs.setdefault("via", text(impl.site))
            return
        attrs = self.facts.nodes[source].attrs
        if source in self.ops.values():  # an op of this file: its registrations, by key
            attrs.setdefault("listed_registrations", []).append(
                {"key": key, "via": impl.via, "listed_at": impl.listed_at, "line": line(impl.site)}
            )
        else:
            attrs.setdefault("via", impl.via)
            if impl.listed_at:
                attrs.setdefault("listed_at", impl.listed_at)
        if impl.kernel:
            context = self.usings.context(impl.site).ref_attrs()
            self.facts.add_ref(
                source,
                EdgeKind.DISPATCHES.value,
                "cpp",
                impl.kernel,
                line(impl.site),
                key=key,
                keys=[key],
                via="macro",
                **({"listed_at": impl.listed_at} if impl.listed_at else {}),
                **context,
            )

    def _add_key(self, source: int, key: str) -> None:
        keys = self.facts.nodes[source].attrs.setdefault("impl_keys", [])
        if key not in keys:
            keys.append(key)

    def _registration(
        self,
        qualname: str,
        name: str,
        overload: str,
        namespace: str,
        block: Block,
        key: str,
        site: tree_sitter.Node,
        call: tree_sitter.Node,
    ) -> int:
        node = self.registrations.get((qualname, key))
        if node is None:
            node = self.facts.add_node(
                NodeKind.REGISTRATION.value,
                name,
                qualname,
                line(site),
                end_line(call),
                namespace=namespace,
                overload=overload,
                source=block.macro,
                block_line=line(block.node),
            )
            self.registrations[(qualname, key)] = node
        return node

    def _kernel_refs(self, node: int, argument: tree_sitter.Node, key: str, **extra: Any) -> None:
        context = self.usings.context(argument).ref_attrs()
        for callee in callables(argument):
            self.facts.add_ref(
                node,
                EdgeKind.DISPATCHES.value,
                "cpp",
                callee.name,
                callee.line,
                key=key,
                keys=[key],
                via=callee.via,
                **context,
                **extra,
            )

    # --- torch::RegisterOperators() chains ---------------------------------------------

    def _register_operators_calls(self) -> list[tree_sitter.Node]:
        calls: dict[tuple[int, int], tree_sitter.Node] = {}
        for match in re.finditer(rb"\bRegisterOperators\b", self.data):
            node = self.root.descendant_for_byte_range(match.start(), match.end())
            if node is None or in_comment_or_string(node) or self.dead.covers(node):
                continue
            current = node
            while current.parent is not None and current.parent.type in (
                "qualified_identifier",
                "call_expression",
                "field_expression",
            ):
                current = current.parent
                if current.type == "call_expression":
                    function = current.child_by_field_name("function")
                    if (
                        function is not None
                        and function.type == "field_expression"
                        and text(function.child_by_field_name("field")) == "op"
                    ):
                        calls[(current.start_byte, current.end_byte)] = current
        return sorted(calls.values(), key=lambda call: call.start_byte)

    def _legacy_op(self, call: tree_sitter.Node) -> None:
        arguments = arguments_of(call)
        if not arguments:
            return
        schema_text_value = string_value(arguments[0])
        kernels = arguments[1:]
        if schema_text_value is None:  # RegisterOperators::options().schema("...").kernel(...)
            for node in walk(arguments[0]):
                if node.type == "call_expression" and plain_name(
                    node.child_by_field_name("function") or node
                ).endswith("schema"):
                    inner = arguments_of(node)
                    schema_text_value = string_value(inner[0]) if inner else None
            kernels = [arguments[0]]
        schema = parse_schema(schema_text_value or "")
        if schema is None or not schema.namespace:
            return
        namespace = self._namespace(schema.namespace, schema.namespace)
        node = self._op_node(schema, namespace, method_site(call), source="RegisterOperators")
        for kernel in kernels:
            self._kernel_refs(node, kernel, CATCH_ALL_KEY, catch_all=True)


def schema_text(schema: Schema, namespace: str) -> str:
    arguments = []
    for arg in schema.arguments:
        piece = f"{arg.type} {arg.name}".strip()
        if arg.default is not None:
            piece += f"={arg.default}"
        arguments.append(piece)
    if any(arg.kwarg_only for arg in schema.arguments):
        first = next(i for i, arg in enumerate(schema.arguments) if arg.kwarg_only)
        arguments.insert(first, "*")
    returns = f" -> {schema.returns}" if schema.returns else ""
    return f"{namespace}::{schema.full_name}({', '.join(arguments)}){returns}"
