"""pybind11 definitions and CPython method tables -> ``binding`` nodes.

A binding's qualname is its Python dotted name. The module a file binds into:

- ``PYBIND11_MODULE(name, m)`` -> ``<package>.<name>`` (namespace aliases applied:
  ``TORCH_EXTENSION_NAME`` -> ``_C``);
- a ``py::module`` obtained any other way (``py::handle(module).cast<py::module>()``,
  ``reinterpret_borrow``, a ``py::module& m`` parameter) -> ``<package>._C``, the
  extension module such init functions receive (``torch._C`` in torch/csrc);
  ``py::module::import("a.b")`` -> ``a.b``;
- ``m.def_submodule("_nn")`` -> ``<module>._nn``;
- ``PyMethodDef`` tables -> ``<package>._C.<name>`` (attr ``table`` names the array), or
  ``<tp_name>.<name>`` for a table a ``PyTypeObject`` of the file lists as its
  ``tp_methods`` (``torch._C.Generator.manual_seed``);
- ``PyGetSetDef`` tables a ``PyTypeObject`` of the file lists as its ``tp_getset`` ->
  ``<tp_name>.<name>``, bound to its getter and setter (``torch._C.TensorBase.is_cpu``); a
  table no type of the file lists is left out rather than given an invented owner;

where ``<package>`` is the file's top directory when it is one of the harness's Python
packages (``torch/csrc/...`` -> ``torch``, ``minitorch/csrc/...`` -> ``minitorch``), else
the harness's first package, else nothing. ``py::class_<T>(m, "Name")`` chains bind
``<module>.Name`` to ``T`` and ``<module>.Name.<attr>`` to each ``def``, ``def_static``,
``def_property*`` and ``def_read*`` target. A lambda binds to the functions it calls.
"""

from __future__ import annotations

import re
from typing import Any

import tree_sitter

from indexer.bindings.cpp_site import (
    DeadCode,
    UsingIndex,
    arguments_of,
    callables,
    in_comment_or_string,
    line,
    plain_name,
    string_value,
    text,
    walk,
)
from indexer.bindings.library import find_macro_blocks
from indexer.graph.facts import FileFacts
from indexer.graph.vocabulary import EdgeKind, NodeKind

_MODULE_TYPES = re.compile(r"^(?:py|pybind11)::module_?$")
_MODULE_CAST = re.compile(
    r"(?:cast|reinterpret_borrow|reinterpret_steal)\s*<\s*(?:py|pybind11)::module_?\s*>"
)
_IMPORT = re.compile(r"(?:py|pybind11)::module_?::import\s*\(")
_TYPE_OBJECT = re.compile(rb"\bPyTypeObject\s+\w+\s*=\s*\{")
_FIRST_STRING = re.compile(rb'"([\w.]+)"')
_CLASS_METHODS = {
    "def": "pybind_method",
    "def_static": "pybind_static",
    "def_property": "pybind_property",
    "def_property_readonly": "pybind_property",
    "def_property_static": "pybind_property",
    "def_property_readonly_static": "pybind_property",
    "def_readwrite": "pybind_field",
    "def_readonly": "pybind_field",
    "def_readwrite_static": "pybind_field",
    "def_readonly_static": "pybind_field",
}


def file_package(path: str, packages: list[str]) -> str | None:
    top = path.split("/", 1)[0]
    if top in packages:
        return top
    return packages[0] if packages else None


