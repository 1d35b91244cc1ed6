"""What both MCP question generators read from a tree by regular expressions, once.

bench/mcp_question_gen.py (PyTorch) and bench/mcp_question_gen_vllm.py (vLLM) take their
truth from the files by another route than the index: C++ sources by path, where each
identifier is used, and the ``def test_*`` functions with their bodies. Nothing here
imports ``indexer``: a check that shared the index's parsing would not be a check.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path


def read_cpp(root: Path, tops: Iterable[str], suffixes: set[str]) -> dict[str, list[str]]:
    """Repo path -> lines of each file with one of ``suffixes`` under the folders ``tops``."""
    cpp: dict[str, list[str]] = {}
    for top in tops:
        for path in sorted((root / top).rglob("*")):
            if path.suffix in suffixes and path.is_file():
                cpp[path.relative_to(root).as_posix()] = path.read_text(
                    errors="replace"
                ).splitlines()
    return cpp


def word_index(cpp: dict[str, list[str]]) -> dict[str, set[str]]:
    """Identifier -> the files using it."""
    words: dict[str, set[str]] = defaultdict(set)
    for rel, lines in cpp.items():
        for word in set(re.findall(r"[A-Za-z_]\w*", "\n".join(lines))):
            words[word].add(rel)
    return words


def definitions_by_head(
    cpp: dict[str, list[str]],
    words: dict[str, set[str]],
    name: str,
    head: re.Pattern[str],
    accept: Callable[[str], bool],
    lookahead: int,
) -> list[str]:
    """file:line of each line that ``head`` matches in the files ``accept`` takes among
    those using ``name``, and that is a definition: its text reaches '{' before any ';'
    within ``lookahead`` lines (a declaration ends in ';')."""
    found = []
    for rel in sorted(words.get(name, ())):
        if not accept(rel):
            continue
        lines = cpp[rel]
        for number, line in enumerate(lines, 1):
            if not head.match(line) or line.startswith(("return", "#", "//")):
                continue
            rest = "\n".join(lines[number - 1 : number + lookahead])
            brace, semi = rest.find("{"), rest.find(";")
            if brace != -1 and (semi == -1 or brace < semi):
                found.append(f"{rel}:{number}")
    return found


def test_functions(
    root: Path, folder: str, *, async_defs: bool = False
) -> list[tuple[str, int, str, list[str]]]:
    """(file, line, name, body lines) of each ``def test_*`` under ``folder``, at any
    indentation; its body is the lines indented deeper than the ``def``."""
    head = re.compile(
        r"(\s*)(?:async )?def (test_\w+)\(" if async_defs else r"(\s*)def (test_\w+)\("
    )
    tests = []
    for path in sorted((root / folder).rglob("test_*.py")):
        rel = path.relative_to(root).as_posix()
        lines = path.read_text(errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            match = head.match(line)
            if match:
                indent = len(match.group(1))
                body = []
                for after in lines[number:]:
                    stripped = after.lstrip()
                    if stripped and len(after) - len(stripped) <= indent:
                        break
                    body.append(after)
                tests.append((rel, number, match.group(2), body))
    return tests


def make_question(
    corpus: str,
    prefix: str,
    kind: str,
    key: str,
    text: str,
    tool: str,
    args: dict,
    expect,
    why: str,
) -> dict:
    """One question: the call an agent makes first, and the truth read from the files."""
    return {
        "id": f"{prefix}-{kind}-{key}",
        "corpus": corpus,
        "kind": kind,
        "question": text,
        "call": {"tool": tool, "args": args},
        "expect": expect,
        "why": why,
    }
