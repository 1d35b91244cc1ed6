"""Precise C++ mode on a real extension, measured in one run.

    python bench/precise_index.py SOURCE [--compile-commands PATH] [--jobs 2]
                                  [--from-build-dir DIR --write PATH] [--cache DIR]

Builds the index of SOURCE into a temporary cache (so every TU is parsed: no TU cache;
``--cache DIR``: an empty directory kept after, to look at the index or update it),
with precise mode over the compile database found (or named), and prints: TUs parsed /
failed (each failed one with its reason), the parse time with N workers, and, against the
fast graph of the same files (the edges the merge replaced), the (caller, callee) pairs
confirmed, added and removed and the ambiguous fast refs the compiler narrowed.

``--from-build-dir DIR --write PATH``: a torch extension whose setup.py builds several
extensions (pytorch_sparse: one per op) leaves in ``DIR/build.ninja`` only the last one's
commands. This writes a compile database with that command for every object the build
left in DIR, each with its own source and ``TORCH_EXTENSION_NAME`` (the only two things
BuildExtension varies between them), and measures with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def database_from_objects(source: Path, build_dir: Path, out: Path) -> int:
    """Write ``out`` from the last build.ninja's command, once per object built in
    ``build_dir``; returns the number of commands."""
    template = json.loads(
        subprocess.run(
            ["ninja", "-t", "compdb"], cwd=build_dir, capture_output=True, text=True, check=True
        ).stdout
    )[0]
    words = shlex.split(template["command"])
    entries = []
    for obj in sorted(build_dir.rglob("*.o")):
        relative = obj.relative_to(build_dir).with_suffix(".cpp")
        cpp = source / relative
        if not cpp.is_file():
            continue
        stem = relative.stem
        name = f"_{stem}" if stem.endswith("_cpu") else f"_{stem}_cpu"
        args = []
        for word in words:
            if word == template["file"]:
                word = str(cpp)
            elif word == template["output"]:
                word = str(obj)
            elif word.startswith("-DTORCH_EXTENSION_NAME="):
                word = f"-DTORCH_EXTENSION_NAME={name}"
            elif word.endswith(".o.d"):
                word = f"{obj}.d"
            args.append(word)
        entries.append(
            {"directory": str(build_dir), "file": str(cpp), "arguments": args, "output": str(obj)}
        )
    out.write_text(json.dumps(entries, indent=1))
    return len(entries)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("--compile-commands", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--from-build-dir", type=Path)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--cache", type=Path, help="an empty directory to keep the index in")
    args = parser.parse_args()
    source = args.source.resolve()
    compile_commands = args.compile_commands
    if args.from_build_dir is not None:
        if args.write is None:
            parser.error("--from-build-dir needs --write PATH")
        count = database_from_objects(source, args.from_build_dir.resolve(), args.write)
        print(f"wrote {count} commands to {args.write} from {args.from_build_dir}/build.ninja")
        compile_commands = args.write

    if args.cache is not None and args.cache.exists() and any(args.cache.iterdir()):
        parser.error(f"--cache {args.cache} is not empty: its TU cache would be read")
    with tempfile.TemporaryDirectory(prefix="torchtalk-precise-bench-") as scratch:
        os.environ["TORCHTALK_CACHE_DIR"] = str(args.cache or scratch)
        from indexer.build import build_index
        from indexer.workspace import Workspace

        workspace = Workspace.resolve(source)
        started = time.perf_counter()
        result = build_index(
            workspace, jobs=args.jobs, show_progress=False, compile_commands=compile_commands
        )
        took = time.perf_counter() - started
    precise = result.precise or {}
    print(f"source: {source} ({workspace.harness}), {result.files} files, build {took:.1f}s")
    if precise.get("mode") != "on":
        print(f"precise mode off: {precise.get('reason')}")
        return 1
    merge = precise["merge"]
    print(f"database: {precise['database']}; compiler headers: {precise['resource_dir_from']}")
    if precise.get("database_note"):
        print(f"note: {precise['database_note']}")
    print(
        f"TUs: {precise['tus']} ({precise['failed']} failed, "
        f"{precise['cuda_left_to_fast']} CUDA left to the fast graph); "
        f"errors in the tree's files {precise['errors_in_tree']}, "
        f"in other headers {precise['errors_outside_tree']}"
    )
    for tu in precise["failed_tus"]:
        print(f"  failed {tu['file']}: {tu['reason']}")
    print(
        f"precise step: {precise['seconds']:.1f}s wall with {args.jobs} workers "
        f"(TU parses {precise['parse_seconds']:.1f}s summed)"
    )
    print(
        f"functions compiled: {merge['covered_functions']} "
        f"(definitions without a fast-graph node: {merge['unmatched_definitions']})"
    )
    print(
        f"call pairs vs the fast graph: {merge['confirmed']} confirmed, {merge['added']} added, "
        f"{merge['removed']} removed; {merge['ambiguities_resolved']} ambiguous refs resolved; "
        f"{merge['kept_unresolved']} fast edges kept where the compiler could not resolve "
        f"the call, {merge['kept_skipped']} in lines the preprocessor skipped; precise edges "
        f"by kind: {merge['by_via'] or '-'}"
    )
    print("edges after the merge:", dict(result.counts["edges"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
