"""Call sites: every callee the query found becomes a ``calls`` or ``launches`` ref from the
innermost function definition around it.

Lambdas are not definitions, so a call in an ``AT_DISPATCH_*`` lambda or a ``gpu_kernel``
functor belongs to the function that wrote it. A launch is a callee followed by a
blanked ``<<<...>>>``; a kernel passed to a launch helper (``cudaLaunchKernel((void*)k)``,
``launch_kernel(k<float>, ...)``) or any argument naming a kernel of the file is a
launch too. Receivers are typed from the declarations of locals and parameters.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import TYPE_CHECKING

from indexer.cpp.names import is_macro_name, split_qualified, strip_templates
from indexer.extract.source import cpp_parser
from indexer.graph.facts import FileFacts, RefFact
from indexer.graph.vocabulary import EdgeKind, NodeKind

if TYPE_CHECKING:
    from tree_sitter import Node

_CPP = "cpp"
_CALLS = EdgeKind.CALLS.value
_LAUNCHES = EdgeKind.LAUNCHES.value
_KERNEL_ONLY = [NodeKind.CUDA_KERNEL.value]
_LAUNCH_HELPER = re.compile(r"launch", re.I)
_CASTS = ("static_cast<", "const_cast<", "reinterpret_cast<", "dynamic_cast<", "bit_cast<")
_NEWLINE = re.compile(rb"\n")
# An op looked up by its schema name and called through the dispatcher:
# `Dispatcher::singleton().findSchemaOrThrow("ns::op", "overload").typed<...>()`,
# `findSchema({"ns::op", "overload"})`, `findOp(...)`: a call of that op.
_SCHEMA_LOOKUPS = frozenset({"findSchemaOrThrow", "findSchema", "findOp"})
_SCHEMA_NAME = re.compile(r'^\(\s*\{?\s*"(\w+::\w+)"\s*(?:,\s*"(\w*)")?')
_DEFINED = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)
# `= name;`, `= &ns::name<T, 4>;`: a variable set to a function's name.
_ASSIGNED_NAME = rb"\s*=\s*&?\s*([A-Za-z_][\w:]*(?:\s*<[^;{}()=]*>)?)\s*;"
_SMART_POINTERS = frozenset(
    {"shared_ptr", "unique_ptr", "weak_ptr", "intrusive_ptr", "weak_intrusive_ptr", "MaybeOwned"}
)
_LANGUAGE = cpp_parser().language
_IDENTIFIER = _LANGUAGE.id_for_node_kind("identifier", True)
_QUALIFIED = _LANGUAGE.id_for_node_kind("qualified_identifier", True)
_TEMPLATE_FUNCTION = _LANGUAGE.id_for_node_kind("template_function", True)
_FIELD = _LANGUAGE.id_for_node_kind("field_expression", True)
_ARGUMENT_LIST = _LANGUAGE.id_for_node_kind("argument_list", True)
_BY_SCHEMA = {"schema_name": True}  # the ref's target is an op's name, not a C++ name


class Caller:
    """A function definition that owns calls: its node and the scope its body sees.

    Attribute dicts are shared by its refs where they are equal (never mutated): fewer
    objects to build, and pickling sends each once.
    """

    __slots__ = (
        "_by_nargs",
        "_by_receiver",
        "_launch",
        "_member",
        "end",
        "local",
        "outer",
        "plain",
        "start",
        "this_class",
    )

    def __init__(
        self,
        start: int,
        end: int,
        local: int,
        ref_scope: list[str],
        this_class: str | None,
        outer: Caller | None,
    ) -> None:
        self.start = start
        self.end = end
        self.local = local
        self.this_class = this_class
        self.outer = outer  # the function around a local class's method
        self.plain: dict[str, object] = {"scope": ref_scope}
        self._member: dict[str, object] | None = None
        self._launch: dict[str, object] | None = None
        self._by_receiver: dict[str, dict[str, object]] = {}
        self._by_nargs: dict[tuple[int, int], dict[str, object]] = {}

    def set_usings(self, usings: list[str]) -> None:
        if usings:
            self.plain["using"] = usings

    def member(self) -> dict[str, object]:
        """Attrs of a member call on an object of unknown class."""
        if self._member is None:
            self._member = {**self.plain, "member": True}
        return self._member

    def receiver(self, receiver: str) -> dict[str, object]:
        attrs = self._by_receiver.get(receiver)
        if attrs is None:
            attrs = self._by_receiver[receiver] = {**self.plain, "receiver": receiver}
        return attrs

    def with_nargs(self, attrs: dict[str, object], nargs: int) -> dict[str, object]:
        key = (id(attrs), nargs)
        counted = self._by_nargs.get(key)
        if counted is None:
            counted = self._by_nargs[key] = {**attrs, "nargs": nargs}
        return counted

    def launch(self) -> dict[str, object]:
        if self._launch is None:
            self._launch = {**self.plain, "want": _KERNEL_ONLY}
        return self._launch


class CallSites:
    """The calls and launches of one parsed buffer."""

    def __init__(
        self,
        data: bytes,
        facts: FileFacts,
        callers: list[Caller],
        aliases: dict[str, str],
        launch_at: list[int],
        line_map: list[int] | None,
        newlines: list[int],
    ) -> None:
        self.data = data
        self.facts = facts
        self.callers = sorted(callers, key=lambda caller: caller.start)
        self.starts = [caller.start for caller in self.callers]
        self.aliases = aliases
        self.launch_ends = self._launch_ends(launch_at)
        self._defined_macros: frozenset[str] | None = None
        self.line_map = line_map
        self.newlines = newlines
        self.variables: dict[bytes, list[int]] = {}  # name -> where it is declared
        self.types: list[tuple[int, int]] = []
        self.type_starts: list[int] = []
        self.variable_types: dict[
            int, str | None
        ] = {}  # declaration offset -> its type  # declaration -> its type as written
        self.helper_arguments: set[int] = set()

    def line(self, node: Node) -> int:
        row = bisect_right(self.newlines, node.start_byte)
        return self.line_map[row] if self.line_map is not None else row + 1

    def caller_at(self, offset: int) -> Caller | None:
        """The innermost definition around ``offset``."""
        index = bisect_right(self.starts, offset) - 1
        if index < 0:
            return None
        caller: Caller | None = self.callers[index]
        while caller is not None and offset >= caller.end:
            caller = caller.outer
        return caller

    def _macro(self, name: str) -> bool:
        """Whether an ALL_CAPS callee is a macro: one without an underscore (``M``, ``CPU``)
        or one this file defines; other ALL_CAPS names are kept as calls, resolved only
        where the tree defines a function so named (``UNARY_OUTER_LOOP`` in Reduce.h,
        ``GET_BLOCKS``, ``WARP_SHFL_DOWN``); a header's macro stays unresolved."""
        if "_" not in name.strip("_"):
            return True
        if self._defined_macros is None:
            found = _DEFINED.findall(self.data) if b"define" in self.data else []
            self._defined_macros = frozenset(name.decode() for name in found)
        return name in self._defined_macros

    def _launch_ends(self, launch_at: list[int]) -> set[int]:
        """Where the callee of each ``<<<...>>>`` ends (its launch configuration is blanked)."""
        ends = set()
        data = self.data
        for offset in launch_at:
            end = offset
            while end > 0 and data[end - 1] in b" \t\r\n":
                end -= 1
            ends.add(end)
        return ends

    def add_variables(self, names: list[Node], types: list[Node]) -> None:
        """Declared names of class type, and the types they were declared with: a name's
        type is the last type captured before it (nothing is declared between a
        declaration's type and its declarator)."""
        data = self.data
        variables = self.variables
        for node in names:
            start = node.start_byte
            variables.setdefault(data[start : node.end_byte], []).append(start)
        for declared in variables.values():  # captures do not come in document order
            if len(declared) > 1:
                declared.sort()
        self.types = sorted((node.start_byte, node.end_byte) for node in types)
        self.type_starts = [start for start, _ in self.types]

    def variable_type(
        self, name: bytes, at: int, caller: Caller, arrow: bool = False
    ) -> str | None:
        """The class a local variable or parameter of ``caller`` was declared with; through
        ``->``, the class a smart pointer of that type points to."""
        found = -1
        for start in self.variables.get(name, ()):
            if caller.start <= start < at:
                found = start
            elif start >= at:
                break
        if found < 0:
            return None
        if found not in self.variable_types:
            self.variable_types[found] = self._declared_type(found)
        written = self.variable_types[found]
        if written is None:
            return None
        if "<" not in written:
            return written
        if arrow:
            head, _, inner = written.partition("<")
            if head.rsplit("::", 1)[-1] in _SMART_POINTERS:
                inner = inner.rsplit(">", 1)[0]
                return "::".join(split_qualified(inner)) or None
        return "::".join(split_qualified(written)) or None

    def _declared_type(self, declared_at: int) -> str | None:
        index = bisect_right(self.type_starts, declared_at) - 1
        if index < 0:
            return None
        start, end = self.types[index]
        return " ".join(self.data[start:end].decode("utf-8", "replace").split()) or None

    def add_calls(self, calls: list[Node], kernel_helpers: bool) -> None:
        """One ref per callee. Node attributes are costly from Python (``type`` builds a
        string, siblings are found from the parent), so kinds are compared by id, member
        expressions are read from the text, and lines come from a table of newline offsets."""
        data = self.data
        refs = self.facts.refs
        aliases = self.aliases
        launch_ends = self.launch_ends
        variables = self.variables
        line_map = self.line_map
        callers = self.callers
        starts = self.starts
        newlines = self.newlines
        for call in calls:
            callee = call.child(0)  # the function; the argument list is the last child
            if callee is None:
                continue
            start = callee.start_byte
            index = bisect_right(starts, start) - 1
            if index < 0:
                continue
            caller: Caller | None = callers[index]
            while caller is not None and start >= caller.end:
                caller = caller.outer
            if caller is None:
                continue  # namespace scope: macros and static initializers
            end = callee.end_byte
            kind = callee.kind_id
            launch = end in launch_ends if launch_ends else False
            attrs = caller.plain
            if kind == _IDENTIFIER:
                written = data[start:end]
                target = written.decode("utf-8", "replace")
                if target.isupper() and is_macro_name(target) and self._macro(target):
                    continue
                if not launch and written in variables and call.child_count == 2:
                    receiver = self.variable_type(written, start, caller)
                    # (a.operator[](i) parses as `a` called with an error between.)
                    if receiver is not None:  # an object called: its operator()
                        attrs = caller.receiver(receiver)
                        target = "operator()"
            elif kind in (_QUALIFIED, _TEMPLATE_FUNCTION):
                target = data[start:end].decode("utf-8", "replace")
                if target.startswith(_CASTS):
                    continue
                if " " in target or "\n" in target:
                    target = " ".join(target.split()).replace(" ::", "::").replace(":: ", "::")
                if aliases:
                    head, sep, rest = target.partition("::")
                    if sep and head in aliases:
                        target = f"{aliases[head]}::{rest}"
            elif kind == _FIELD:
                text = data[start:end].decode("utf-8", "replace")
                dot = text.rfind(".")
                arrow = text.rfind("->")
                if arrow > dot:
                    object_text, target = text[:arrow], text[arrow + 2 :]
                elif dot >= 0:
                    object_text, target = text[:dot], text[dot + 1 :]
                else:
                    continue
                target = target.strip()
                if target.startswith("template"):
                    target = target[8:].strip()
                if "<" in target:
                    target = strip_templates(target)
                object_text = object_text.strip()
                receiver = None
                if object_text == "this":
                    receiver = caller.this_class
                elif variables and object_text.isidentifier():
                    name = object_text.encode()
                    if name in variables:
                        receiver = self.variable_type(name, start, caller, arrow > dot)
                attrs = caller.receiver(receiver) if receiver is not None else caller.member()
            else:
                continue  # (*fn)(...), lambda(...)(...), f()(...): no name to resolve
            row = bisect_right(newlines, start)
            line = line_map[row] if line_map is not None else row + 1
            if launch:
                if kind == _IDENTIFIER:  # auto kernel = pick_kernel; kernel<<<...>>>(...)
                    target = self._initializer(target, caller.start, start) or target
                refs.append(
                    RefFact(caller.local, _LAUNCHES, _CPP, target, line, None, caller.launch())
                )
                continue
            arguments = call.child(1)
            if arguments is not None and arguments.kind_id == _ARGUMENT_LIST:
                # The argument count picks among overloads at link time.
                attrs = caller.with_nargs(attrs, arguments.named_child_count)
                if kernel_helpers and _LAUNCH_HELPER.search(target.partition("<")[0]):
                    self.helper_arguments.add(arguments.start_byte)
            refs.append(RefFact(caller.local, _CALLS, _CPP, target, line, None, attrs))
            if target in _SCHEMA_LOOKUPS and arguments is not None:
                named = _SCHEMA_NAME.match(
                    data[arguments.start_byte : arguments.end_byte].decode("utf-8", "replace")
                )
                if named:
                    op, overload = named.group(1), named.group(2)
                    op_name = f"{op}.{overload}" if overload else op
                    row = bisect_right(newlines, arguments.start_byte)  # the name's line
                    at = line_map[row] if line_map is not None else row + 1
                    refs.append(RefFact(caller.local, _CALLS, _CPP, op_name, at, None, _BY_SCHEMA))

    def _initializer(self, name: str, body_start: int, at: int) -> str | None:
        """The name a local variable was last set to before ``at`` (``auto k = kern<T>;``,
        ``k = &kern;``), if it was set to a name."""
        if not name.isidentifier():
            return None
        found = None
        pattern = re.compile(rb"\b" + name.encode() + _ASSIGNED_NAME)
        for match in pattern.finditer(self.data, body_start, at):
            found = match.group(1)
        if found is None:
            return None
        written = "".join(found.decode("utf-8", "replace").split())
        if self.aliases:
            head, sep, rest = written.partition("::")
            if sep and head in self.aliases:
                written = f"{self.aliases[head]}::{rest}"
        return written

    def add_kernel_arguments(
        self, arguments: list[Node], kernel_names: set[str], stub_names: set[str] = frozenset()
    ) -> None:
        """Kernels passed as arguments: ``launch_kernel(k<T>, ...)``, ``cudaLaunchKernel((void*)k)``;
        and dispatch stubs passed to the helper that calls them
        (``unary_op_impl_float_out(result, self, logit_stub)``): a ``calls`` ref."""
        helper_arguments = self.helper_arguments
        if not kernel_names and not helper_arguments and not stub_names:
            return
        for node in arguments:
            start = node.start_byte
            caller = self.caller_at(start)
            if caller is None:
                continue
            written = "".join(self.data[start : node.end_byte].decode("utf-8", "replace").split())
            if self.aliases:
                head, sep, rest = written.partition("::")
                if sep and head in self.aliases:  # namespace ar = vllm::mnnvl;
                    written = f"{self.aliases[head]}::{rest}"
            name = split_qualified(written)[-1:] if written else []
            if not name:
                continue
            if name[0] in stub_names and node.type == "identifier":
                if not any(
                    caller.start <= at < start for at in self.variables.get(written.encode(), ())
                ):
                    attrs = {**caller.plain, "via": "argument"}
                    self.facts.refs.append(
                        RefFact(caller.local, _CALLS, _CPP, written, self.line(node), None, attrs)
                    )
                continue
            if name[0] not in kernel_names:
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
                initial = self._initializer(written, caller.start, start)
                if initial is not None:  # auto kernel = resolve_kernel; launch(kernel, ...)
                    written = initial
                elif (
                    direct
                    and node.type != "template_function"
                    and node.prev_named_sibling is not None
                ):
                    continue
                elif any(
                    caller.start <= at < start for at in self.variables.get(written.encode(), ())
                ):
                    continue  # a local variable or parameter, not a kernel
            attrs = {**caller.launch(), "via": "argument"}
            self.facts.refs.append(
                RefFact(caller.local, _LAUNCHES, _CPP, written, self.line(node), None, attrs)
            )
