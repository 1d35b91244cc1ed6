"""Snapshot and incremental-update figures on the PyTorch tree, measured in one run.

    python bench/snapshot.py [--source PATH] [--jobs N] [--keep DIR] [--verify]

Works on a throwaway local clone of the corpus (the corpus itself is never modified) with
its own cache directory. Reports:

* the full build time of the clone (the baseline),
* snapshot save and export times and the export size,
* import + load time into a fresh cache (a CI machine; target < 2 s),
* ``index update`` time after a 10-file C++ change, as a ratio of the full build
  (target < 5%), and its phases,
* with ``--verify``, a second full build of the changed tree compared row by row with the
  updated index (slow: one more full build).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_SOURCE = Path.home() / ".cache" / "torchtalk-corpora" / "pytorch-2.6"
CHANGED_FILES = 10


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def pick_cpp_files(repo: Path, count: int) -> list[str]:
    """``count`` .cpp files spread over aten/src/ATen/native (stable across runs)."""
    native = sorted(
        p.relative_to(repo).as_posix()
        for p in (repo / "aten" / "src" / "ATen" / "native").glob("*.cpp")
        if p.stat().st_size > 2000
    )
    step = max(1, len(native) // count)
    return native[::step][:count]


def change_files(repo: Path, paths: list[str]) -> None:
    """A realistic edit per file: a new function that calls an existing one."""
    for number, rel in enumerate(paths):
        path = repo / rel
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        path.write_text(
            text + f"\nnamespace at::native {{\nvoid torchtalk_bench_{number}(const Tensor& t) {{\n"
            f"  at::native::empty_like(t);\n  TORCH_CHECK(t.defined());\n}}\n}}\n",
            encoding="utf-8",
            errors="surrogateescape",
        )


def resolve_nothing(refs, symbols):
    """Stand-in resolver for ``--skip-scheme``."""
    return iter(())


def timed(label: str, fn, results: dict[str, float]):
    started = time.perf_counter()
    value = fn()
    results[label] = time.perf_counter() - started
    print(f"  {label:28} {results[label]:8.2f} s", flush=True)
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(os.environ.get("TORCHTALK_PYTORCH_SOURCE") or DEFAULT_SOURCE),
    )
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temp dir)")
    parser.add_argument("--verify", action="store_true", help="also compare with a rebuild")
    parser.add_argument(
        "--skip-scheme",
        action="append",
        default=[],
        metavar="SCHEME",
        help="leave this ref scheme unresolved in every build and update of the run (to "
        "measure around a resolver that is too slow to wait for)",
    )
    args = parser.parse_args()
    if not (args.source / "aten/src/ATen/native/native_functions.yaml").is_file():
        print(f"bench: no PyTorch tree at {args.source}", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="tt-bench-snapshot-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHTALK_CACHE_DIR"] = str(work / "cache")
    os.environ["TORCHTALK_CONFIG_DIR"] = str(work / "config")

    from indexer.build import build_index
    from indexer.snapshot import (
        export_snapshot,
        find_nearest,
        import_snapshot,
        install_snapshot,
        save_snapshot,
    )
    from indexer.update import update_index
    from indexer.workspace import Workspace

    if args.skip_scheme:
        from indexer.link import linker

        for scheme in args.skip_scheme:
            linker.RESOLVERS[scheme] = "bench.snapshot:resolve_nothing"
        print(f"note: refs of scheme(s) {', '.join(args.skip_scheme)} left unresolved")
    results: dict[str, float] = {}
    try:
        clone = work / "pytorch"
        if not clone.exists():
            git(work, "clone", "-q", "--local", "--no-hardlinks", str(args.source), str(clone))
        workspace = Workspace.resolve(clone)
        print(f"PyTorch clone: {clone} (harness {workspace.harness})")
        built = timed(
            "full build",
            lambda: build_index(workspace, jobs=args.jobs, show_progress=False),
            results,
        )
        db_bytes = built.db_path.stat().st_size
        timed("snapshot save", lambda: save_snapshot(workspace, "nightly/bench"), results)
        archive = work / "nightly.tar.gz"
        timed("snapshot export", lambda: export_snapshot("nightly/bench", archive), results)
        archive_bytes = archive.stat().st_size

        # A CI machine: a fresh cache, the archive, the same commit.
        os.environ["TORCHTALK_CACHE_DIR"] = str(work / "ci-cache")
        ci = Workspace.resolve(clone)
        timed("snapshot import", lambda: import_snapshot(archive), results)
        nearest = timed("load --nearest (pick)", lambda: find_nearest(ci), results)
        timed("load (install)", lambda: install_snapshot(ci, nearest.info), results)
        import_load = (
            results["snapshot import"]
            + results["load --nearest (pick)"]
            + results["load (install)"]
        )

        paths = pick_cpp_files(clone, CHANGED_FILES)
        change_files(clone, paths)
        updated = timed(
            f"index update ({len(paths)} C++)",
            lambda: update_index(ci, jobs=args.jobs, show_progress=False),
            results,
        )
        ratio = results[f"index update ({len(paths)} C++)"] / results["full build"]
        print()
        print(f"index size                  {db_bytes / 1e6:8.1f} MB")
        print(f"export size (.tar.gz)       {archive_bytes / 1e6:8.1f} MB")
        print(f"import + load --nearest     {import_load:8.2f} s   (target < 2 s)")
        print(
            f"update / full build         {ratio * 100:8.2f} %   (target < 5%): "
            f"{updated.reextracted} files re-extracted ({len(updated.dependents)} includers), "
            f"{updated.relinked_refs} refs re-linked, whole schemes: "
            f"{', '.join(updated.full_relink_schemes) or 'none'}"
        )
        print(f"update phases: {updated.timings}")
        print(f"full build phases: { {k: round(v, 1) for k, v in built.timings.items()} }")
        for warning in updated.warnings:
            print(f"update warning: {warning}")
        if args.verify:
            sys.path.insert(0, str(ROOT))
            from tests.test_update_equals_rebuild import assert_same_graph

            copy = work / "rebuild"
            shutil.copytree(clone, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            rebuilt = timed(
                "verify: full rebuild",
                lambda: build_index(Workspace.resolve(copy), jobs=args.jobs, show_progress=False),
                results,
            )
            assert_same_graph(updated.db_path, rebuilt.db_path, "10-file C++ change")
            print("verify: the updated index equals a full rebuild")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
