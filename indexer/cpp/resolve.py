"""The resolver for scheme ``cpp``: C++ names as written -> definitions, by scope rules.

What text allows of C++ name lookup, with dict lookups only:

* a qualified or unqualified name is looked up in the caller's scope, then each enclosing
  scope outwards (``cpublas::gemm`` from ``at::native`` finds ``at::native::cpublas::gemm``);
  the first scope level with a definition wins, as name hiding does;
* ``using namespace U`` makes U's names visible at the level of the nearest namespace
  enclosing both the caller and U;
* anonymous namespaces are transparent, but what they hold (and ``static`` functions) is
  visible only from its own file unless it is defined in a header;
* a member call with a known receiver class looks in that class, then its bases; an
  unqualified call in a method looks in the bases of the method's class too (and the
  classes TORCH_META_FUNC / TORCH_IMPL_FUNC generate derive from TensorIteratorBase or
  MetaBase);
* a call naming a class calls its constructors;
* ``TORCH_IMPL_FUNC(add_out)`` is found as ``at::native::add_out`` too (how
  native_functions.yaml names it);
* a ``dispatches`` ref from ``REGISTER_DISPATCH(stub, &kernel)`` resolves both names and
  makes the edge stub -> kernel.

A call that finds no C++ definition and names ATen's generated API (``at::mm(...)``, a
method on a Tensor, an unqualified ``cudnn_grid_sampler(...)`` written inside namespace
``at``) resolves to the aten op (indexer/cpp/aten_api.py).

Names found nowhere by these rules fall back to definitions of the same qualified suffix
(``detail::foo``) or, unqualified, of the same name in the caller's own file. Several
candidates are narrowed by the call's argument count against each overload's arity, then
(when all share one qualified name: template specializations, per-platform variants) to
those in the caller's own file; what remains is returned, and the linker marks it
ambiguous. Member calls on a receiver of unknown class stay unresolved rather than
guessed. Lookups are dict gets, memoized per (name, scope, usings, file, kinds).
"""

from __future__ import annotations

from collections.abc import Iterator

from indexer.cpp.names import ANONYMOUS, split_qualified
from indexer.cpp.operator_lookup import operator_targets
from indexer.cpp.symbols import CALLABLE, STUBS, CppSymbols
from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.link.symbols import Ref, Resolution, SymbolTable

_CALLS = EdgeKind.CALLS.value
_VIA_OP = {"via": "aten_api"}
_VIA_OPERATOR = {"via": "operator"}
_VIA_AUTOGRAD = {"via": "autograd_apply"}  # F::apply -> F::forward, F::backward (as precise)
_VIA_SCHEMA = {"via": "schema_name"}  # findSchemaOrThrow("ns::op", ""): a call of that op
_OP = NodeKind.OP.value


def _scope(attrs: dict) -> tuple[str, ...]:
    return tuple(part for part in attrs.get("scope", ()) if part != ANONYMOUS)


def resolve(refs: list[Ref], symbols: SymbolTable) -> Iterator[Resolution]:
    index = CppSymbols.of(symbols)
    for ref in refs:
        attrs = ref.attrs
        if attrs.get("schema_name"):
            for node_id in symbols.by_qualname.get(ref.target, ()):
                if symbols.kind[node_id] == _OP:
                    yield Resolution(ref.id, node_id, _VIA_SCHEMA)
            continue
        scope = _scope(attrs)
        usings = tuple(attrs.get("using", ()))
        want = frozenset(attrs["want"]) if "want" in attrs else CALLABLE
        stub = attrs.get("stub")
        if stub is not None:
            stubs = index.lookup(stub, scope, usings, ref.file_id, STUBS)
            if not stubs:
                continue
            for kernel in index.lookup(ref.target, scope, usings, ref.file_id, CALLABLE):
                for stub_id in stubs:
                    yield Resolution(ref.id, kernel, None, stub_id)
            continue
        if "operand_types" in attrs:  # a + b, a[i], *it: only operators the tree defines
            targets = operator_targets(ref, scope, usings, index)
            for node_id in targets:
                yield Resolution(ref.id, node_id, _VIA_OPERATOR)
            continue
        receiver = attrs.get("receiver")
        if receiver is not None:
            found = index.member(receiver, ref.target, scope, usings, ref.file_id, want)
        elif attrs.get("member"):
            continue
        else:
            found = index.lookup(ref.target, scope, usings, ref.file_id, want)
            if not found and ref.kind == _CALLS:
                members = index.autograd_apply(ref.target, scope, usings, ref.file_id)
                for node_id in members:
                    yield Resolution(ref.id, node_id, _VIA_AUTOGRAD)
                if members:
                    continue
        if not found and ref.kind == _CALLS:
            # Not defined in the tree: ATen's generated API, an edge to the op it calls.
            if receiver is not None:
                ops = index.aten.method(receiver, ref.target, attrs.get("nargs"))
            else:
                components = split_qualified(ref.target)
                if len(components) == 1 and scope[:1] == ("at",):
                    # Unqualified in namespace at (at::native): at::X is in scope.
                    components = ["at", *components]
                ops = index.aten.function(components, attrs.get("nargs"))
            for node_id in ops:
                yield Resolution(ref.id, node_id, _VIA_OP)
            continue
        # A dispatch key (bindings' dispatches refs) stays on the edge.
        carried = {"key": attrs["key"]} if "key" in attrs else None
        if found and "<" in ref.target:
            found = index.specialized(found, ref.target)
        if len(found) > 1:
            found = index.narrow(found, ref.file_id, attrs.get("nargs"))
        for node_id in found:
            yield Resolution(ref.id, node_id, carried)
