"""The node and edge kinds of the index: one explicit vocabulary, documented here.

Every node has a repo-relative file and a line; every edge carries the file and line of
the text that justifies it (its evidence). docs/graph.md renders this module for readers.
"""

from __future__ import annotations

from enum import Enum


class NodeKind(str, Enum):
    """What a node stands for."""

    FILE = "file"  # every indexed file; qualname is its repo-relative path
    CPP_FUNCTION = "cpp_function"  # C++ function, method, constructor, operator, template
    CPP_CLASS = "cpp_class"  # class/struct definition (owner of out-of-line methods)
    CUDA_KERNEL = "cuda_kernel"  # a __global__ function
    DISPATCH_STUB = "dispatch_stub"  # DECLARE_DISPATCH(fn_type, name)
    OP = "op"  # an operator schema: aten::add.Tensor, ns::name from TORCH_LIBRARY
    BINDING = "binding"  # a name made callable from Python (pybind11, PyMethodDef, Python entry)
    REGISTRATION = "registration"  # m.impl of an op defined in another file: ns::name
    DERIVATIVE = "derivative"  # a derivatives.yaml entry (backward formulas of an op)
    PYTHON_MODULE = "python_module"
    PYTHON_CLASS = "python_class"
    PYTHON_FUNCTION = "python_function"
    OPINFO = "opinfo"  # an OpInfo entry of a test registry (op_db)
    TEST_FILE = "test_file"
    TEST_CLASS = "test_class"
    TEST_FUNCTION = "test_function"
    TEST_UTILITY = "test_utility"  # helper under a testing package, or a conftest fixture
    EXTERNAL_SYMBOL = "external_symbol"  # a name imported from a depended-on harness's package
    # A string key of a registry table (an architecture, a quantization method) or a name
    # an examples table gives it (a model id): what code and tests spell to load a class.
    REGISTRY_ENTRY = "registry_entry"

    def __str__(self) -> str:
        return self.value


class EdgeKind(str, Enum):
    """How two nodes relate; the edge points from the user to the used."""

    CONTAINS = "contains"  # file -> definition, class -> method
    INCLUDES = "includes"  # file -> #included file
    CALLS = "calls"  # function -> function it calls
    LAUNCHES = "launches"  # host function -> __global__ kernel it launches
    DISPATCHES = "dispatches"  # op -> implementation per dispatch key; stub -> registered kernel
    IMPLEMENTS = "implements"  # structured kernel (TORCH_IMPL_FUNC) -> the op it implements
    BINDS = "binds"  # binding / registration -> the C++ callable behind it
    DERIVES = "derives"  # derivative entry -> op, and -> functions its formulas call
    IMPORTS = "imports"  # python module -> module it imports
    REFERENCES = "references"  # python code -> op, binding or Python symbol it names
    COVERS = "covers"  # test -> what it exercises
    EXTERNAL_REF = "external_ref"  # module -> symbol of a depended-on harness's package
    REGISTERS = "registers"  # registry entry -> the class it loads, or alias -> its entry

    def __str__(self) -> str:
        return self.value


class Extractor(str, Enum):
    """Which extractor made an edge (``attrs.extractor``; absent means the fast graph)."""

    FAST = "fast"  # tree-sitter and name lookup (indexer/cpp, indexer/bindings, ...)
    PRECISE = "precise"  # libclang over a compile database (indexer/precise)

    def __str__(self) -> str:
        return self.value


def edge_extractor(attrs: dict | None) -> str:
    return (attrs or {}).get("extractor", Extractor.FAST.value)


NODE_KINDS = frozenset(kind.value for kind in NodeKind)
EDGE_KINDS = frozenset(kind.value for kind in EdgeKind)
