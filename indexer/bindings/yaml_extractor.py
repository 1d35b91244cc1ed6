"""The extractor for the YAML registries a harness names under ``[bindings]``."""

from __future__ import annotations

from indexer.bindings.derivatives import read_derivatives
from indexer.bindings.native_functions import NativeFunctionsReader
from indexer.bindings.yaml_entries import read_entries
from indexer.extract.source import SourceFile
from indexer.graph.facts import FileFacts
from indexer.harness import Manifest


class RegistryYamlExtractor:
    """native_functions.yaml -> ops; derivatives.yaml -> derivative entries."""

    name = "bindings-yaml"

    def __init__(self, manifest: Manifest) -> None:
        self.native_functions = set(manifest.list("bindings", "native_functions"))
        self.derivatives = set(manifest.list("bindings", "derivatives"))
        self.packages = manifest.python_packages

    def wants(self, src: SourceFile) -> bool:
        return src.path in self.native_functions or src.path in self.derivatives

    def extract(self, src: SourceFile, facts: FileFacts) -> None:
        entries = read_entries(src.text)
        if src.path in self.native_functions:
            NativeFunctionsReader(facts, self.packages).read(entries)
        else:
            read_derivatives(entries, facts)
