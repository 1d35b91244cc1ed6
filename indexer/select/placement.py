"""Each changed line of each changed file -> the graph entities it touches (or every
test, or none): the table of docs/selection.md, "From the diff to changed entities", in
code, for C++/CUDA, Python, YAML, tests and the files that load a library."""

from __future__ import annotations

import heapq
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from indexer.bindings.library import local_wrappers
from indexer.diff import Diff, FileChange, Hunk, run_git
from indexer.extract.context import stored_context
from indexer.extract.discover import is_test_file, wanted_language
from indexer.extract.extractor import load_extractors
from indexer.extract.pipeline import content_hash
from indexer.extract.source import SourceFile
from indexer.graph.facts import FileFacts, NodeFact
from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.harness import Manifest
from indexer.paths import is_header, is_utf8, language_of, matches_any, printable, under_any
from indexer.query.index import Index, Node
from indexer.select.model import READS_PATH, ChangedFile, Entity
from indexer.select.source_text import (
    CONTAINERS,
    Scope,
    Untokenizable,
    cpp_tree,
    error_lines,
    hunk_changes_code,
    hunk_spans,
    identifiers,
    outside_scope,
    tokens_for,
)

FUNCTION_KINDS = frozenset({NodeKind.CPP_FUNCTION.value, NodeKind.CUDA_KERNEL.value})
PYTHON_DEF_KINDS = frozenset(
    {
        NodeKind.PYTHON_FUNCTION.value,
        NodeKind.PYTHON_CLASS.value,
        NodeKind.OPINFO.value,
        NodeKind.TEST_FUNCTION.value,
        NodeKind.TEST_CLASS.value,
        NodeKind.TEST_UTILITY.value,
    }
)
MODULE_KINDS = frozenset({NodeKind.PYTHON_MODULE.value, NodeKind.TEST_FILE.value})
MEMBERS_SHOWN = 20  # qualnames listed for a group entity in reports
_DEFINE = re.compile(rb"^\s*#\s*define\s+([A-Za-z_]\w*)")
_PASTE = re.compile(rb"(\w*)\s*##\s*(\w*)")
_WORD = re.compile(rb"[A-Za-z_]\w*")
LOADS_LIBRARY = "loads-library"  # kind of an entity placed for a change to load-time code
# Decorators that compile the body they decorate at once: ``torch.jit.script`` (and
# ``jit.script``) on a function or class runs the TorchScript compiler on its source when
# the module is imported, so a body change that does not compile fails the import.
COMPILING_DECORATORS = frozenset({"script"})
# What a registration block's line makes: placed at it rather than at the block.
REGISTERED_KINDS = frozenset(
    {NodeKind.OP.value, NodeKind.BINDING.value, NodeKind.REGISTRATION.value}
)
HEADER_EVERYTHING_FILES = 1000  # includers beyond which a header change runs everything
__all__ = ["FUNCTION_KINDS", "FilePlacement", "Placer", "categorize", "is_cuda_path"]
YAML_KINDS = frozenset({NodeKind.OP.value, NodeKind.DERIVATIVE.value})
CUDA_DIRS = frozenset({"cuda", "cudnn", "miopen"})
# Run-everything outranks code outranks nothing, when a rename spans two categories.
_RANK = {"run-everything": 4, "other": 3, "cpp": 2, "cuda": 2, "python": 2, "yaml": 2, "test": 1}


@dataclass
class FilePlacement:
    changed: ChangedFile
    entities: list[Entity] = field(default_factory=list)
    test_files: dict[str, str] = field(default_factory=dict)  # selected as such -> why
    everything: str | None = None  # why this file selects every test
    notes: list[str] = field(default_factory=list)
    mapped: set[tuple] = field(default_factory=set)  # base definitions already placed
    _placed: set[int] = field(default_factory=set, repr=False)
    _placed_upto: int = field(default=0, repr=False)

    def placed_ids(self) -> set[int]:
        """The node ids of the entities so far. Entities are only ever appended, so the
        set is extended with the new ones rather than rebuilt: placing a file of N
        definitions stays linear."""
        for entity in self.entities[self._placed_upto :]:
            self._placed.update(entity.node_ids)
        self._placed_upto = len(self.entities)
        return self._placed


