"""Uses of changed files the graph cannot hold as edges, placed by the :class:`Placer`.

- A file the index does not parse and the manifest says affects nothing (a doc, a data
  file) may still be read by a test: PyTorch's test/quantization/core/test_docs.py
  executes the examples of ``docs/source/quantization.rst``. Code naming such a file's
  repo-relative path in its text is where the change enters the graph; one ``git grep``
  over the tree's Python finds every such line, so the lines are the evidence.
- Tests that import every module of the package by walking it (``pkgutil``), the
  manifest's ``import_every_module``, run any module's import-time code without an
  import statement naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from indexer.diff import run_git
from indexer.paths import under_any
from indexer.select.model import Entity
from indexer.select.placed import PYTHON_DEF_KINDS, FilePlacement, innermost

if TYPE_CHECKING:
    from collections.abc import Callable

    from indexer.diff import Diff, FileChange
    from indexer.harness import Manifest
    from indexer.query.index import Index, Node

READS_PATH = "reads-path"  # kind of an entity placed by naming a changed file's path


def searched(path: str) -> bool:
    """Whether code naming ``path`` is looked for: a bare file name is too loose a match."""
    return "/" in path


def lines_naming(source: Path, paths: list[str]) -> dict[str, list[tuple[str, int]]]:
    """changed path -> (file, line) of each Python line in the tree that names it.

    Raises OSError when git cannot search the tree (the caller cannot then rule out
    a reader, and says so)."""
    wanted = sorted({path for path in paths if searched(path)})
    if not wanted:
        return {}
    args = ["grep", "-n", "-z", "-I", "-F", "--untracked", "--no-color"]
    for path in wanted:
        args += ["-e", path]
    result = run_git(source, *args, "--", "*.py", check=False)
    if result.returncode == 1:
        return {}  # git grep: nothing matched
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip().splitlines()
        raise OSError(f"git grep failed: {message[-1] if message else result.returncode}")
    found: dict[str, list[tuple[str, int]]] = {}
    for record in result.stdout.split(b"\n"):
        parts = record.split(b"\0", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        file = parts[0].decode("utf-8", "surrogateescape")
        text = parts[2].decode("utf-8", "replace")
        for path in wanted:
            if path in text:
                found.setdefault(path, []).append((file, int(parts[1])))
    return found


class IndirectUses:
    """Mixed into the Placer, which provides the attributes below."""

    diff: Diff
    index: Index
    manifest: Manifest
    files: dict[str, tuple]
    never_affects: list[str]  # the diff's paths that select nothing by themselves
    _readers: dict[str, list[tuple[str, int]]] | None
    _readers_error: str | None  # why the search for readers failed

    _modules: Callable[[str], list[Node]]  # the module node(s) of a Python file

    def _import_every_module(self, path: str, where: str, result: FilePlacement) -> None:
        """Tests that import every module of the package by walking it (the manifest's
        ``import_every_module``) run the import-time code changed at ``where``."""
        if not under_any(path, self.manifest.list("python", "packages")):
            return
        for test in self.manifest.list("selection", "import_every_module"):
            if test in self.files:
                result.test_files[test] = (
                    f"it imports every module (manifest import_every_module), and the "
                    f"import-time code at {where} changed"
                )
            else:
                result.notes.append(
                    f"the manifest's import_every_module lists {test}, which is not indexed"
                )

    def _place_readers(self, change: FileChange, result: FilePlacement) -> None:
        """A file that selects nothing by itself (a doc) affects the code naming its path."""
        if self._readers is None:
            try:
                self._readers = lines_naming(self.diff.source, self.never_affects)
            except OSError as exc:
                self._readers, self._readers_error = {}, str(exc)
        if self._readers_error and any(searched(path) for path in change.paths):
            result.everything = (
                f"{change.path} changed and code reading it could not be looked for "
                f"({self._readers_error}): any test may read it"
            )
            return
        defs_of: dict[str, list[Node]] = {}
        for path in change.paths:
            for file, line in self._readers.get(path, []):
                if file not in defs_of:
                    defs_of[file] = [
                        n for n in self.index.nodes_in_file(file) if n.kind in PYTHON_DEF_KINDS
                    ]
                node = innermost(defs_of[file], line)
                nodes = [node] if node is not None else self._modules(file)
                if not nodes:
                    result.notes.append(f"{file}:{line} names {path} but is outside the index")
                    continue
                result.entities.append(
                    Entity(
                        f"{nodes[0].qualname} (reads {path})",
                        READS_PATH,
                        f"{file}:{line}",
                        f"{file}:{line} names {path}, which changed",
                        [n.id for n in nodes],
                    )
                )
