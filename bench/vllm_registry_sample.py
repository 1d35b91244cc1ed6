"""Sample vLLM model and quantization files for the registry measurement (docs/performance.md).

Drawn from the tree's own tables, with a fixed seed, before any registry code exists:
model files are the modules vllm/model_executor/models/registry.py names in its
("module", "Class") tables; quantization files are those defining the config classes
get_quantization_config's method table maps to. Usage: python bench/vllm_registry_sample.py TREE
"""

from __future__ import annotations

import ast
import random
import sys
from pathlib import Path

SEED = 38


def model_files(tree: Path) -> list[str]:
    registry = tree / "vllm/model_executor/models/registry.py"
    files: set[str] = set()
    for node in ast.walk(ast.parse(registry.read_text())):
        if not isinstance(node, ast.Dict):
            continue
        for value in node.values:
            if not (isinstance(value, ast.Tuple) and len(value.elts) == 2):
                continue
            module = value.elts[0]
            if not (isinstance(module, ast.Constant) and isinstance(module.value, str)):
                continue
            name = module.value
            dotted = name if "." in name else f"vllm.model_executor.models.{name}"
            path = dotted.replace(".", "/")
            for candidate in (f"{path}.py", f"{path}/__init__.py"):
                if (tree / candidate).is_file():
                    files.add(candidate)
    return sorted(files)


def quant_files(tree: Path) -> list[str]:
    init = tree / "vllm/model_executor/layers/quantization/__init__.py"
    package = "vllm.model_executor.layers.quantization"
    func = next(
        n
        for n in ast.walk(ast.parse(init.read_text()))
        if isinstance(n, ast.FunctionDef) and n.name == "get_quantization_config"
    )
    where: dict[str, str] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            dotted = f"{package}.{module}" if node.level else module
            for alias in node.names:
                where[alias.asname or alias.name] = dotted
    used: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Dict):
            used |= {v.id for v in node.values if isinstance(v, ast.Name)}
    files: set[str] = set()
    for name in used:
        dotted = where.get(name)
        if dotted is None:
            continue
        path = dotted.replace(".", "/")
        for candidate in (f"{path}.py", f"{path}/__init__.py"):
            if (tree / candidate).is_file():
                files.add(candidate)
    return sorted(files)


def main() -> None:
    tree = Path(sys.argv[1])
    models, quants = model_files(tree), quant_files(tree)
    rng = random.Random(SEED)
    print(f"# {len(models)} model files, {len(quants)} quantization files, seed {SEED}")
    for path in sorted(rng.sample(models, 10)):
        print("model", path)
    for path in sorted(rng.sample(quants, 5)):
        print("quant", path)


if __name__ == "__main__":
    main()