def innermost(nodes: list, line: int):
    best = None
    for node in nodes:
        if node.line <= line <= node.end_line and (
            best is None or node.end_line - node.line < best.end_line - best.line
        ):
            best = node
    return best


def innermost_each(nodes: Iterable, lines: Iterable[int]) -> dict[int, object]:
    """``innermost(nodes, line)`` for every line at once, in one sweep: O((N + L) log N)
    where a lookup per line costs O(N) (a new file of N functions changes N lines)."""
    ordered = sorted(enumerate(nodes), key=lambda item: item[1].line)
    found: dict[int, object] = {}
    open_spans: list[tuple[int, int, object]] = []  # (end_line, list position, node): a heap
    next_start = 0
    for line in sorted(set(lines)):
        while next_start < len(ordered) and ordered[next_start][1].line <= line:
            position, node = ordered[next_start]
            heapq.heappush(open_spans, (node.end_line, position, node))
            next_start += 1
        while open_spans and open_spans[0][0] < line:
            heapq.heappop(open_spans)
        # Every span left holds the line; as many as nest there (a handful). The
        # shortest wins, the earliest listed among equals, as in ``innermost``.
        best = min(
            open_spans, key=lambda span: (span[2].end_line - span[2].line, span[1]), default=None
        )
        found[line] = best[2] if best is not None else None
    return found


def lines_within(lines: Sequence[int], first: int, last: int) -> Sequence[int]:
    """The lines of sorted ``lines`` in [first, last]."""
    return lines[bisect_left(lines, first) : bisect_right(lines, last)]


def new_span(hunk) -> tuple[int, int]:
    """First and last line of a hunk's new side (for a pure deletion, the lines around
    the gap: the body holding both holds it)."""
    if hunk.new_count:
        return hunk.new_start, hunk.new_start + hunk.new_count - 1
    return hunk.new_start + 1, hunk.new_start


@dataclass
class OldFile:
    nodes: list[NodeFact]  # node 0 is the file
    error: str | None = None


class OldSide:
    """Extracts base versions of files and finds their definitions in the index."""

    def __init__(self, manifest: Manifest, index: Index) -> None:
        self.manifest = manifest
        self.index = index
        self._extractors = None
        self._context = None

    def extract(self, path: str, language: str, data: bytes) -> OldFile:
        if self._extractors is None:
            self._extractors = load_extractors(self.manifest)
            self._context = stored_context(self.index.meta)
        facts = FileFacts(path, language, content_hash(data), len(data))
        facts.add_node(NodeKind.FILE.value, path.rsplit("/", 1)[-1], path, 1, 1, None)
        src = SourceFile(path, data, language, self._context)
        problems = []
        for extractor in self._extractors:
            if not extractor.wants(src):
                continue
            try:
                extractor.extract(src, facts)
            except Exception as exc:  # the old side is advisory: report, do not stop
                problems.append(f"{extractor.name}: {type(exc).__name__}: {exc}")
        return OldFile(facts.nodes, "; ".join(problems) or None)

    def find(self, fact: NodeFact, path: str) -> list[Node]:
        """Index nodes for an old definition: same file first, then anywhere."""
        candidates = [
            node
            for node in self.index.find(fact.qualname, [fact.kind])
            if node.qualname == fact.qualname
        ]
        signature = fact.attrs.get("signature")
        if signature is not None:
            exact = [node for node in candidates if node.attrs.get("signature") == signature]
            candidates = exact or candidates
        here = [node for node in candidates if node.path == path]
        return here or candidates

    def users_of(self, name: str) -> list[Node]:
        """Nodes whose code names ``name`` (by its last identifier): the users of a
        definition that no longer exists."""
        rows = self.index.conn.execute(
            "SELECT DISTINCT src_id FROM refs WHERE target_key = ?", (name,)
        ).fetchall()
        return self.index.nodes(row[0] for row in rows)


def define_lines(data: bytes) -> dict[int, str]:
    """Line -> the name of the ``#define`` it belongs to (continuation lines included)."""
    found: dict[int, str] = {}
    current: str | None = None
    for number, text in enumerate(data.split(b"\n"), 1):
        if current is None:
            match = _DEFINE.match(text)
            if match:
                current = match.group(1).decode("ascii")
        if current is not None:
            found[number] = current
            if not text.rstrip().endswith(b"\\"):
                current = None
    return found


