"""Placing C++ and CUDA changes: function bodies, namespace-scope lines, headers.

A mixin of :class:`indexer.select.placement.Placer`, which provides ``index``,
``files``, ``diff`` and the shared helpers (``_add``, ``_old_file``, ``_map_old``,
``_everything_in``); this module holds what only C++ needs.
"""

from __future__ import annotations

from indexer.diff import FileChange, Hunk
from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.paths import is_header, language_of
from indexer.query.index import Node
from indexer.select.cpp_scope import Scope, error_lines, identifiers, outside_scope
from indexer.select.macro_users import changed_macros, macro_users
from indexer.select.model import Entity
from indexer.select.placed import (
    FUNCTION_KINDS,
    MEMBERS_SHOWN,
    FilePlacement,
    innermost_each,
    lines_within,
    new_span,
)
from indexer.select.tokens import cpp_tree

# What a registration block's line makes: placed at it rather than at the block.
REGISTERED_KINDS = frozenset(
    {NodeKind.OP.value, NodeKind.BINDING.value, NodeKind.REGISTRATION.value}
)
HEADER_EVERYTHING_FILES = 1000  # includers beyond which a header change runs everything


def _balanced(tokens: list, start: int, count: int) -> bool:
    """Whether the code tokens on lines [start, start + count) never close more braces
    than they open, and close all they open."""
    depth = 0
    for token in tokens:
        if token.comment or token.start < start or token.end >= start + count:
            continue
        depth += (token.text == "{") - (token.text == "}")
        if depth < 0:
            return False
    return depth == 0


class _Unparsed:
    """Whether a definition's span holds a line tree-sitter could not parse, asked once
    per definition (a changed file's lines ask it of the same few again and again)."""

    def __init__(self, broken: set[int]) -> None:
        self.lines = sorted(broken)
        self.known: dict[tuple[int, int], bool] = {}

    def within(self, node) -> bool:
        span = (node.line, node.end_line)
        if span not in self.known:
            self.known[span] = bool(lines_within(self.lines, *span))
        return self.known[span]


