"""One-line mutations of a tree's code, placed by the index, chosen at random (seeded).

A mutation rewrites one line and nothing else, so the diff the selection reads is exactly
one hunk. Semantic operators (a flipped comparison, an off-by-one bound, a changed
constant, swapped operands, a negated condition, a removed statement) go inside function
bodies as the index knows them (tree-sitter's extents of C++/CUDA and Python
definitions); header-level ones change a macro body or a constant of a header; neutral
controls (a comment, trailing whitespace) must select nothing and fail nothing.

Lines holding string literals, comments only, or preprocessor directives inside bodies
are not mutated: a rewrite there tests the text, not the code.
"""

from __future__ import annotations

import io
import random
import re
import tokenize
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from indexer.errors import UsageError
from indexer.query.index import Index

FUNCTION_KINDS = ("cpp_function", "cuda_kernel", "python_function")
HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".cuh", ".inl")
CONTROL_KINDS = ("comment", "whitespace")


@dataclass(frozen=True)
class Mutation:
    id: str  # 'm007': position in the plan, stable for a seed
    path: str  # repo-relative
    line: int  # 1-based
    kind: str  # an operator name below, or a control
    old: str  # the line as it was (without its newline)
    new: str  # the line as mutated
    scope: str  # the function (qualname) or 'header' / 'macro NAME'

    @property
    def control(self) -> bool:
        return self.kind in CONTROL_KINDS

    def describe(self) -> str:
        return f"{self.kind} at {self.path}:{self.line} in {self.scope}"

    def to_dict(self) -> dict:
        return asdict(self)


# --- operators on one line of code ----------------------------------------------------
# Each takes the code part of a line (comment cut off) and its language, and returns the
# rewritten code part or None when it does not apply. Comparisons and arithmetic need
# spaces around the operator: `a < b`, not `vector<float>`, `->`, `<<` or `#include <x>`.

_COMPARISON = re.compile(r"(?<=\s)(<=|>=|==|!=|<|>)(?=\s)")
_FLIPPED = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}
_WIDENED = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_NUMBER = re.compile(r"(?<![\w.])(\d+)(\.\d*)?(?![\w.])")
_OPERAND = r"[A-Za-z_][\w.]*(?:\[[^\[\]]*\])?|\d+(?:\.\d+)?"
_SWAPPABLE = re.compile(rf"(?<![\w.\]])({_OPERAND}) ([-/]|<=|>=|<|>) ({_OPERAND})(?![\w.\[(])")
_CPP_CONDITION = re.compile(r"^(\s*(?:\}\s*else\s+)?(?:if|while)\s*)\((.*)\)(\s*\{?\s*)$")
_PY_CONDITION = re.compile(r"^(\s*(?:if|elif|while)\s+)(.+?)(:\s*)$")
# A call or an assignment (`f(x);`, `out[i] = v;`, `a->b += c;`), never a declaration:
# removing one of those only stops the build.
_CPP_STATEMENT = re.compile(
    r"^\s*[\w:]+(?:(?:\.|->)\w+|\[[^\]]*\])*\s*(?:\(|[-+*/|&^]?=(?!=)|\+\+|--).*;\s*$"
)
_PY_STATEMENT = re.compile(r"^\s*[\w.\[\]]+(\(.*\)|\s*[-+*/]?=\s*.+)\s*$")


def _first(pattern: re.Pattern, code: str, replace: Callable[[re.Match], str]) -> str | None:
    match = pattern.search(code)
    if match is None:
        return None
    return code[: match.start()] + replace(match) + code[match.end() :]


def flip_comparison(code: str, language: str) -> str | None:
    return _first(_COMPARISON, code, lambda m: _FLIPPED[m.group(1)])


def off_by_one(code: str, language: str) -> str | None:
    match = next((m for m in _COMPARISON.finditer(code) if m.group(1) in _WIDENED), None)
    if match is None:
        return None
    return code[: match.start()] + _WIDENED[match.group(1)] + code[match.end() :]


def change_constant(code: str, language: str) -> str | None:
    def bump(match: re.Match) -> str:
        whole, fraction = match.group(1), match.group(2)
        if fraction is not None:
            return f"{int(whole) + 1}{fraction}"
        return str(int(whole) + 1)

    return _first(_NUMBER, code, bump)


def swap_operands(code: str, language: str) -> str | None:
    match = _SWAPPABLE.search(code)
    if match is None or match.group(1) == match.group(3):
        return None
    left, op, right = match.groups()
    return code[: match.start()] + f"{right} {op} {left}" + code[match.end() :]


def negate_condition(code: str, language: str) -> str | None:
    if language == "python":
        match = _PY_CONDITION.match(code)
        return f"{match[1]}not ({match[2]}){match[3]}" if match else None
    match = _CPP_CONDITION.match(code)
    return f"{match[1]}(!({match[2]})){match[3]}" if match else None