def changed_macros(
    sides: list[tuple[bytes | None, set[int]]],
) -> set[str] | None:
    """The macros whose ``#define`` holds every changed line of each (text, lines) side;
    None when some changed line is not in one."""
    names: set[str] = set()
    for data, lines in sides:
        if not lines:
            continue
        if data is None:
            return None
        table = define_lines(data)
        for line in lines:
            if line not in table:
                return None
            names.add(table[line])
    return names or None


def _bodies(data: bytes) -> dict[str, bytes]:
    """Each ``#define``'s name -> its text (all its lines)."""
    lines = data.split(b"\n")
    bodies: dict[str, list[bytes]] = {}
    for number, name in define_lines(data).items():
        bodies.setdefault(name, []).append(lines[number - 1])
    return {name: b"\n".join(text) for name, text in bodies.items()}


def macro_users(
    index: Index,
    read: Callable[[str], bytes | None],
    header: str,
    includers: set[str],
    names: set[str],
    evidence: str,
) -> list[Entity] | None:
    """The entities a change to the macros ``names`` of ``header`` affects (see the module
    docstring); None when token pasting could build one of the names."""
    files = {path: read(path) for path in sorted({header, *includers})}
    bodies: dict[str, bytes] = {}
    for data in files.values():
        if data is None:
            continue
        for name, body in _bodies(data).items():
            bodies[name] = bodies.get(name, b"") + b"\n" + body
    for body in bodies.values():
        for left, right in _PASTE.findall(body):
            left_text, right_text = left.decode("ascii"), right.decode("ascii")
            if any(
                (left_text and name.startswith(left_text))
                or (right_text and name.endswith(right_text))
                for name in names
            ):
                return None
    closed = set(names)
    grew = True
    while grew:  # macros whose bodies spell a changed name are changed too
        grew = False
        for name, body in bodies.items():
            if name not in closed and closed & {w.decode("ascii") for w in _WORD.findall(body)}:
                closed.add(name)
                grew = True
    spelled = re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in closed) + rb")\b")
    users: dict[int, str] = {}
    whole: list[str] = []
    for path, data in files.items():
        if data is None:
            whole.append(path)  # unreadable: it may use them anywhere
            continue
        if spelled.search(data) is None:
            continue
        nodes = index.nodes_in_file(path)
        functions = [node for node in nodes if node.kind in FUNCTION_KINDS]
        defines = define_lines(data)
        outside = False
        for number, text in enumerate(data.split(b"\n"), 1):
            if number in defines or spelled.search(text) is None:
                continue
            function = innermost(functions, number)
            if function is None:
                outside = True
                break
            users[function.id] = function.qualname
        if outside:
            whole.append(path)
    entities = []
    shown = ", ".join(sorted(names)[:5])
    if users:
        entities.append(
            Entity(
                f"users of {shown}",
                "group",
                evidence,
                f"macro {shown} changed in a header: the functions spelling it (or a macro "
                "using it) in the files including the header",
                list(users),
                members=sorted(users.values())[:MEMBERS_SHOWN],
            )
        )
    if whole:
        ids = [
            node.id for path in whole for node in index.nodes_in_file(path) if node.kind != "file"
        ]
        entities.append(
            Entity(
                f"everything in {len(whole)} files using {shown} outside functions",
                "group",
                evidence,
                f"macro {shown} changed in a header and used outside functions there",
                ids,
                members=sorted(whole)[:MEMBERS_SHOWN],
            )
        )
    return entities


def library_macros(manifest: Manifest, *texts: bytes | None) -> set[str]:
    """The macros opening a registration block (``TORCH_LIBRARY_FRAGMENT(ns, m) {``): the
    manifest's, and those ``texts`` define as one (``#define W(N, M) TORCH_LIBRARY(N, M)``,
    as vLLM's registration.h does), as the registration extractor reads them."""
    macros = manifest.list("bindings", "torch_library_macros") + manifest.list(
        "bindings", "registration_wrappers"
    )
    wrappers = [name for text in texts if text for name in local_wrappers(text, macros)]
    return {*macros, *wrappers}


