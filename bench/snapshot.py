"""Snapshot and incremental-update figures on the PyTorch tree, measured in one run.

    python bench/snapshot.py [--source PATH] [--jobs N] [--keep DIR] [--verify]

Works on a throwaway local clone of the corpus (the corpus itself is never modified) with
its own cache directory. Reports:

* the full build time of the clone (the baseline),
* snapshot save and export times and the export size,
* import + load --nearest time into a fresh cache (a CI machine; target < 2 s), in
  process and as the two ``torchtalk`` commands a PR job runs, best and median of
  ``--repeat`` runs (the machine may be shared),
* the archive size and export/import times at zlib levels 1, 6 (the default) and 9,
* ``index update`` time after a 10-file C++ change, as a ratio of the full build
  (target < 5%), and its phases,
* with ``--verify``, a second full build of the changed tree compared row by row with the
  updated index (slow: one more full build).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_SOURCE = Path.home() / ".cache" / "torchtalk-corpora" / "pytorch-2.6"
CHANGED_FILES = 10
LEVELS = (1, 6, 9)


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


def load_average() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def cpu_seconds() -> float:
    """User + system CPU of this process (all threads) and of its finished children: what
    the work costs whatever else the machine is doing."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def best_and_median(values: list[float]) -> str:
    return f"{min(values):.2f} s best, {statistics.median(values):.2f} s median"


def import_and_load(archive: Path, clone: Path, cache: Path) -> dict[str, float]:
    """A CI machine: a fresh cache, the archive, the same commit (in this process)."""
    from indexer.snapshot import find_nearest, import_snapshot, install_snapshot
    from indexer.workspace import Workspace

    home = os.environ["TORCHTALK_CACHE_DIR"]
    os.environ["TORCHTALK_CACHE_DIR"] = str(cache)
    times: dict[str, float] = {}
    cpu = cpu_seconds()
    try:
        started = time.perf_counter()
        import_snapshot(archive)
        times["import"] = time.perf_counter() - started
        workspace = Workspace.resolve(clone)
        nearest = find_nearest(workspace)
        times["pick"] = time.perf_counter() - started - times["import"]
        install_snapshot(workspace, nearest.info)
        times["install"] = time.perf_counter() - started - times["import"] - times["pick"]
        times["total"] = time.perf_counter() - started
        times["cpu"] = cpu_seconds() - cpu
    finally:
        os.environ["TORCHTALK_CACHE_DIR"] = home
        shutil.rmtree(cache, ignore_errors=True)
    return times


def import_and_load_cli(archive: Path, clone: Path, cache: Path) -> dict[str, float]:
    """The same as the two commands of a PR job, each its own process."""
    env = {**os.environ, "TORCHTALK_CACHE_DIR": str(cache)}
    beside = Path(sys.executable).with_name("torchtalk")
    cli = [str(beside) if beside.exists() else shutil.which("torchtalk") or "torchtalk"]
    times: dict[str, float] = {}
    cpu = cpu_seconds()
    for label, argv in (
        ("import", ["snapshot", "import", str(archive)]),
        ("load", ["snapshot", "load", "--nearest", "--source", str(clone)]),
    ):
        started = time.perf_counter()
        subprocess.run([*cli, *argv], env=env, check=True, capture_output=True, cwd=ROOT)
        times[label] = time.perf_counter() - started
    times["total"] = times["import"] + times["load"]
    times["cpu"] = cpu_seconds() - cpu
    shutil.rmtree(cache)
    return times


