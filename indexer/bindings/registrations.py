"""The extractor for C++/CUDA files that register ops or bind functions to Python."""

from __future__ import annotations

import re

from indexer.bindings.library import LibraryReader
from indexer.bindings.pybind import PybindReader
from indexer.extract.source import SourceFile
from indexer.graph.facts import FileFacts
from indexer.harness import Manifest

_DEFAULT_LIBRARY_MACROS = [
    "TORCH_LIBRARY",
    "TORCH_LIBRARY_FRAGMENT",
    "TORCH_LIBRARY_IMPL",
    "STABLE_TORCH_LIBRARY",
    "STABLE_TORCH_LIBRARY_FRAGMENT",
    "STABLE_TORCH_LIBRARY_IMPL",
]


class RegistrationExtractor:
    """TORCH_LIBRARY / RegisterOperators -> ops; pybind11 / PyMethodDef -> bindings."""

    name = "bindings-registrations"

    def __init__(self, manifest: Manifest) -> None:
        self.library_macros = list(
            dict.fromkeys(
                (manifest.list("bindings", "torch_library_macros") or _DEFAULT_LIBRARY_MACROS)
                + manifest.list("bindings", "registration_wrappers")
            )
        )
        self.pybind_macros = manifest.list("bindings", "pybind_macros") or ["PYBIND11_MODULE"]
        self.impl_macros = manifest.list("bindings", "impl_macros")
        self.aliases = dict(manifest.get("bindings", "namespace_aliases", {}) or {})
        self.packages = manifest.python_packages
        tokens = [
            *self.library_macros,
            *self.pybind_macros,
            "RegisterOperators",
            "PyMethodDef",
            "PyGetSetDef",
        ]
        self._library_tokens = re.compile(
            rb"\b(?:"
            + b"|".join(re.escape(t.encode()) for t in self.library_macros)
            + rb"|RegisterOperators)\b"
        )
        self._pybind_tokens = re.compile(
            rb"\b(?:"
            + b"|".join(re.escape(t.encode()) for t in self.pybind_macros)
            + rb"|PyMethodDef|PyGetSetDef|def_submodule|class_\s*<|(?:py|pybind11)::module)"
        )
        self._any = re.compile(
            rb"\b(?:"
            + b"|".join(re.escape(t.encode()) for t in tokens)
            + rb"|def_submodule|class_\s*<|(?:py|pybind11)::module)"
        )

    def wants(self, src: SourceFile) -> bool:
        return src.language in ("cpp", "cuda") and self._any.search(src.data) is not None

    def extract(self, src: SourceFile, facts: FileFacts) -> None:
        root = src.cpp_tree.root_node
        if self._library_tokens.search(src.data):
            LibraryReader(
                facts,
                src.data,
                root,
                self.library_macros,
                self.aliases,
                self.packages,
                self.impl_macros,
                src.context.cpp_macros if src.context is not None else None,
            ).read()
        if self._pybind_tokens.search(src.data):
            PybindReader(
                facts, src.data, root, self.pybind_macros, self.aliases, self.packages
            ).read()