def _block_macro(node, source: bytes, macros: set[str]) -> str | None:
    """The macro of a registration block (it parses as a function definition), else None."""
    declarator = node.child_by_field_name("declarator")
    if declarator is None or declarator.type != "function_declarator":
        return None
    name = declarator.child_by_field_name("declarator")
    if name is None or name.type != "identifier":
        return None
    text = source[name.start_byte : name.end_byte].decode("utf-8", "replace")
    return text if text in macros else None


def _lambda_interiors(node) -> list[tuple[int, int]]:
    """1-based line spans strictly inside the bodies of the lambdas under ``node``: a
    kernel written in place runs when the op is called, not when the block registers it."""
    spans = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "lambda_expression":
            body = current.child_by_field_name("body")
            if body is not None and body.end_point[0] - body.start_point[0] > 1:
                spans.append((body.start_point[0] + 2, body.end_point[0]))
        stack.extend(current.children)
    return spans


def _calls_code(declaration) -> bool:
    """Whether a namespace-scope declaration's initializer runs code: a call in its value,
    or constructor arguments (``static Foo foo(1, 2);``). constexpr/constinit ones are
    evaluated by the compiler."""
    for child in declaration.children:
        if child.type == "type_qualifier" and child.text in (b"constexpr", b"constinit"):
            return False
    for child in declaration.children:
        if child.type != "init_declarator":
            continue
        stack = [c for c in child.children if c.type != "identifier"]
        while stack:
            current = stack.pop()
            if current.type in ("call_expression", "argument_list", "new_expression"):
                return True
            stack.extend(current.children)
    return False


def load_time_lines(source: bytes, lines: Iterable[int], macros: set[str]) -> dict[int, str]:
    """Of ``lines`` (1-based) of a C++ file, those in code the library runs when it loads
    -> what that code is (``the registration block TORCH_LIBRARY_FRAGMENT(torchvision, m)``,
    ``the static initializer of registry``)."""
    wanted = set(lines)
    if not wanted:
        return {}
    found: dict[int, str] = {}
    stack = [cpp_tree(source).root_node]
    while stack:
        node = stack.pop()
        first, last = node.start_point[0] + 1, node.end_point[0] + 1
        hit = [line for line in wanted if first <= line <= last]
        if not hit:
            continue
        if node.type in CONTAINERS:
            stack.extend(node.children)
            continue
        what = None
        skipped: list[tuple[int, int]] = []
        if node.type == "function_definition":
            macro = _block_macro(node, source, macros)
            if macro is not None:
                head = node.child_by_field_name("declarator")
                shown = source[head.start_byte : head.end_byte].decode("utf-8", "replace")
                what = f"the registration block {shown}"
                skipped = _lambda_interiors(node)
        elif node.type == "declaration" and _calls_code(node):
            declarator = next((c for c in node.children if c.type == "init_declarator"), None)
            name = declarator.child_by_field_name("declarator") if declarator else None
            shown = name.text.decode("utf-8", "replace") if name is not None else "a variable"
            what = f"the static initializer of {shown}"
        if what is None:
            continue
        for line in hit:
            if not any(start <= line <= end for start, end in skipped):
                found[line] = what
    return found


@dataclass(frozen=True)
class LoaderLine:
    """A line of the tree's Python that loads its compiled library."""

    path: str
    line: int
    text: str


