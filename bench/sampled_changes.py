"""Selection over sampled one-function changes of any tree: the run-everything rate, with
reasons, and the selected share of test files.

A statement is added to the body of a random C++/CUDA or Python function outside the
test directories (``(void)0;`` after the line opening a C++ body, ``_torchtalk_probe =
0`` before a Python body's first statement), the selection is made, the file restored.
Builds (or updates) the tree's index first, under TORCHTALK_CACHE_DIR if set. For a
before/after comparison, run it with each checkout's indexer on PYTHONPATH and its own
cache directory.

    python bench/sampled_changes.py --source PATH [--samples 60] [--seed 1]
"""

from __future__ import annotations

import argparse
import ast
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from indexer.build import build_index
from indexer.query.index import Index
from indexer.select_changes import select_changes
from indexer.workspace import Workspace

FUNCTIONS = ("cpp_function", "cuda_kernel", "python_function")


def _edit(path: Path, kind: str, start: int, end: int) -> bytes | None:
    """Add a statement to the body of the function at [start, end]; the original bytes,
    or None when there is no body to add it to."""
    original = path.read_bytes()
    lines = original.decode("utf-8", errors="surrogateescape").split("\n")
    if kind == "python_function":
        for node in ast.walk(ast.parse(original)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno == start:
                first = node.body[0]
                lines.insert(first.lineno - 1, " " * first.col_offset + "_torchtalk_probe = 0")
                break
        else:
            return None
    else:
        for number in range(start, min(end, len(lines))):
            if lines[number - 1].split("//", 1)[0].rstrip().endswith("{") and number < end - 1:
                lines.insert(number, "  (void)0;  // torchtalk bench")
                break
        else:
            return None
    path.write_bytes("\n".join(lines).encode("utf-8", errors="surrogateescape"))
    return original


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    source = args.source.resolve()
    dirty = subprocess.run(
        ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if dirty.strip():
        print(f"{source} has uncommitted changes; the bench needs a clean tree")
        return 1
    workspace = Workspace.resolve(source)
    build_index(workspace, show_progress=False)
    index = Index(workspace.db_path)
    tests = tuple(f"{d}/" for d in workspace.manifest.list("tests", "dirs"))
    rows = [
        row
        for row in index.conn.execute(
            "SELECT n.kind, n.qualname, f.path, n.line, n.end_line FROM nodes n"
            " JOIN files f ON f.id = n.file_id"
            f" WHERE n.kind IN ({','.join('?' * len(FUNCTIONS))}) ORDER BY f.path, n.line",
            FUNCTIONS,
        )
        if not row[2].startswith(tests) and row[4] > row[3]
    ]
    random.Random(args.seed).shuffle(rows)
    everything: list[tuple[str, str]] = []
    shares: list[float] = []
    seconds: list[float] = []
    for kind, qualname, rel, start, end in rows:
        if len(shares) + len(everything) >= args.samples:
            break
        path = source / rel
        original = _edit(path, kind, start, end)
        if original is None:
            continue
        try:
            started = time.perf_counter()
            selection = select_changes(workspace, None)
            seconds.append(time.perf_counter() - started)
        finally:
            path.write_bytes(original)
        if selection.everything:
            everything.append((qualname, selection.everything[0]))
        else:
            shares.append(len(selection.files) / max(1, selection.test_files_total))
    measured = len(shares) + len(everything)
    print(f"tree {source}: {measured} changes (seed {args.seed})")
    print(f"run everything: {len(everything)} of {measured}")
    for qualname, reason in everything:
        print(f"  {qualname}: {reason[:160]}")
    if shares:
        print(
            f"selected share of test files, the others: median {statistics.median(shares):.0%},"
            f" mean {statistics.mean(shares):.0%}"
        )
    print(f"select: median {statistics.median(seconds):.2f} s per change")
    return 0


if __name__ == "__main__":
    sys.exit(main())
