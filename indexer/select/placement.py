"""Each changed line of each changed file -> the graph entities it touches.

The table (docs/selection.md) in code: a line in a C++ function or CUDA kernel is that
function; a C++ line outside every function is the functions of the file that mention
the names it defines (every function of the file when that cannot be decided); a
header's non-function change is also everything in the files that include it; a YAML
registry line is its entry's op or derivative; a Python line is its function or class, or
the module; a test file is itself; manifest globs select everything or nothing; any other
file selects everything. Comment- and whitespace-only hunks select nothing.
"""

from __future__ import annotations

from indexer.diff import Diff, FileChange, Hunk
from indexer.extract.discover import is_test_file, wanted_language
from indexer.graph.facts import NodeFact
from indexer.graph.vocabulary import NodeKind
from indexer.harness import Manifest
from indexer.paths import is_utf8, language_of, matches_any, printable
from indexer.query.index import Index, Node
from indexer.select.cpp_placement import CppPlacement
from indexer.select.indirect_uses import IndirectUses
from indexer.select.load_time import LoadTimePlacement
from indexer.select.model import ChangedFile, Entity
from indexer.select.oldside import OldFile, OldSide
from indexer.select.placed import (
    FUNCTION_KINDS,
    MEMBERS_SHOWN,
    MODULE_KINDS,
    FilePlacement,
)
from indexer.select.python_placement import PythonPlacement
from indexer.select.tokens import (
    Untokenizable,
    cpp_tree,
    hunk_changes_code,
    hunk_spans,
    tokens_for,
)

__all__ = ["FUNCTION_KINDS", "FilePlacement", "Placer", "categorize", "is_cuda_path"]

YAML_KINDS = frozenset({NodeKind.OP.value, NodeKind.DERIVATIVE.value})
CUDA_DIRS = frozenset({"cuda", "cudnn", "miopen"})

# Run-everything outranks code outranks nothing, when a rename spans two categories.
_RANK = {"run-everything": 4, "other": 3, "cpp": 2, "cuda": 2, "python": 2, "yaml": 2, "test": 1}


def is_cuda_path(path: str) -> bool:
    return language_of(path) == "cuda" or bool(CUDA_DIRS.intersection(path.split("/")[:-1]))


def categorize(path: str, manifest: Manifest) -> tuple[str, str]:
    """(category, detail) of one path under the manifest's rules."""
    pattern = matches_any(path, manifest.list("selection", "run_everything"))
    if pattern:
        return "run-everything", f"matches the run-everything pattern {pattern!r}"
    pattern = matches_any(path, manifest.list("selection", "never_affects"))
    if pattern:
        return "never-affects", f"matches the never-affects pattern {pattern!r}"
    if is_test_file(path, manifest):
        return "test", "a test file"
    language = wanted_language(path, manifest)
    if language is not None:
        return language, f"indexed {language} source"
    if matches_any(path, manifest.list("sources", "exclude")):
        return "other", "excluded from the index by the manifest"
    lang = language_of(path)
    if lang in ("cpp", "cuda", "python"):
        return "other", f"{lang} outside the harness's source directories"
    return "other", "not a file the index reads"


def _whole(change: FileChange, old: bytes | None, new: bytes | None) -> list[Hunk]:
    def count(data: bytes | None) -> int:
        if not data:
            return 0
        return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)

    n_old, n_new = count(old), count(new)
    return [Hunk(1 if n_old else 0, n_old, 1 if n_new else 0, n_new)]


def _plainly_code(old: bytes | None, new: bytes | None, hunks: list[Hunk]) -> bool:
    """Whether every hunk changes Python code on the face of its text: no comment or
    string delimiter on its lines, and a difference beyond whitespace (which may be
    indentation, so tokens decide that)."""
    if old is None or new is None or not hunks:
        return False
    old_text, new_text = old.split(b"\n"), new.split(b"\n")
    for hunk in hunks:
        before = [old_text[i - 1] for i in hunk.old_lines if 0 < i <= len(old_text)]
        after = [new_text[i - 1] for i in hunk.new_lines if 0 < i <= len(new_text)]
        if any(mark in line for line in before + after for mark in (b"#", b'"', b"'", b"\\")):
            return False
        if b"".join(b"".join(before).split()) == b"".join(b"".join(after).split()):
            return False
    return True


def _new_file_with_code(old: bytes | None, new: bytes | None, hunks: list[Hunk]) -> bool:
    """A new C++ file in one hunk that holds code: a top-level node not a comment."""
    if old is not None or new is None or len(hunks) != 1:
        return False
    return any(child.type != "comment" for child in cpp_tree(new).root_node.children)


def _yaml_code_line(line: bytes) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith(b"#")


