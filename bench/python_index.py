"""Python-index figures on a real tree, measured in one run.

    python bench/python_index.py [--source PATH] [--harness NAME] [--jobs N]
                                 [--cache DIR] [--no-build]

1. Extraction speed: the Python extractor over every Python file the harness indexes,
   in this process, against a bare ``ast.parse`` of the same bytes in the same run (the
   floor: the extractor parses once, then walks the tree). Files are read into memory
   first, so both timings exclude disk reads.
2. Counts and timings of a build with the harness restricted to its Python side (the
   C++/CUDA directories emptied; the op registry YAML kept, so references into ops
   resolve): test files, test functions, OpInfo entries, nodes and edges by kind, and the
   link statistics of the ``py``, ``opinfo`` and ``fixture`` resolvers.

Defaults: the PyTorch corpus and the ``pytorch`` harness. Prints JSON, then the Markdown
rows docs/performance.md quotes.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_SOURCE = Path.home() / ".cache" / "torchtalk-corpora" / "pytorch-2.6"


def python_entries(source: Path, manifest):
    from indexer.extract.discover import discover

    return [entry for entry in discover(source, manifest) if entry.language == "python"]


def extraction_speed(source: Path, manifest, entries) -> dict:
    from indexer.extract.source import SourceFile
    from indexer.graph.facts import FileFacts
    from indexer.python.extractor import PythonExtractor

    max_bytes = manifest.get("sources", "max_file_bytes", 4_000_000)
    blobs = [
        (entry, (source / entry.path).read_bytes()) for entry in entries if entry.size <= max_bytes
    ]
    started = time.perf_counter()
    failures = 0
    for _, data in blobs:
        try:
            ast.parse(data)
        except (SyntaxError, ValueError):
            failures += 1
    bare = time.perf_counter() - started
    extractor = PythonExtractor(manifest)
    nodes: Counter[str] = Counter()
    refs: Counter[str] = Counter()
    started = time.perf_counter()
    for entry, data in blobs:
        facts = FileFacts(entry.path, "python", "", len(data))
        facts.add_node("file", entry.path, entry.path, 1, data.count(b"\n") + 1, None)
        extractor.extract(SourceFile(entry.path, data, "python"), facts)
        nodes.update(node.kind for node in facts.nodes)
        refs.update(f"{ref.kind}/{ref.scheme}" for ref in facts.refs)
    full = time.perf_counter() - started
    return {
        "files": len(blobs),
        "bytes": sum(len(data) for _, data in blobs),
        "bare_ast_parse_s": round(bare, 2),
        "extract_s": round(full, 2),
        "extract_over_parse": round(full / bare, 2) if bare else None,
        "syntax_errors": failures,
        "nodes": dict(sorted(nodes.items())),
        "refs": dict(sorted(refs.items())),
    }


def python_only(manifest):
    """The harness with its C++/CUDA sources removed (YAML registries kept)."""
    data = {
        key: dict(value) if isinstance(value, dict) else value
        for key, value in manifest.data.items()
    }
    data["sources"] = {**data.get("sources", {}), "cpp": []}
    return replace(manifest, name=f"{manifest.name}-python-bench", data=data)


def build_counts(source: Path, manifest, jobs: int | None, cache: Path) -> dict:
    from indexer.build import build_index
    from indexer.query.index import Index
    from indexer.workspace import Workspace

    os.environ["TORCHTALK_CACHE_DIR"] = str(cache)
    workspace = Workspace(source, python_only(manifest), "bench")
    result = build_index(workspace, jobs=jobs, show_progress=False)
    index = Index(result.db_path)
    stats = index.meta_json("link_stats", {})
    counts = result.counts
    external_modules = index.conn.execute(
        "SELECT COUNT(DISTINCT src_id) FROM edges WHERE kind = 'external_ref'"
    ).fetchone()[0]
    return {
        "files": result.files,
        "timings": {key: round(value, 2) for key, value in result.timings.items()},
        "test_files": counts["nodes"].get("test_file", 0),
        "test_functions": counts["nodes"].get("test_function", 0),
        "test_classes": counts["nodes"].get("test_class", 0),
        "opinfos": counts["nodes"].get("opinfo", 0),
        "test_utilities": counts["nodes"].get("test_utility", 0),
        "external_ref_edges": counts["edges"].get("external_ref", 0),
        "modules_with_external_refs": external_modules,
        "nodes": counts["nodes"],
        "edges": counts["edges"],
        "link": {
            scheme: stats[scheme] for scheme in ("py", "opinfo", "fixture") if scheme in stats
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--harness", default=None, help="default: the tree's own choice")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--cache", type=Path, default=None, help="where the bench index goes")
    parser.add_argument("--no-build", action="store_true", help="extraction speed only")
    args = parser.parse_args()

    from indexer.workspace import Workspace

    source = args.source.resolve()
    manifest = Workspace.resolve(source, args.harness).manifest
    entries = python_entries(source, manifest)
    report: dict = {"source": str(source), "harness": manifest.name}
    report["extraction"] = extraction_speed(source, manifest, entries)
    if not args.no_build:
        with tempfile.TemporaryDirectory(prefix="torchtalk-python-bench-") as scratch:
            cache = args.cache or Path(scratch)
            report["build"] = build_counts(source, manifest, args.jobs, cache)
    print(json.dumps(report, indent=2))
    speed = report["extraction"]
    print()
    print(f"| Python files | {speed['files']} ({speed['bytes'] / 1e6:.1f} MB) |")
    print(
        f"| extraction, one process | {speed['extract_s']} s "
        f"({speed['extract_over_parse']}x a bare ast.parse: {speed['bare_ast_parse_s']} s) |"
    )
    if "build" in report:
        build = report["build"]
        print(
            f"| Python-only build, {build['files']} files | extract {build['timings']['extract_s']} s, "
            f"link {build['timings']['link_s']} s, total {build['timings']['total_s']} s |"
        )
        print(
            f"| test files / test functions / OpInfos | {build['test_files']} / "
            f"{build['test_functions']} / {build['opinfos']} |"
        )
        py = build["link"].get("py", {})
        if py:
            print(
                f"| py refs resolved | {py['resolved'] + py['ambiguous']} / {py['refs']} "
                f"({(py['resolved'] + py['ambiguous']) / max(py['refs'], 1):.0%}) |"
            )
        print(
            f"| external_ref edges | {build['external_ref_edges']} across "
            f"{build['modules_with_external_refs']} modules |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