class PybindReader:
    """Reads one file's pybind11 definitions and PyMethodDef tables."""

    def __init__(
        self,
        facts: FileFacts,
        data: bytes,
        root: tree_sitter.Node,
        macros: list[str],
        aliases: dict[str, str],
        packages: list[str],
    ) -> None:
        self.facts = facts
        self.data = data
        self.root = root
        self.macros = macros
        self.aliases = aliases
        self.package = file_package(facts.path, packages)
        self.default_module = f"{self.package}._C" if self.package else "_C"
        self.usings = UsingIndex(root)
        self.dead = DeadCode(data)
        self.bindings: dict[str, int] = {}
        # Variables of each function body: (function start byte, name) -> module / class
        self.modules: dict[tuple[int, str], str] = {}
        self.classes: dict[tuple[int, str], tuple[str, str]] = {}

    def read(self) -> None:
        for block in find_macro_blocks(self.data, self.root, self.macros, self.aliases, self.dead):
            name = block.namespace
            module = f"{self.package}.{name}" if self.package else name
            self.modules[(block.node.start_byte, block.var)] = module
        if re.search(rb"\b(?:py|pybind11)::|\bPYBIND11_", self.data):
            self._read_pybind()
        if b"PyMethodDef" in self.data or b"PyGetSetDef" in self.data:
            self._read_method_tables()

    # --- pybind11 ------------------------------------------------------------------------

    def _function_of(self, node: tree_sitter.Node) -> int:
        current = node.parent
        while current is not None:
            if current.type == "function_definition":
                return current.start_byte
            current = current.parent
        return -1

    def _read_pybind(self) -> None:
        for node in walk(self.root):
            kind = node.type
            if kind == "parameter_declaration":
                self._module_parameter(node)
            elif kind == "init_declarator":
                self._declaration(node)
            elif (
                kind == "call_expression"
                and self._is_chain_top(node)
                and not self.dead.covers(node)
            ):
                self._chain(node)

    def _module_parameter(self, node: tree_sitter.Node) -> None:
        type_text = plain_name(node.child_by_field_name("type") or node)
        if not _MODULE_TYPES.match(type_text):
            return
        declarator = node.child_by_field_name("declarator")
        name = plain_name(declarator).lstrip("&*") if declarator is not None else ""
        function = node.parent.parent if node.parent is not None else None
        while function is not None and function.type != "function_definition":
            function = function.parent
        if name and function is not None:
            self.modules[(function.start_byte, name)] = self.default_module

    def _declaration(self, node: tree_sitter.Node) -> None:
        declaration = node.parent
        if declaration is None or declaration.type != "declaration":
            return
        name_node = node.child_by_field_name("declarator")
        name = text(name_node)
        if not name or not name.isidentifier():
            return
        function = self._function_of(node)
        type_text = plain_name(declaration.child_by_field_name("type") or declaration)
        value = node.child_by_field_name("value")
        if value is not None and value.type == "argument_list":
            # py::class_<T> var(m, "Name");
            if type_text.split("::")[-1] == "class_":
                cls = self._class_from(declaration.child_by_field_name("type"), value)
                if cls is not None:
                    self.classes[(function, name)] = cls
            return
        if value is None:
            return
        if value.type == "call_expression":
            result = self._chain(value)
            if isinstance(result, tuple):
                self.classes[(function, name)] = result
                return
            if isinstance(result, str):
                self.modules[(function, name)] = result
                return
        value_text = text(value)
        if _IMPORT.search(value_text) and value.type == "call_expression":
            imported = next((string_value(a) for a in arguments_of(value)), None)
            if imported:
                self.modules[(function, name)] = imported
                return
        if _MODULE_CAST.search(value_text) or _MODULE_TYPES.match(type_text):
            self.modules[(function, name)] = self.default_module

    def _is_chain_top(self, node: tree_sitter.Node) -> bool:
        parent = node.parent
        if parent is None:
            return False
        if parent.type == "field_expression":
            return False  # the receiver of a further call in the chain
        return parent.type in ("expression_statement", "return_statement")

    def _class_from(
        self, type_node: tree_sitter.Node | None, arguments: tree_sitter.Node
    ) -> tuple[str, str] | None:
        if type_node is None:
            return None
        args = [child for child in arguments.named_children if child.type != "comment"]
        if len(args) < 2:
            return None
        module = self._module_expr(args[0])
        python_name = string_value(args[1])
        if module is None or not python_name:
            return None
        cpp_class = self._class_type(type_node)
        qualname = f"{module}.{python_name}"
        self._binding(qualname, args[1], "pybind_class", cpp_class, want=["cpp_class"])
        return qualname, cpp_class

    @staticmethod
    def _class_type(type_node: tree_sitter.Node) -> str:
        for child in walk(type_node):
            if child.type == "template_argument_list":
                first = child.named_children[0] if child.named_children else None
                return plain_name(first) if first is not None else ""
        return ""

    def _module_expr(self, node: tree_sitter.Node) -> str | None:
        if node.type == "identifier":
            return self.modules.get((self._function_of(node), text(node)))
        if node.type == "call_expression":
            result = self._chain(node)
            return result if isinstance(result, str) else None
        return None

    def _chain(self, top: tree_sitter.Node) -> str | tuple[str, str] | None:
        """Apply a chain of member calls; returns what the chain evaluates to."""
        calls = []
        current = top
        while current.type == "call_expression":
            function = current.child_by_field_name("function")
            if function is None or function.type != "field_expression":
                break
            calls.append((text(function.child_by_field_name("field")), current))
            current = function.child_by_field_name("argument")
            if current is None:
                return None
        target: str | tuple[str, str] | None
        if current.type == "identifier":
            key = (self._function_of(current), text(current))
            target = self.modules.get(key) or self.classes.get(key)
        elif current.type == "call_expression":
            function = current.child_by_field_name("function")
            if function is not None and plain_name(function).split("::")[-1] == "class_":
                target = self._class_from(function, current.child_by_field_name("arguments"))
            else:
                return None
        else:
            return None
        for method, call in reversed(calls):
            if target is None:
                return None
            target = self._apply(target, method, call)
        return target

    def _apply(
        self, target: str | tuple[str, str], method: str, call: tree_sitter.Node
    ) -> str | tuple[str, str] | None:
        arguments = arguments_of(call)
        if isinstance(target, str):  # a module
            if method == "def_submodule":
                name = string_value(arguments[0]) if arguments else None
                return f"{target}.{name}" if name else None
            if method == "def" and arguments:
                name = string_value(arguments[0])
                if name:
                    self._binding(f"{target}.{name}", arguments[0], "pybind_def", None)
                    self._binds(f"{target}.{name}", arguments[1:2])
            return target
        form = _CLASS_METHODS.get(method)
        if form is None or not arguments:
            return target
        class_name, cpp_class = target
        name = string_value(arguments[0])
        if name is None:
            if method == "def" and "init" in text(arguments[0]):
                self._binding(f"{class_name}.__init__", arguments[0], "pybind_init", cpp_class)
            return target
        qualname = f"{class_name}.{name}"
        node = self._binding(qualname, arguments[0], form, cpp_class)
        if form == "pybind_field":  # a data member: no callable to link, only its name
            if len(arguments) > 1:
                self.facts.nodes[node].attrs["member"] = plain_name(arguments[1]).lstrip("&")
            return target
        targets = arguments[1:3] if form == "pybind_property" else arguments[1:2]
        self._binds(qualname, targets, receiver=cpp_class)
        return target

    # --- nodes and refs ------------------------------------------------------------------

    def _binding(
        self,
        qualname: str,
        site: tree_sitter.Node,
        form: str,
        cpp_class: str | None,
        want: list[str] | None = None,
        **attrs: Any,
    ) -> int:
        node = self.bindings.get(qualname)
        if node is None:
            module, _, name = qualname.rpartition(".")
            extra = {"cpp_class": cpp_class} if cpp_class else {}
            node = self.facts.add_node(
                NodeKind.BINDING.value,
                name,
                qualname,
                line(site),
                line(site),
                form=form,
                module=module,
                python_names=[qualname],
                **extra,
            )
            self.bindings[qualname] = node
            if want and cpp_class:
                context = self.usings.context(site).ref_attrs()
                self.facts.add_ref(
                    node, EdgeKind.BINDS.value, "cpp", cpp_class, line(site), want=want, **context
                )
        return node

    def _binds(
        self, qualname: str, arguments: list[tree_sitter.Node], receiver: str | None = None
    ) -> None:
        node = self.bindings[qualname]
        for argument in arguments:
            context = self.usings.context(argument).ref_attrs()
            for callee in callables(argument):
                extra = {"receiver": receiver} if receiver and "::" not in callee.name else {}
                self.facts.add_ref(
                    node,
                    EdgeKind.BINDS.value,
                    "cpp",
                    callee.name,
                    callee.line,
                    via=callee.via,
                    **context,
                    **extra,
                )

    # --- CPython method tables -----------------------------------------------------------

    def _type_names(self) -> dict[str, str]:
        """table name -> tp_name of the PyTypeObject whose initializer lists it as its
        tp_methods or tp_getset."""
        names: dict[str, str] = {}
        for match in _TYPE_OBJECT.finditer(self.data):
            end = self.data.find(b"};", match.end())
            block = self.data[match.end() : end if end >= 0 else len(self.data)]
            tp_name = _FIRST_STRING.search(block)
            if tp_name is None:
                continue
            for identifier in re.findall(rb"\b(\w+)\s*,\s*/\*\s*tp_(?:methods|getset)", block):
                names[identifier.decode()] = tp_name.group(1).decode()
        return names

    def _read_method_tables(self) -> None:
        self.type_names = self._type_names()
        seen: set[int] = set()
        for match in re.finditer(rb"\bPy(?:MethodDef|GetSetDef)\b", self.data):
            node = self.root.descendant_for_byte_range(match.start(), match.end())
            if node is None or in_comment_or_string(node):
                continue
            declaration = node
            while declaration is not None and declaration.type != "declaration":
                if declaration.type in ("function_definition", "compound_statement"):
                    declaration = None
                    break
                declaration = declaration.parent
            if declaration is None or declaration.start_byte in seen:
                continue
            seen.add(declaration.start_byte)
            if self.dead.covers(declaration):
                continue
            self._method_table(declaration, attributes=match.group(0) == b"PyGetSetDef")

    def _method_table(self, declaration: tree_sitter.Node, attributes: bool) -> None:
        """One PyMethodDef table ({name, function, ...}) or, with ``attributes``, one
        PyGetSetDef table ({name, getter, setter, ...})."""
        for declarator in declaration.children_by_field_name("declarator"):
            value = declarator.child_by_field_name("value")
            if declarator.type != "init_declarator" or value is None:
                continue
            table = plain_name(declarator.child_by_field_name("declarator") or declarator)
            table = table.split("[")[0]
            if value.type != "initializer_list":
                continue
            owner = self.type_names.get(table)
            if owner is None:
                if attributes:
                    continue
                owner = self.default_module
            if "." not in owner:
                owner = f"{self.default_module}.{owner}"
            for entry in value.named_children:
                if entry.type != "initializer_list" or self.dead.covers(entry):
                    continue
                fields = [child for child in entry.named_children if child.type != "comment"]
                if len(fields) < 2:
                    continue
                name = string_value(fields[0])
                if not name:
                    continue
                qualname = f"{owner}.{name}"
                form = "pygetsetdef" if attributes else "pymethoddef"
                node = self._binding(qualname, fields[0], form, None)
                self.facts.nodes[node].attrs["table"] = table
                self._binds(qualname, fields[1:3] if attributes else [fields[1]])
