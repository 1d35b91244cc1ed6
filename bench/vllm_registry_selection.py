"""Selection for the sampled vLLM model and quantization files (bench/vllm_registry_sample.py),
before and after the registry edges: run it once with each checkout's indexer on PYTHONPATH
and its own TORCHTALK_CACHE_DIR (an index of the clean tree, built by that checkout).

Each change is a statement added to ``__init__`` (else the first method) of the class the
registry names in that file (else the file's first class with a method): the code that
runs when the architecture or method is loaded. What a diff there selects is the impact
walk from that method (``torchtalk select`` places such a body change on the method and
walks from it); the bench asks the walk directly, through the ``affected`` answer with no
limit, so that it needs no index update per change (minutes each on vLLM under load).
Prints one JSON object per change: the test files reached, and how many came through a
registry (a ``registers`` hop in their chain).

    python bench/vllm_registry_selection.py --source TREE --sample SAMPLE.txt > OUT.jsonl
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

from indexer.answers.affected import affected
from indexer.build import build_index
from indexer.query.index import Index
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


def _changed(tree: Path, rel: str, registered: set[str]) -> str:
    """The qualified name of the method the change is made in."""
    module = ast.parse((tree / rel).read_bytes())
    classes = [n for n in module.body if isinstance(n, ast.ClassDef)]
    ordered = [c for c in classes if c.name in registered] + classes
    modname = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    for cls in ordered:
        methods = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if methods:
            method = next((m for m in methods if m.name == "__init__"), methods[0])
            return f"{modname}.{cls.name}.{method.name}"
    raise SystemExit(f"{rel}: no class with a method to change")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--sample", type=Path, required=True)
    args = parser.parse_args()
    source = args.source.resolve()
    workspace = Workspace.resolve(source)
    if not workspace.db_path.is_file():
        build_index(workspace, show_progress=False)
    index = Index(workspace.db_path)
    registered = _registered_names(source)
    for line in args.sample.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        group, rel = line.split()
        changed = _changed(source, rel, registered)
        started = time.perf_counter()
        answer = affected(index, [changed], limit=100_000)
        seconds = time.perf_counter() - started
        chains = {item.label: item.data["chain"] for item in answer.items if "chain" in item.data}
        through = sorted(
            path for path, chain in chains.items() if any(h["kind"] == "registers" for h in chain)
        )
        example = {
            path: [f"{h['src']} -{h['kind']}-> {h['dst']} @ {h['evidence']}" for h in chains[path]]
            for path in (through or sorted(chains))[:2]
        }
        print(
            json.dumps(
                {
                    "group": group,
                    "file": rel,
                    "changed": changed,
                    "selected": len(answer.data.get("test_files", [])),
                    "total": len(index.test_file_paths()),
                    "notes": answer.notes,
                    "through_registry": len(through),
                    "files": answer.data.get("test_files", []),
                    "through_registry_files": through,
                    "example_chains": example,
                    "seconds": round(seconds, 1),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
