"""What extracting one file may know of the rest of the tree.

A file's facts depend on its bytes and on this context only. It is computed once per
build or update, before any file is extracted, handed to every worker, and stored in the
index so that an update extracts with what a rebuild would know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from indexer.cpp.shared_macros import SharedMacros


@dataclass(frozen=True)
class TreeContext:
    # Header path -> its declaration-writing macros, x-macro lists and registration writers
    # (indexer/cpp/shared_macros.py).
    cpp_header_macros: dict[str, list[list]] = field(default_factory=dict)

    @cached_property
    def cpp_macros(self) -> SharedMacros:
        """The shared macros by name (made once per process, on first use)."""
        from indexer.cpp.shared_macros import SharedMacros

        return SharedMacros(self.cpp_header_macros)


META_KEY = "cpp_header_macros"


def stored_context(meta: dict[str, str]) -> TreeContext | None:
    """The context an index was built with (None: an index from before contexts)."""
    if META_KEY not in meta:
        return None
    return TreeContext(cpp_header_macros=json.loads(meta[META_KEY]))


def context_meta(context: TreeContext) -> dict[str, object]:
    return {META_KEY: context.cpp_header_macros}
