"""The extractor interface and the registry of extractors a build runs.

An extractor turns one :class:`SourceFile` into nodes and refs on a :class:`FileFacts`.
It must be a pure function of the file and the manifest: it runs in worker processes,
in any order, and an incremental update re-runs it on single files.
"""

from __future__ import annotations

from importlib import import_module
from typing import Protocol

from indexer.extract.source import SourceFile
from indexer.graph.facts import FileFacts
from indexer.harness import Manifest

# "module:Class" of every extractor, in the order they run on a file. Each layer adds its
# own line here.
EXTRACTORS: tuple[str, ...] = (
    "indexer.cpp.extractor:CppExtractor",
    "indexer.python.extractor:PythonExtractor",
    "indexer.bindings.yaml_extractor:RegistryYamlExtractor",
    "indexer.bindings.registrations:RegistrationExtractor",
)


class Extractor(Protocol):
    name: str

    def __init__(self, manifest: Manifest) -> None: ...

    def wants(self, src: SourceFile) -> bool:
        """Whether this file is for this extractor (by language, path or a cheap text test)."""
        ...

    def extract(self, src: SourceFile, facts: FileFacts) -> None:
        """Add nodes and refs for ``src`` to ``facts``."""
        ...


def load_extractors(manifest: Manifest) -> list[Extractor]:
    extractors = []
    for spec in EXTRACTORS:
        module_name, _, class_name = spec.partition(":")
        extractors.append(getattr(import_module(module_name), class_name)(manifest))
    return extractors
