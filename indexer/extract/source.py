"""One file as extractors see it: bytes, text, and a tree-sitter parse made at most once."""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tree_sitter

    from indexer.cpp.preprocess import Prepared
    from indexer.extract.context import TreeContext

from indexer.paths import OBJC_SUFFIXES

_parsers = threading.local()  # tree-sitter parsers are not thread-safe; one per thread


def cpp_parser() -> tree_sitter.Parser:
    parser = getattr(_parsers, "cpp", None)
    if parser is None:
        import tree_sitter
        import tree_sitter_cpp

        parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_cpp.language()))
        _parsers.cpp = parser
    return parser


class SourceFile:
    """A file handed to every extractor that wants it, so it is read and parsed once, with
    what extraction may know of the rest of the tree (``context``)."""

    def __init__(
        self, path: str, data: bytes, language: str, context: TreeContext | None = None
    ) -> None:
        self.path = path
        self.data = data
        self.language = language
        self.context = context
        self.decode_error: str | None = None

    @cached_property
    def text(self) -> str:
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            # Index what we can (identifiers are ASCII) and report the file.
            self.decode_error = f"not valid UTF-8 at byte {exc.start}; indexed with replacements"
            return self.data.decode("utf-8", errors="replace")

    @cached_property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    @cached_property
    def cpp_prepared(self) -> Prepared:
        """The bytes tree-sitter-cpp parses: CUDA qualifiers, attribute macros (TORCH_API...)
        and ``<<<...>>>`` launch configurations blanked to same-length spaces, so offsets,
        lines and columns are the file's own (see indexer/cpp/preprocess.py)."""
        from indexer.cpp.preprocess import prepare

        shared = self.context.cpp_macros if self.context else None
        return prepare(self.data, shared, objc=self.path.endswith(OBJC_SUFFIXES))

    @cached_property
    def cpp_tree(self) -> tree_sitter.Tree:
        """The tree-sitter-cpp parse of :attr:`cpp_prepared` (C++ and CUDA files)."""
        return cpp_parser().parse(self.cpp_prepared.data)