def remove_statement(code: str, language: str) -> str | None:
    indent = code[: len(code) - len(code.lstrip())]
    if language == "python":
        if not _PY_STATEMENT.match(code) or code.lstrip().startswith(("return", "yield")):
            return None
        return f"{indent}pass"
    if not _CPP_STATEMENT.match(code) or code.lstrip().startswith(("return", "case ")):
        return None
    return f"{indent};"


SEMANTIC: dict[str, Callable[[str, str], str | None]] = {
    "flip_comparison": flip_comparison,
    "off_by_one": off_by_one,
    "change_constant": change_constant,
    "swap_operands": swap_operands,
    "negate_condition": negate_condition,
    "remove_statement": remove_statement,
}


def control(kind: str, line: str, language: str) -> str:
    if kind == "comment":
        marker = "#" if language == "python" else "//"
        return f"{line}  {marker} torchtalk audit: a neutral comment"
    return f"{line}   "  # whitespace


# --- where mutations can go ------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    text: str  # the whole line
    code: str  # the code part: comment cut off, trailing space kept out
    language: str  # cpp or python
    scope: str
    header_level: bool = False  # a macro body or a header constant, outside functions
    file_text: str = field(default="", repr=False, compare=False)  # the whole file


def _language(path: str) -> str:
    return "python" if path.endswith(".py") else "cpp"


def _python_quiet_lines(text: str) -> set[int]:
    """Lines a Python rewrite must not touch: strings (docstrings), and unparsable files."""
    quiet: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.STRING or token.type == getattr(
                tokenize, "FSTRING_START", -1
            ):
                quiet.update(range(token.start[0], token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return set(range(1, text.count("\n") + 2))
    return quiet


def _cpp_quiet_lines(lines: list[str]) -> set[int]:
    """Lines inside block comments, raw strings or continued macros (1-based)."""
    quiet: set[int] = set()
    in_block = continued = False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if in_block or continued or 'R"' in line:
            quiet.add(number)
        if "/*" in line and "*/" not in line.split("/*", 1)[1]:
            in_block = True
            quiet.add(number)
        elif in_block and "*/" in line:
            in_block = False
        continued = stripped.endswith("\\")
    return quiet


def code_part(line: str, language: str) -> str | None:
    """The line without its trailing comment, or None when it is not plain code."""
    stripped = line.strip()
    if not stripped or '"' in line or "'" in line:
        return None
    if language == "python":
        if stripped.startswith("#") or stripped.startswith("@"):
            return None
        return line.split("#", 1)[0].rstrip()
    if stripped.startswith(("//", "/*", "*", "#")):
        return None
    return line.split("//", 1)[0].split("/*", 1)[0].rstrip()


_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)(\([^)]*\))?\s+(.+?)\s*\\?$")
_HEADER_CONSTANT = re.compile(r"^\s*(?:static\s+|inline\s+)*(?:constexpr|const)\b.*=.*\d.*;")


def _body_sites(path: str, text: str, functions: list[tuple[int, int, str]]) -> list[Site]:
    lines = text.split("\n")
    language = _language(path)
    quiet = _python_quiet_lines(text) if language == "python" else _cpp_quiet_lines(lines)
    sites: list[Site] = []
    seen: set[int] = set()
    # Innermost first: a line of a nested function belongs to it, not to its parent.
    last = 1 if language == "python" else 0  # a C++ body's last line is its closing brace
    for start, end, scope in sorted(functions, key=lambda f: f[1] - f[0]):
        for number in range(start + 1, min(end + last, len(lines) + 1)):
            if number in seen or number in quiet:
                continue
            seen.add(number)
            code = code_part(lines[number - 1], language)
            if code:
                sites.append(
                    Site(path, number, lines[number - 1], code, language, scope, file_text=text)
                )
    return sites


def _header_sites(path: str, text: str, inside: set[int]) -> list[Site]:
    lines = text.split("\n")
    sites: list[Site] = []
    for number, line in enumerate(lines, 1):
        if number in inside or '"' in line or "'" in line or line.rstrip().endswith("\\"):
            continue
        define = _DEFINE.match(line)
        if define:
            sites.append(Site(path, number, line, line.rstrip(), "cpp", f"macro {define[1]}", True))
        elif _HEADER_CONSTANT.match(line):
            code = code_part(line, "cpp")
            if code:
                sites.append(Site(path, number, line, code, "cpp", "header constant", True))
    return sites


_LINE_RANGE = re.compile(r"^(?P<glob>.+):(?P<first>\d+)(?:-(?P<last>\d+))?$")


def path_filter(paths: Iterable[str]) -> Callable[[str, int | None], bool]:
    """What ``--paths`` admits: a glob, or ``GLOB:FIRST-LAST`` (``GLOB:LINE``) for those
    lines only, so one function can be audited without paying for its file's other lines
    (a header's mutation rebuilds every includer). Called with line None: whether any of
    the file may be mutated."""
    specs: list[tuple[str, int, int]] = []
    for spec in paths:
        match = _LINE_RANGE.match(spec)
        if match is None:
            specs.append((spec, 1, 0))
        else:
            first = int(match["first"])
            last = int(match["last"] or first)
            if last < first:
                raise UsageError(f"--paths {spec}: the line range ends before it starts")
            specs.append((match["glob"], first, last))

    def admits(path: str, line: int | None) -> bool:
        if not specs:
            return True
        for glob, first, last in specs:
            if not fnmatch(path, glob):
                continue
            if last == 0 or line is None or first <= line <= last:
                return True
        return False

    return admits