class CppPlacement:
    """C++/CUDA placement (see the module docstring for what the host class provides)."""

    _old_tokens: list | None = None

    def _place_cpp(
        self,
        change: FileChange,
        old: bytes | None,
        new: bytes | None,
        old_lines: list[int],
        new_lines: list[int],
        result: FilePlacement,
        code: list[Hunk] | None = None,
    ) -> None:
        path = change.path
        scope = Scope()
        file_wide: list[str] = []
        outside_new: set[int] = set()
        outside_old: set[int] = set()
        new_nodes: list[Node] = []
        if new_lines and new is not None:
            new_nodes = self.index.nodes_in_file(path)
            functions = [node for node in new_nodes if node.kind in FUNCTION_KINDS]
            tree = cpp_tree(new)
            broken = error_lines(tree, new)
            holder = innermost_each(functions, new_lines)
            registered_at = self._registered_at(
                path, new_nodes, [line for line in new_lines if holder[line] is not None]
            )
            unparsed = _Unparsed(broken)
            for line in new_lines:
                function = holder[line]
                if line in broken or (function is not None and unparsed.within(function)):
                    file_wide.append(f"line {line} is in code tree-sitter cannot fully parse")
                registered = registered_at.get(line, [])
                for node, at, reason in registered:
                    self._add(result, [node], path, at, reason)
                if function is not None and not registered:
                    self._add(result, [function], path, line, f"changed line {line} is in its body")
                elif function is None:
                    outside_new.add(line)
            if outside_new:
                scope.merge(outside_scope(tree, outside_new))
                self._at_lines(path, new_nodes, outside_new, result)
            old_lines = self._outside_kept_bodies(
                path, new_nodes, functions, code or [], old_lines, result, registered_at
            )
        if old_lines and old is not None:
            language = language_of(change.old_path or path)
            old_file = self._old_file(change, language, old)
            old_tree = cpp_tree(old)
            broken = error_lines(old_tree, old)
            if old_file.error:
                file_wide.append(f"the base version could not be extracted ({old_file.error})")
            functions = [fact for fact in old_file.nodes[1:] if fact.kind in FUNCTION_KINDS]
            holder = innermost_each(functions, old_lines)
            unparsed = _Unparsed(broken)
            outside_old: set[int] = set()
            for line in old_lines:
                fact = holder[line]
                if line in broken or (fact is not None and unparsed.within(fact)):
                    file_wide.append(f"base line {line} is in code tree-sitter cannot fully parse")
                if fact is not None:
                    self._map_old(change, fact, line, result, "deleted or replaced line")
                else:
                    outside_old.add(line)
            if outside_old:
                scope.merge(outside_scope(old_tree, outside_old))
                outside = sorted(outside_old)
                for fact in old_file.nodes[1:]:
                    if fact.kind not in FUNCTION_KINDS and lines_within(
                        outside, fact.line, fact.end_line
                    ):
                        self._map_old(change, fact, fact.line, result, "changed definition")
        if (
            not (outside_new or scope.names or scope.undecidable or scope.unplaced)
            and not file_wide
        ):
            return
        lines_outside = sorted(outside_new) or old_lines
        first = lines_outside[0] if lines_outside else 1
        file_wide += scope.undecidable
        if scope.unplaced and not result.entities:
            file_wide.append(f"namespace-scope statement at line {scope.unplaced[0]}")
        if is_header(path):
            macros = None if file_wide else changed_macros([(new, outside_new), (old, outside_old)])
            self._header(change, scope, file_wide, first, new_nodes, result, macros)
            return
        if file_wide:
            self._everything_in(path, "; ".join(dict.fromkeys(file_wide)), first, result)
            return
        self._mentions(path, new, scope.names, first, new_nodes, result)

    def _registered_at(
        self, path: str, nodes: list[Node], lines: list[int]
    ) -> dict[int, list[tuple[Node, int, str]]]:
        """For each of ``lines``: a line of a registration block (``TORCH_LIBRARY(_C, ops)
        { ops.def(...); }`` parses as a function) that defines an op or binding, or makes
        its registration edge, is that op or binding: the block runs the line to register
        it alone. Lines that register nothing are left out."""
        found: dict[int, list[tuple[Node, int, str]]] = {}
        ordered = sorted(lines)
        for node in nodes:
            if node.kind in REGISTERED_KINDS:
                for line in lines_within(ordered, node.line, node.end_line):
                    found.setdefault(line, []).append(
                        (node, line, f"changed line {line} defines it")
                    )
        for node, line, reason in self._edges_made_at(path, ordered):
            if node.kind in REGISTERED_KINDS:
                found.setdefault(line, []).append((node, line, reason))
        return found

    def _outside_kept_bodies(
        self,
        path: str,
        nodes: list[Node],
        functions: list[Node],
        code: list[Hunk],
        old_lines: list[int],
        result: FilePlacement,
        registered_at: dict[int, list[tuple[Node, int, str]]],
    ) -> list[int]:
        """The old lines that need the base version extracted.

        A hunk strictly inside a function body on the new side (its header before the
        hunk and its closing brace after it, both unchanged) was inside the same body at
        the base too, provided its old side keeps the braces balanced: those old lines
        are that function, no base extraction needed (the costly part on big files), or,
        in a registration block, the ops they name.
        """
        tokens = self._old_tokens
        if tokens is None:
            return old_lines
        settled: set[int] = set()
        for hunk in code:
            if not hunk.old_count:
                continue
            first, last = new_span(hunk)
            body = [f for f in functions if f.line < first and last < f.end_line]
            if not body or not _balanced(tokens, hunk.old_start, hunk.old_count):
                continue
            function = min(body, key=lambda f: f.end_line - f.line)
            settled.update(hunk.old_lines)
            registering = bool(hunk.new_count) and all(
                registered_at.get(line) for line in hunk.new_lines
            )
            named = self._registered_by_name(nodes, tokens, hunk.old_lines) if registering else []
            if named:
                reason = f"base line {hunk.old_start} of its registration block names it"
                self._add(result, named, path, hunk.old_start, reason)
                continue
            reason = f"base lines {hunk.old_start}-{hunk.old_start + hunk.old_count - 1} in its body changed"
            self._add(result, [function], path, function.line, reason)
        return [line for line in old_lines if line not in settled]

    @staticmethod
    def _registered_by_name(nodes: list[Node], tokens: list, lines: list[int]) -> list[Node]:
        """For a hunk whose new lines register ops: the ops or bindings of the file that
        its base lines name (``ops.impl("rms_norm", ...)``; the op may be defined in
        another block of the file), when every base line with code names one; else []."""
        registered: dict[str, list[Node]] = {}
        for node in nodes:
            if node.kind in REGISTERED_KINDS:
                registered.setdefault(node.name, []).append(node)
        if not registered:
            return []
        found: list[Node] = []
        for line in lines:
            on_line = [t for t in tokens if t.start <= line <= t.end and not t.comment]
            words = identifiers(" ".join(t.text for t in on_line).encode())  # "x(...)"
            names = sorted(words.intersection(registered))
            hits = [node for name in names for node in registered[name]]
            if on_line and not hits:
                return []  # a line of other code: the block as a whole
            found += hits
        return list({node.id: node for node in found}.values())

    def _at_lines(
        self, path: str, nodes: list[Node], lines: set[int], result: FilePlacement
    ) -> None:
        """Definitions made on changed namespace-scope lines (a stub, an op schema, a
        binding) and the users of edges evidenced there (a registration's op or stub)."""
        for node, line, reason in self._made_at(path, nodes, lines):
            self._add(result, [node], path, line, reason)

    def _made_at(
        self, path: str, nodes: list[Node], lines: set[int]
    ) -> list[tuple[Node, int, str]]:
        """(node, line, why) for what the lines define other than functions, and for the
        non-function users of the edges they evidence."""
        made = []
        ordered = sorted(lines)
        for node in nodes:
            if node.kind in FUNCTION_KINDS or node.kind == "file":
                continue
            hit = lines_within(ordered, node.line, node.end_line)
            if hit:
                made.append((node, hit[0], f"changed line {hit[0]} defines it"))
        return made + self._edges_made_at(path, ordered)

    def _edges_made_at(self, path: str, lines: list[int]) -> list[tuple[Node, int, str]]:
        """(node, line, why) for the non-function sources of the edges made at ``lines``."""
        made = []
        file_id = self.files[path][0]
        for start in range(0, len(lines), 900):
            batch = lines[start : start + 900]
            rows = self.index.conn.execute(
                "SELECT DISTINCT e.src_id, e.line, e.kind FROM edges e"
                f" WHERE e.file_id = ? AND e.line IN ({','.join('?' * len(batch))})",
                [file_id, *batch],
            ).fetchall()
            srcs = {node.id: node for node in self.index.nodes(row[0] for row in rows)}
            for src, line, kind in sorted(rows, key=lambda row: (row[1], row[0], row[2])):
                node = srcs.get(src)
                if node is not None and node.kind != "file":
                    made.append((node, line, f"its {kind} edge is made at changed line {line}"))
        return made

    def _mentions(
        self,
        path: str,
        new: bytes | None,
        names: set[str],
        line: int,
        nodes: list[Node],
        result: FilePlacement,
    ) -> list[Node]:
        """Functions of ``path`` that mention one of ``names``."""
        if not names or new is None:
            return []
        text = new.split(b"\n")
        users = []
        for node in nodes or self.index.nodes_in_file(path):
            if node.kind not in FUNCTION_KINDS:
                continue
            body = b"\n".join(text[node.line - 1 : node.end_line])
            if names & identifiers(body):
                users.append(node)
        shown = ", ".join(sorted(names)[:5]) + (" ..." if len(names) > 5 else "")
        if users:
            self._add(result, users, path, line, f"mentions {shown}, changed at line {line}")
        elif not is_header(path):  # a header's names are its includers' business
            result.notes.append(
                f"{path}:{line}: the changed names ({shown}) are used by no function of the file"
            )
        return users

    def _header(
        self,
        change: FileChange,
        scope: Scope,
        file_wide: list[str],
        line: int,
        nodes: list[Node],
        result: FilePlacement,
        macros: set[str] | None = None,
    ) -> None:
        path = change.path
        if file_wide:
            self._everything_in(path, "; ".join(dict.fromkeys(file_wide)), line, result)
        else:
            self._mentions(path, self.diff.new_side(change), scope.names, line, nodes, result)
        includers = self._includers(path)
        if len(includers) > HEADER_EVERYTHING_FILES:
            result.everything = (
                f"{path} is a header changed outside any function and {len(includers)} files "
                f"include it (more than {HEADER_EVERYTHING_FILES}): running everything rather "
                "than walking from all of them"
            )
            return
        if not includers:
            result.everything = (
                f"{path} is a header changed outside any function and no indexed file "
                "includes it: its users are outside the index"
            )
            return
        if macros:  # only macros changed: the code spelling them (indexer.select.macro_users)
            entities = macro_users(
                self.index, self._new_bytes, path, includers, macros, f"{path}:{line}"
            )
            if entities is not None:
                result.entities += entities
                if not entities:
                    result.notes.append(
                        f"{path}:{line}: the changed macros ({', '.join(sorted(macros))}) are"
                        " spelled by no code of the files including the header"
                    )
                return
        ids = self._ids_in_files(includers)
        result.entities.append(
            Entity(
                f"everything in {len(includers)} files including {path}",
                "group",
                f"{path}:{line}",
                "header changed outside any function: every file that includes it, "
                f"transitively (e.g. {', '.join(sorted(includers)[:3])})",
                ids,
                members=sorted(includers)[:MEMBERS_SHOWN],
            )
        )

    def _new_bytes(self, path: str) -> bytes | None:
        try:
            return (self.diff.source / path).read_bytes()
        except OSError:
            return None

    def _includers(self, path: str) -> set[str]:
        """Files including ``path``, transitively (reverse ``includes`` edges)."""
        file_nodes = [n.id for n in self.index.nodes_in_file(path, ["file"])]
        reached = self.index.walk(file_nodes, "in", [EdgeKind.INCLUDES.value])
        nodes = self.index.nodes(node_id for node_id in reached if node_id not in file_nodes)
        return {node.path for node in nodes}

    def _ids_in_files(self, paths: set[str]) -> list[int]:
        ids: list[int] = []
        ordered = sorted(paths)
        for start in range(0, len(ordered), 900):
            batch = ordered[start : start + 900]
            ids.extend(
                row[0]
                for row in self.index.conn.execute(
                    "SELECT n.id FROM nodes n JOIN files f ON f.id = n.file_id"
                    f" WHERE n.kind != 'file' AND f.path IN ({','.join('?' * len(batch))})",
                    batch,
                )
            )
        return ids