def verify(updated: Path, rebuilt: Path) -> int:
    """0 when the updated index equals a full rebuild of the same tree, 1 otherwise
    (extraction is deterministic: any difference is the update's)."""
    from tests.test_update_equals_rebuild import assert_same_graph

    try:
        assert_same_graph(updated, rebuilt, "10-file C++ change")
    except AssertionError as exc:
        print(exc)
        print("verify: FAILED, the updated index differs from a full rebuild")
        return 1
    print("verify: the updated index equals a full rebuild")
    return 0


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
        "--index",
        type=Path,
        help="start from a copy of this index of the same commit instead of a full build "
        "(quick; no full-build baseline, so no update ratio)",
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="import + load runs to take the best of"
    )
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
    from indexer.snapshot import export_snapshot, save_snapshot
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
        if args.index:
            workspace.db_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(args.index, workspace.db_path)
            built = None
        else:
            built = timed(
                "full build",
                lambda: build_index(workspace, jobs=args.jobs, show_progress=False),
                results,
            )
        db_bytes = workspace.db_path.stat().st_size
        timed("snapshot save", lambda: save_snapshot(workspace, "nightly/bench"), results)
        archive = work / "nightly.tar.gz"
        timed("snapshot export", lambda: export_snapshot("nightly/bench", archive), results)
        archive_bytes = archive.stat().st_size

        print(f"load average before import: {load_average()}")
        runs = [import_and_load(archive, clone, work / "ci-cache") for _ in range(args.repeat)]
        cli_runs = [
            import_and_load_cli(archive, clone, work / "ci-cache") for _ in range(args.repeat)
        ]
        print(f"load average after import:  {load_average()}")
        best = min(runs, key=lambda run: run["total"])
        print(
            f"  import + load --nearest      {best_and_median([r['total'] for r in runs])} "
            f"(best: import {best['import']:.2f}, pick {best['pick']:.2f}, "
            f"install {best['install']:.2f}; CPU {min(r['cpu'] for r in runs):.2f} s)"
        )
        best_cli = min(cli_runs, key=lambda run: run["total"])
        print(
            f"  same, two torchtalk commands {best_and_median([r['total'] for r in cli_runs])} "
            f"(best: import {best_cli['import']:.2f}, load {best_cli['load']:.2f}; "
            f"CPU {min(r['cpu'] for r in cli_runs):.2f} s)"
        )
        levels: dict[int, tuple[float, int, float]] = {}
        for level in LEVELS:
            path = work / f"level{level}.tar.gz"
            started = time.perf_counter()
            export_snapshot("nightly/bench", path, level=level)
            took = time.perf_counter() - started
            imports = [
                import_and_load(path, clone, work / "ci-cache")["import"]
                for _ in range(max(1, args.repeat // 2))
            ]
            levels[level] = (took, path.stat().st_size, min(imports))
            path.unlink()

        # The CI machine's index, updated after a change.
        os.environ["TORCHTALK_CACHE_DIR"] = str(work / "ci-cache")
        from indexer.snapshot import import_snapshot, install_snapshot, read_info

        import_snapshot(archive)
        ci = Workspace.resolve(clone)
        install_snapshot(ci, read_info("nightly/bench"))

        paths = pick_cpp_files(clone, CHANGED_FILES)
        change_files(clone, paths)
        updated = timed(
            f"index update ({len(paths)} C++)",
            lambda: update_index(ci, jobs=args.jobs, show_progress=False),
            results,
        )
        update_seconds = results[f"index update ({len(paths)} C++)"]
        print()
        print(f"index size                  {db_bytes / 1e6:8.1f} MB")
        print(f"export size (.tar.gz)       {archive_bytes / 1e6:8.1f} MB")
        for level, (took, size, imported) in levels.items():
            print(
                f"  zlib level {level}: export {took:5.1f} s, {size / 1e6:6.1f} MB "
                f"({size / db_bytes * 100:4.1f} %), import {imported:.2f} s best"
            )
        print(
            f"import + load --nearest     {best['total']:8.2f} s   best of {len(runs)} "
            f"(median {statistics.median(r['total'] for r in runs):.2f} s; target < 2 s), "
            f"CPU {min(r['cpu'] for r in runs):.2f} s"
        )
        print(
            f"  as two torchtalk commands {best_cli['total']:8.2f} s   best of {len(cli_runs)} "
            f"(median {statistics.median(r['total'] for r in cli_runs):.2f} s), "
            f"CPU {min(r['cpu'] for r in cli_runs):.2f} s"
        )
        ratio = (
            f"{update_seconds / results['full build'] * 100:8.2f} %   (target < 5%)"
            if built
            else f"{update_seconds:8.2f} s   (no full build in this run)"
        )
        print(
            f"update / full build         {ratio}: "
            f"{updated.reextracted} files re-extracted ({len(updated.dependents)} includers), "
            f"{updated.relinked_refs} refs re-linked, whole schemes: "
            f"{', '.join(updated.full_relink_schemes) or 'none'}"
        )
        print(f"update phases: {updated.timings}")
        if built:
            print(f"full build phases: { {k: round(v, 1) for k, v in built.timings.items()} }")
        for warning in updated.warnings:
            print(f"update warning: {warning}")
        if args.verify:
            sys.path.insert(0, str(ROOT))

            copy = work / "rebuild"
            shutil.copytree(clone, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            rebuilt = timed(
                "verify: full rebuild",
                lambda: build_index(Workspace.resolve(copy), jobs=args.jobs, show_progress=False),
                results,
            )
            return verify(updated.db_path, rebuilt.db_path)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