def mutation_sites(
    source: Path, index: Index, paths: Iterable[str], excluded: Callable[[str], bool]
) -> list[Site]:
    """Every line of the index's functions (and header-level lines) in files not
    ``excluded`` under the ``paths`` globs (all indexed code when empty); a glob with a
    ``:FIRST-LAST`` suffix admits those lines of its files only."""
    admits = path_filter(paths)
    rows = index.conn.execute(
        "SELECT f.path, n.kind, n.qualname, n.line, n.end_line FROM nodes n"
        " JOIN files f ON f.id = n.file_id WHERE f.language IN ('cpp', 'cuda', 'python')"
        " ORDER BY f.path, n.line"
    ).fetchall()
    by_file: dict[str, list[tuple[int, int, str]]] = {}
    for path, kind, qualname, line, end_line in rows:
        if excluded(path) or not admits(path, None):
            continue
        entries = by_file.setdefault(path, [])
        if kind in FUNCTION_KINDS and end_line > line:
            entries.append((line, end_line, qualname))
    sites: list[Site] = []
    for path, functions in sorted(by_file.items()):
        file = source / path
        if not file.is_file():
            continue
        text = file.read_text(encoding="utf-8", errors="surrogateescape")
        found = _body_sites(path, text, functions)
        if path.endswith(HEADER_SUFFIXES):
            inside = {n for start, end, _ in functions for n in range(start, end + 1)}
            found += _header_sites(path, text, inside)
        sites += [site for site in found if admits(path, site.line)]
    return sites


# --- the plan ---------------------------------------------------------------------------


def _apply_operator(site: Site, kind: str) -> str | None:
    if site.header_level and kind in ("negate_condition", "remove_statement"):
        return None
    new_code = SEMANTIC[kind](site.code, site.language)
    if new_code is None or new_code == site.code:
        return None
    return new_code + site.text[len(site.code) :]


def compiles(site: Site, new: str) -> bool:
    """Whether a Python file still compiles with ``new`` for the site's line: a rewritten
    continuation line (``pass`` inside a call's arguments) is a syntax error, which every
    test fails at import and no selection can place. C++ is left to the build."""
    if site.language != "python":
        return True
    lines = site.file_text.split("\n")
    lines[site.line - 1] = new
    try:
        compile("\n".join(lines), site.path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def plan(sites: list[Site], count: int, seed: int, controls: int | None = None) -> list[Mutation]:
    """``count`` mutations: a file at random, a line of it at random, an operator that
    applies there at random; about one in ten a neutral control (at least one of each
    kind when count allows), header-level lines in proportion to their files."""
    rng = random.Random(seed)
    controls = max(2, count // 10) if controls is None else controls
    controls = min(controls, count)
    by_file: dict[str, list[Site]] = {}
    for site in sites:
        by_file.setdefault(site.path, []).append(site)
    files = sorted(by_file)
    mutations: list[Mutation] = []
    used: set[tuple[str, int]] = set()
    attempts = 0
    control_slots = dict(
        zip(sorted(rng.sample(range(count), controls)), range(controls), strict=False)
    )
    while files and len(mutations) < count and attempts < count * 200:
        attempts += 1
        path = rng.choice(files)
        site = rng.choice(by_file[path])
        if (site.path, site.line) in used:
            continue
        slot = control_slots.get(len(mutations))
        if slot is not None:
            if site.code != site.text.rstrip():
                # Either control would rewrite the line's comment, and a comment may be
                # read: `# type: ignore[x]` is TorchScript's pragma only at the line end.
                continue
            kind = CONTROL_KINDS[slot % len(CONTROL_KINDS)]
            new = control(kind, site.text, site.language)
        else:
            kind = rng.choice(sorted(SEMANTIC))
            new = _apply_operator(site, kind)
            if new is None or not compiles(site, new):
                continue
        used.add((site.path, site.line))
        mutation_id = f"m{len(mutations) + 1:03d}"
        mutations.append(
            Mutation(mutation_id, site.path, site.line, kind, site.text, new, site.scope)
        )
    return mutations


def rewrite(data: bytes, mutation: Mutation) -> bytes:
    """The file's bytes with the mutation's line replaced; its line ending kept."""
    lines = data.split(b"\n")
    index = mutation.line - 1
    old = lines[index]
    ending = b"\r" if old.endswith(b"\r") else b""
    expected = mutation.old.encode("utf-8", "surrogateescape")
    if old.rstrip(b"\r") != expected.rstrip(b"\r"):
        raise ValueError(f"{mutation.path}:{mutation.line} is not the line the plan read")
    lines[index] = mutation.new.encode("utf-8", "surrogateescape").rstrip(b"\r") + ending
    return b"\n".join(lines)