def loader_lines(source: Path, manifest: Manifest, indexed: Iterable[str]) -> list[LoaderLine]:
    """Lines of the package's indexed Python and of its tests holding one of the
    manifest's ``[python] library_loaders`` (``load_library(`` by default), definitions
    (``def load_library(``) and comments left out.

    Raises OSError when git cannot search the tree."""
    patterns = manifest.list("python", "library_loaders")
    if not patterns:
        return []
    args = ["grep", "-n", "-z", "-I", "-F", "--untracked", "--no-color"]
    for pattern in patterns:
        args += ["-e", pattern]
    result = run_git(source, *args, "--", "*.py", check=False)
    if result.returncode == 1:
        return []
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip().splitlines()
        raise OSError(f"git grep failed: {message[-1] if message else result.returncode}")
    indexed = set(indexed)
    roots = manifest.list("python", "packages")
    found = []
    for record in result.stdout.split(b"\n"):
        parts = record.split(b"\0", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        path = parts[0].decode("utf-8", "surrogateescape")
        text = parts[2].decode("utf-8", "replace").strip()
        if path not in indexed:
            continue
        if roots and not under_any(path, roots) and not is_test_file(path, manifest):
            continue  # a script or example beside the package loads a library of its own
        if text.startswith(("def ", "#")):
            continue
        found.append(LoaderLine(path, int(parts[1]), text))
    return found


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


class Placer:
    """Places the changed files of one diff onto one index."""

    _new_tokens: list | None = None  # the changed file's new side, when it tokenized
    _old_tokens: list | None = None
    _loaders: list[LoaderLine] | None = None  # Python lines loading the library
    _loaders_error: str | None = None

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
        """The old lines that need the base version extracted: a hunk strictly inside a
        function body on the new side whose old side keeps the braces balanced was in the
        same body at the base (that function, or the ops a registration block names)."""
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
        if macros:  # only macros changed: the code spelling them (``macro_users``)
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

    def _place_load_time(
        self,
        path: str,
        sides: list[tuple[bytes | None, list[int], str]],
        result: FilePlacement,
    ) -> None:
        """``sides``: (text, changed lines, how a line is shown) of the new and the old
        side of a C++ file."""
        macros = library_macros(self.manifest, *(text for text, _, _ in sides))
        changed: list[tuple[str, str]] = []
        for text, lines, shown in sides:
            if text is None or not lines:
                continue
            for line, what in sorted(load_time_lines(text, lines, macros).items()):
                changed.append((f"{shown} {line}", what))
        if not changed:
            return
        where, what = changed[0]
        runs = f"{path} {where} is in {what}, which runs when the library loads"
        if self._loaders is None:
            try:
                indexed = [p for p, row in self.files.items() if row[2] == "python"]
                self._loaders = loader_lines(self.diff.source, self.manifest, indexed)
            except OSError as exc:
                self._loaders, self._loaders_error = [], str(exc)
        if not self._loaders:
            why = (
                f"the Python loading it could not be looked for ({self._loaders_error})"
                if self._loaders_error
                else "no Python of the tree loads a library (none of the manifest's "
                f"[python] library_loaders: {self.manifest.list('python', 'library_loaders')})"
            )
            result.everything = f"{runs}, and {why}: any test may load it"
            return
        nodes = {}
        for loader in self._loaders:
            defs = [n for n in self.index.nodes_in_file(loader.path) if n.kind in PYTHON_DEF_KINDS]
            node = innermost(defs, loader.line)
            for found in [node] if node is not None else self._modules(loader.path):
                nodes.setdefault(found.id, found)
        folded = self._fold_registrations(result, macros)
        first = self._loaders[0]
        shown = [n.qualname for n in nodes.values()]
        result.entities.append(
            Entity(
                f"load-time code of {path} and what loads its library: " + ", ".join(shown),
                LOADS_LIBRARY,
                f"{path}:{where.rsplit(' ', 1)[-1]}",
                f"{runs}: a schema or registration that fails there stops the load, so "
                f"every importer of the code loading it fails ({first.text} @ "
                f"{first.path}:{first.line})",
                [*folded, *nodes],
                members=[*folded.values(), *shown][:MEMBERS_SHOWN],
            )
        )

    def _fold_registrations(self, result: FilePlacement, macros: set[str]) -> dict[int, str]:
        """Take the file's entities that are registration blocks, ops and registrations
        out of ``result`` (id -> qualname): they run, or are made, by load-time code, and
        any test running an op of the library loads it first, so the entity of what loads
        it stands for them, and their walk goes on from it. Left alone, an op no test
        calls would widen to everything."""
        opening = tuple(f"{macro}(" for macro in macros)
        ids = {node_id for entity in result.entities for node_id in entity.node_ids}
        nodes = {node.id: node for node in self.index.nodes(ids)}

        def registered(node_id: int) -> bool:
            node = nodes.get(node_id)
            if node is None:
                return False
            if node.kind in (NodeKind.OP.value, NodeKind.REGISTRATION.value):
                return True
            return node.kind in FUNCTION_KINDS and node.name.startswith(opening)

        folded: dict[int, str] = {}
        kept = []
        for entity in result.entities:
            if entity.node_ids and all(registered(node_id) for node_id in entity.node_ids):
                folded.update((node_id, nodes[node_id].qualname) for node_id in entity.node_ids)
            else:
                kept.append(entity)
        result.entities[:] = kept
        return folded