class Placer(CppPlacement, PythonPlacement, IndirectUses, LoadTimePlacement):
    """Places the changed files of one diff onto one index."""

    _new_tokens: list | None = None  # the changed file's new side, when it tokenized

    def __init__(self, diff: Diff, index: Index, manifest: Manifest) -> None:
        self.diff = diff
        self.index = index
        self.manifest = manifest
        self.oldside = OldSide(manifest, index)
        self.never_affects = [
            path
            for change in diff.files
            for path in change.paths
            if categorize(path, manifest)[0] == "never-affects"
        ]
        self._readers: dict[str, list[tuple[str, int]]] | None = None  # see _place_readers
        self._readers_error: str | None = None
        self.files = {
            row[1]: row
            for row in index.conn.execute(
                "SELECT id, path, language, parse_errors, error FROM files"
            )
        }

    # --- dispatch by category ---------------------------------------------------------

    def place(self, change: FileChange) -> FilePlacement:
        categories = [categorize(path, self.manifest) for path in change.paths]
        category, detail = max(categories, key=lambda item: _RANK.get(item[0], 0))
        result = FilePlacement(ChangedFile(change.path, change.old_path, change.status, category))
        if not all(is_utf8(path) for path in change.paths):
            self._place_undecodable(change, category, result)
        elif category == "run-everything":
            result.everything = f"{change.path} {detail}"
        elif category == "never-affects":
            result.changed.note = detail
            self._place_readers(change, result)
        elif category == "other":
            result.everything = f"{change.path} changed and is {detail}: it may affect any test"
        elif category == "test":
            self._place_test(change, result)
        else:
            self._place_code(change, category, result)
        return result

    def _place_undecodable(self, change: FileChange, category: str, result: FilePlacement) -> None:
        """A path that is not UTF-8 is in no index (the build lists it as a problem): a
        test file of that name runs; any other such change may affect any test."""
        shown = printable(change.path)
        result.changed.path = shown
        result.changed.old_path = printable(change.old_path) if change.old_path else None
        if category == "test" and change.exists_after:
            result.test_files[change.path] = f"{shown} changed ({change.status})"
        elif category == "test":
            result.changed.note = "test file deleted: nothing left to run in it"
        else:
            result.everything = (
                f"{shown} changed and is not in the index (its name is not valid UTF-8): "
                "it may affect any test"
            )

    def _place_test(self, change: FileChange, result: FilePlacement) -> None:
        if change.exists_after:
            result.test_files[change.path] = f"{change.path} changed ({change.status})"
            modules = [
                node
                for node in self.index.nodes_in_file(change.path, MODULE_KINDS)
                if node.kind in MODULE_KINDS
            ]
            if modules:
                result.entities.append(
                    self._entity(modules, change.path, 1, "the test file changed; its importers")
                )
        else:
            result.changed.note = "test file deleted: nothing left to run in it"
            result.notes.append(f"{change.path}: {result.changed.note}")

    # --- code -------------------------------------------------------------------------

    def _place_code(self, change: FileChange, language: str, result: FilePlacement) -> None:
        old = self.diff.old_side(change)
        new = self.diff.new_side(change)
        hunks = change.hunks
        if change.binary or change.status in ("renamed", "copied", "mode-changed") or not hunks:
            hunks = _whole(change, old, new)
        if change.exists_after and change.path not in self.files:
            result.everything = f"{change.path} is not in the index"
            return
        row = self.files.get(change.path)
        if row is not None and row[4]:
            result.everything = f"{change.path} could not be indexed ({row[4]})"
            return
        self._old_tokens = self._new_tokens = None  # set by _code_hunks, for this file
        if change.status in ("renamed", "copied"):
            # The path itself changed: what named the old one (an import, an #include)
            # is affected even where the text is the same.
            code = hunks
        else:
            code = self._code_hunks(language, old, new, hunks, result)
        result.changed.code_hunks = len(code)
        result.changed.skipped_hunks = len(hunks) - len(code)
        if not code:
            if hunks:
                result.changed.note = "comment or whitespace changes only"
            return
        old_lines = sorted({line for hunk in code for line in hunk.old_lines})
        new_lines = sorted({line for hunk in code for line in hunk.new_lines})
        if not change.exists_after:
            new_lines = []
        if language in ("cpp", "cuda"):
            self._old_tokens = getattr(self, "_old_tokens", None) if code is not hunks else None
            self._place_cpp(change, old, new, old_lines, new_lines, result, code)
            sides = [(new, new_lines, "line"), (old, old_lines, "base line")]
            self._place_load_time(change.path, sides, result)
        elif language == "python":
            self._place_python(change, old, old_lines, new_lines, result, code)
        else:
            self._place_yaml(change, old, old_lines, new_lines, result)
        if is_cuda_path(change.path):
            for entity in result.entities:
                entity.cuda = True

    def _code_hunks(
        self,
        language: str,
        old: bytes | None,
        new: bytes | None,
        hunks: list[Hunk],
        result: FilePlacement,
    ) -> list[Hunk]:
        if language == "yaml":
            old_text = (old or b"").split(b"\n")
            new_text = (new or b"").split(b"\n")

            def yaml_code(hunk: Hunk) -> bool:
                return any(_yaml_code_line(old_text[i - 1]) for i in hunk.old_lines) or any(
                    _yaml_code_line(new_text[i - 1]) for i in hunk.new_lines
                )

            return [hunk for hunk in hunks if yaml_code(hunk)]
        if language == "python" and _plainly_code(old, new, hunks):
            return hunks  # no tokens needed (tokenizing a big module costs ~0.25 s a side)
        if language in ("cpp", "cuda") and _new_file_with_code(old, new, hunks):
            return hunks  # tokenizing a generated 3 MB file costs ~8 s, for the same answer
        try:
            # Only what overlaps the hunks is ever asked of the tokens.
            old_spans, new_spans = hunk_spans(hunks, "old"), hunk_spans(hunks, "new")
            old_tokens = tokens_for(language, old, old_spans) if old is not None else []
            new_tokens = tokens_for(language, new, new_spans) if new is not None else []
            self._old_tokens, self._new_tokens = old_tokens, new_tokens
        except Untokenizable as exc:
            result.notes.append(f"cannot tokenize {result.changed.path} ({exc}): every hunk counts")
            return hunks
        return [hunk for hunk in hunks if hunk_changes_code(old_tokens, new_tokens, hunk)]

    # --- helpers ----------------------------------------------------------------------

    def _entity(self, nodes: list[Node], path: str, line: int, reason: str) -> Entity:
        if len(nodes) == 1:
            label, kind = nodes[0].qualname, nodes[0].kind
        else:
            label, kind = f"{len(nodes)} definitions in {path}", "group"
        entity = Entity(label, kind, f"{path}:{line}", reason, [node.id for node in nodes])
        if len(nodes) > 1:
            entity.members = [node.qualname for node in nodes[:MEMBERS_SHOWN]]
        return entity

    def _add(self, result: FilePlacement, nodes: list[Node], path: str, line: int, reason: str):
        known = result.placed_ids()
        fresh = [node for node in nodes if node.id not in known]
        if fresh:
            result.entities.append(self._entity(fresh, path, line, reason))

    def _old_file(self, change: FileChange, language: str, old: bytes) -> OldFile:
        return self.oldside.extract(change.old_path or change.path, language, old)

    def _map_old(
        self, change: FileChange, fact: NodeFact, line: int, result: FilePlacement, what: str
    ) -> None:
        """An old definition touched by a deleted or replaced line -> index nodes."""
        key = (fact.kind, fact.qualname, fact.line)
        if key in result.mapped:
            return
        result.mapped.add(key)
        path = change.path if change.exists_after else (change.old_path or change.path)
        found = self.oldside.find(fact, path)
        old_where = f"{change.old_path}:{line}"
        if found:
            self._add(result, found, path, found[0].line, f"{what} at base {old_where}")
            return
        known = result.placed_ids()
        named_by = [node for node in self.oldside.users_of(fact.name) if node.kind != "file"]
        users = [node for node in named_by if node.id not in known]
        if users:
            reason = f"{fact.qualname} is gone (was at base {old_where}); code that still names it"
            result.entities.append(
                Entity(
                    f"users of removed {fact.qualname}",
                    "group",
                    old_where,
                    reason,
                    [node.id for node in users],
                    members=[node.qualname for node in users[:MEMBERS_SHOWN]],
                )
            )
        elif not named_by:
            result.notes.append(
                f"{fact.qualname} was removed (base {old_where}) and nothing in the tree names it"
            )

    def _everything_in(self, path: str, reason: str, line: int, result: FilePlacement) -> None:
        nodes = [node for node in self.index.nodes_in_file(path) if node.kind != "file"]
        if not nodes:
            result.everything = f"{path}: {reason}, and the index holds no definition in it"
            return
        entity = Entity(
            f"every definition in {path}", "group", f"{path}:{line}", reason, [n.id for n in nodes]
        )
        entity.members = [node.qualname for node in nodes[:MEMBERS_SHOWN]]
        result.entities.append(entity)

    # --- YAML registries --------------------------------------------------------------

    def _place_yaml(
        self,
        change: FileChange,
        old: bytes | None,
        old_lines: list[int],
        new_lines: list[int],
        result: FilePlacement,
    ) -> None:
        path = change.path
        outside: list[str] = []
        if new_lines:
            entries = [n for n in self.index.nodes_in_file(path) if n.kind in YAML_KINDS]
            new_text = (self.diff.new_side(change) or b"").split(b"\n")
            for line in new_lines:
                if not _yaml_code_line(new_text[line - 1]):
                    continue
                hit = [n for n in entries if n.line <= line <= n.end_line]
                if hit:
                    self._add(result, hit, path, line, f"its entry changed at line {line}")
                else:
                    outside.append(f"line {line}")
        if old_lines and old is not None:
            old_file = self._old_file(change, "yaml", old)
            entries_old = [f for f in old_file.nodes[1:] if f.kind in YAML_KINDS]
            old_text = old.split(b"\n")
            for line in old_lines:
                if not _yaml_code_line(old_text[line - 1]):
                    continue
                hit = [f for f in entries_old if f.line <= line <= f.end_line]
                for fact in hit:
                    self._map_old(change, fact, line, result, "entry changed")
                if not hit:
                    outside.append(f"base line {line}")
        if outside:
            result.everything = (
                f"{path} changed outside any entry ({', '.join(outside[:3])}): "
                "the registry as a whole may change"
            )
