"""What a tree's own attribute macros change in its C++ index (issue 38).

    python bench/attribute_macros.py --source TREE --before CHECKOUT

The C++ files of TREE that use an attribute macro of the tree which indexer/cpp/preprocess.py
does not know by name (found by indexer/cpp/attribute_macros.py of this checkout) are
extracted twice, with the tree's context: by this checkout's code and by CHECKOUT's (a
checkout of the code before, e.g. ``git worktree add /tmp/before HEAD~1``), each in a
process of its own. Printed: the files, their parse errors before and after, and the
definitions only one side has (a mangled ``FOO_APItorch::Tensorf`` before, ``f`` after).
The figures are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFINITIONS = ("cpp_function", "cuda_kernel", "cpp_class")


def users(source: Path) -> list[str]:
    """The C++ files using a tree attribute macro preprocess does not know by name."""
    from indexer.build import tree_context
    from indexer.cpp import attribute_macros
    from indexer.extract.discover import discover
    from indexer.harness import select_manifest

    manifest, _ = select_manifest(source)
    entries = discover(source, manifest)
    tree = tree_context(source, manifest, entries).cpp_macros.attributes
    found = []
    for entry in entries:
        if entry.language in ("cpp", "cuda"):
            data = (source / entry.path).read_bytes()
            if attribute_macros.uses(data, attribute_macros.file_attributes(data, tree)):
                found.append(entry.path)
    return found


def extract(source: Path, paths: list[str]) -> dict[str, dict]:
    """Definitions and parse errors of ``paths``, by the code on sys.path."""
    from indexer.build import tree_context
    from indexer.extract.discover import discover
    from indexer.extract.pipeline import extract_all
    from indexer.harness import select_manifest

    manifest, _ = select_manifest(source)
    entries = discover(source, manifest)
    context = tree_context(source, manifest, entries)
    chosen = [entry for entry in entries if entry.path in set(paths)]
    return {
        facts.path: {
            "defs": sorted(f"{n.kind} {n.qualname}" for n in facts.nodes if n.kind in DEFINITIONS),
            "parse_errors": facts.parse_errors,
        }
        for facts in extract_all(source, manifest, chosen, 1, context)
    }


def _run(code: Path, source: Path, paths: list[str]) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as work:
        listing = Path(work) / "paths.json"
        listing.write_text(json.dumps(paths))
        env = {**os.environ, "PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}
        out = subprocess.run(
            [sys.executable, __file__, "--source", str(source), "--extract", str(listing)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return json.loads(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--before", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--extract", type=Path, help=argparse.SUPPRESS)  # the child's half
    args = parser.parse_args()
    if args.extract:
        print(json.dumps(extract(args.source, json.loads(args.extract.read_text()))))
        return 0
    sys.path.insert(0, str(ROOT))
    paths = users(args.source)
    print(f"{len(paths)} C++ files use an attribute macro of the tree not known by name")
    if not paths or args.before is None:
        return 0
    after = _run(ROOT, args.source, paths)
    before = _run(args.before, args.source, paths)
    gained = lost = 0
    for path in paths:
        new, old = set(after[path]["defs"]), set(before[path]["defs"])
        gained += len(new - old)
        lost += len(old - new)
        if new != old or after[path]["parse_errors"] != before[path]["parse_errors"]:
            print(
                f"  {path}: parse errors {before[path]['parse_errors']} -> "
                f"{after[path]['parse_errors']}; only after {sorted(new - old)[:4]}; "
                f"only before {sorted(old - new)[:4]}"
            )
    print(
        f"parse errors {sum(before[p]['parse_errors'] for p in paths)} -> "
        f"{sum(after[p]['parse_errors'] for p in paths)}; definitions only after: {gained}, "
        f"only before: {lost}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
