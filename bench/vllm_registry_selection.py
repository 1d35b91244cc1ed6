"""Selection for the sampled vLLM model and quantization files (bench/vllm_registry_sample.py),
before and after the registry edges: run it once with each checkout's indexer on PYTHONPATH
and its own TORCHTALK_CACHE_DIR, over a writable clone of the tree.

Each change adds ``_torchtalk_probe = 0`` as the first statement of ``__init__`` (else the
first method) of the class the registry names in that file (else the file's first class
with a method): the code that runs when the architecture or method is loaded. The file is
restored after each selection. Prints one JSON object per change: the selected test files,
whether everything runs and why, and how many selected files came through a registry.

    python bench/vllm_registry_selection.py --source CLONE --sample SAMPLE.txt > OUT.jsonl
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

from indexer.build import build_index
from indexer.select_changes import select_changes
from indexer.workspace import Workspace


def _registered_names(tree: Path) -> set[str]:
    """Class names the model registry's pairs and the quantization method table name."""
    names: set[str] = set()
    for rel in (
        "vllm/model_executor/models/registry.py",
        "vllm/model_executor/layers/quantization/__init__.py",
    ):
        for node in ast.walk(ast.parse((tree / rel).read_text())):
            if isinstance(node, ast.Tuple) and len(node.elts) == 2:
                last = node.elts[1]
                if isinstance(last, ast.Constant) and isinstance(last.value, str):
                    names.add(last.value)
            elif isinstance(node, ast.Dict):
                names |= {v.id for v in node.values if isinstance(v, ast.Name)}
    return names


def _edit(path: Path, registered: set[str]) -> tuple[bytes, str]:
    original = path.read_bytes()
    module = ast.parse(original)
    classes = [n for n in module.body if isinstance(n, ast.ClassDef)]
    ordered = [c for c in classes if c.name in registered] + classes
    for cls in ordered:
        methods = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if not methods:
            continue
        method = next((m for m in methods if m.name == "__init__"), methods[0])
        first = method.body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
            and len(method.body) > 1
        ):
            first = method.body[1]  # after the docstring
        lines = original.decode().split("\n")
        lines.insert(first.lineno - 1, " " * first.col_offset + "_torchtalk_probe = 0")
        path.write_bytes("\n".join(lines).encode())
        return original, f"{cls.name}.{method.name}"
    raise SystemExit(f"{path}: no class with a method to change")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--sample", type=Path, required=True)
    args = parser.parse_args()
    source = args.source.resolve()
    dirty = subprocess.run(
        ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if dirty.strip():
        print(f"{source} has uncommitted changes; the bench needs a clean tree", file=sys.stderr)
        return 1
    workspace = Workspace.resolve(source)
    if not workspace.db_path.is_file():
        build_index(workspace, show_progress=False)
    registered = _registered_names(source)
    for line in args.sample.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        group, rel = line.split()
        path = source / rel
        original, changed = _edit(path, registered)
        try:
            selection = select_changes(workspace, "HEAD")
        finally:
            path.write_bytes(original)
        through = sorted(
            f.path
            for f in selection.files.values()
            if any(hop.kind == "registers" for r in f.reasons for hop in r.chain)
        )
        example = {}
        for f in sorted(selection.files.values(), key=lambda f: f.path)[:3]:
            if f.reasons and f.reasons[0].chain:
                example[f.path] = [
                    f"{h.src} -{h.kind}-> {h.dst} @ {h.evidence}" for h in f.reasons[0].chain
                ]
        print(
            json.dumps(
                {
                    "group": group,
                    "file": rel,
                    "changed": changed,
                    "everything": selection.everything[:2],
                    "selected": len(selection.files),
                    "total": selection.test_files_total,
                    "through_registry": len(through),
                    "files": sorted(selection.files),
                    "through_registry_files": through,
                    "example_chains": example,
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
