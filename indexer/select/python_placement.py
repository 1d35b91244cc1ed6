"""Python lines -> entities: the definition holding a line, else the module and its
importers. Mixed into the :class:`indexer.select.placement.Placer`, which provides the
attributes declared below."""

from __future__ import annotations

from typing import TYPE_CHECKING

from indexer.select.placed import (
    MODULE_KINDS,
    PYTHON_DEF_KINDS,
    FilePlacement,
    innermost,
    new_span,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from indexer.diff import Diff, FileChange, Hunk
    from indexer.graph.facts import NodeFact
    from indexer.query.index import Index, Node
    from indexer.select.oldside import OldFile


class PythonPlacement:
    diff: Diff
    index: Index
    files: dict[str, tuple]
    _old_tokens: list | None
    _new_tokens: list | None

    # The Placer's (placement.py) and IndirectUses' (annotations only, so that the mixins'
    # order cannot shadow them):
    _add: Callable[..., None]
    _old_file: Callable[[FileChange, str, bytes], OldFile]
    _map_old: Callable[[FileChange, NodeFact, int, FilePlacement, str], None]
    _import_every_module: Callable[[str, str, FilePlacement], None]

    def _modules(self, path: str) -> list[Node]:
        nodes = self.index.nodes_in_file(path)
        return [n for n in nodes if n.kind in MODULE_KINDS] or [
            n for n in nodes if n.kind == "file"
        ]

    def _place_python(
        self,
        change: FileChange,
        old: bytes | None,
        old_lines: list[int],
        new_lines: list[int],
        result: FilePlacement,
        code: list[Hunk] | None = None,
    ) -> None:
        path = change.path
        row = self.files.get(path)
        module_level: list[int] = []
        scripted: list[tuple[int, str]] = []  # (line, the scripted definition holding it)
        new_lines = _code_lines(self._new_tokens, new_lines, self.diff.new_side(change))
        old_lines = _code_lines(self._old_tokens, old_lines, old)
        if old_lines and old is not None and code and not (row is not None and row[3]):
            settled = self._python_kept_bodies(change, old, code, result)
            old_lines = [line for line in old_lines if line not in settled]
        if new_lines:
            nodes = self.index.nodes_in_file(path)
            defs = [node for node in nodes if node.kind in PYTHON_DEF_KINDS]
            if row is not None and row[3]:
                module_level.append(new_lines[0])
                result.notes.append(f"{path} has syntax errors: its whole module counts")
            for line in new_lines:
                node = innermost(defs, line)
                if node is not None and not (row is not None and row[3]):
                    self._add(result, [node], path, line, f"changed line {line} is in it")
                    compiler = compiled_at_import(defs, line)
                    if compiler is not None:
                        scripted.append((line, compiler))
                else:
                    module_level.append(line)
        if old_lines and old is not None:
            old_file = self._old_file(change, "python", old)
            defs_old = [fact for fact in old_file.nodes[1:] if fact.kind in PYTHON_DEF_KINDS]
            for line in old_lines:
                fact = innermost(defs_old, line) if not old_file.error else None
                if fact is not None:
                    self._map_old(change, fact, line, result, "deleted or replaced line")
                    compiler = compiled_at_import(defs_old, line)
                    if compiler is not None and change.exists_after and not scripted:
                        scripted.append((new_lines[0] if new_lines else 1, compiler))
                elif change.exists_after:
                    module_level.append(new_lines[0] if new_lines else 1)
                else:
                    module = next((f for f in old_file.nodes if f.kind in MODULE_KINDS), None)
                    if module is not None:
                        self._map_old(change, module, 1, result, "module removed")
                    break
        if scripted and not module_level:
            self._compiled_at_import(result, path, *scripted[0])
        if module_level and change.exists_after:
            line = module_level[0]
            self._add(
                result,
                self._modules(path),
                path,
                line,
                f"module-level code changed (line {line}): the module and its importers",
            )
        if module_level or not change.exists_after:
            where = f"{path}:{module_level[0]}" if module_level else f"{path} (removed)"
            self._import_every_module(path, where, result)

    def _compiled_at_import(self, result: FilePlacement, path: str, line: int, compiler: str):
        """A body change in code compiled when its module is imported: the module too."""
        self._add(
            result,
            self._modules(path),
            path,
            line,
            f"changed line {line} is in {compiler}, which @torch.jit.script compiles when "
            "its module is imported: the module and its importers",
        )
        self._import_every_module(path, f"{path}:{line}", result)

    def _python_kept_bodies(
        self, change: FileChange, old: bytes, code: list[Hunk], result: FilePlacement
    ) -> set[int]:
        """Base lines that need no base extraction (the costly part on a big module): a
        hunk after a definition's header and inside it on the new side, whose base lines
        are all indented deeper than the header (or blank), continued its block at the
        base too (a block runs on while lines are deeper)."""
        new = self.diff.new_side(change)
        if new is None:
            return set()
        new_text, old_text = new.split(b"\n"), old.split(b"\n")
        defs = [n for n in self.index.nodes_in_file(change.path) if n.kind in PYTHON_DEF_KINDS]
        settled: set[int] = set()
        for hunk in code:
            if not hunk.old_count:
                continue
            first, last = new_span(hunk)
            body = [d for d in defs if d.line < first and last <= d.end_line]
            if not body or not 0 < min(d.line for d in body) <= len(new_text):
                continue
            node = min(body, key=lambda d: d.end_line - d.line)
            header = new_text[node.line - 1]
            depth = len(header) - len(header.lstrip())
            lines = [old_text[i - 1] for i in hunk.old_lines if 0 < i <= len(old_text)]
            if any(t.strip() and len(t) - len(t.lstrip()) <= depth for t in lines):
                continue  # a line at the definition's depth or shallower: not surely inside
            settled.update(hunk.old_lines)
            end = hunk.old_start + hunk.old_count - 1
            self._add(
                result, [node], change.path, node.line,
                f"base lines {hunk.old_start}-{end} in it changed",
            )  # fmt: skip
            compiler = compiled_at_import(defs, node.line)
            if compiler is not None:
                self._compiled_at_import(result, change.path, node.line, compiler)
        return settled


# Decorators that compile the body they decorate at once: ``torch.jit.script`` (and
# ``jit.script``) on a function or class runs the TorchScript compiler on its source when
# the module is imported, so a body change that does not compile fails the import.
COMPILING_DECORATORS = frozenset({"script"})


def compiled_at_import(defs: list, line: int) -> str | None:
    """The qualname of the definition holding ``line`` (itself or an enclosing class or
    function) that a compiling decorator compiles at import, or None."""
    for node in sorted(defs, key=lambda d: d.line):
        if node.line <= line <= node.end_line and COMPILING_DECORATORS.intersection(
            node.attrs.get("decorators", ())
        ):
            return node.qualname
    return None


def _code_lines(tokens: list | None, lines: list[int], data: bytes | None) -> list[int]:
    """``lines`` less those no code token covers (blank or comment-only: a blank line
    around a new function is no module-level change); a blank line inside a string is
    covered by the string. Without tokens (hunks plainly code, see placement's
    ``_plainly_code``: no comment, no string delimiter), less the blank lines, unless
    that leaves none."""
    if not lines:
        return lines
    if not tokens:
        if data is None:
            return lines
        text = data.split(b"\n")
        kept = [line for line in lines if not (0 < line <= len(text)) or text[line - 1].strip()]
        return kept or lines  # only blank lines: inside a string, for all we know
    covered: set[int] = set()
    for token in tokens:
        if not token.comment:
            covered.update(range(token.start, token.end + 1))
    return [line for line in lines if line in covered]
