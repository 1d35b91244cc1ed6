"""C++/CUDA index figures on the real PyTorch tree, measured in one run.

    python bench/cpp_index.py [--source PATH] [--harness NAME] [--jobs N] [--every K]
                              [--skip-build] [--profile FILE]

1. The ratio: over the same files, in this process, file by file, the time of a bare
   tree-sitter-cpp parse of each file's bytes and the time of the C++ extractor on the
   same bytes (decode check, blank CUDA and attribute macros, parse, query, build facts,
   expand the file's macros). Target: at most 2.0.
2. A C++-only index (the tree's C++/CUDA files and native_functions.yaml, every
   registered extractor that wants them, the process pool, the store, the link step)
   into a temporary directory: wall
   time, peak memory (ru_maxrss of this process and its children), files, functions,
   kernels, and ``cpp`` edges resolved / ambiguous / unresolved from its link_stats.

3. With ``--op-bindings FILE`` (default ``csrc/torch_bindings.cpp`` for the vllm harness):
   of the ops registered for CUDA in that file, how many reach a ``cuda_kernel`` from
   their host function through calls, launches and dispatches (8 steps at most).

``--every K`` takes every K-th file (a quick look); the figures in docs/performance.md
use every file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_SOURCE = Path.home() / ".cache" / "torchtalk-corpora" / "pytorch-2.6"


def cpp_entries(source: Path, harness: str, every: int):
    """The C++/CUDA files (every K-th), and the op registries (native_functions.yaml)
    whose ops the C++ resolver falls back to for ATen's generated API."""
    from indexer.extract.discover import discover
    from indexer.harness import load_harness

    manifest = load_harness(harness)
    found = discover(source, manifest)
    entries = [e for e in found if e.language in ("cpp", "cuda")]
    registries = set(manifest.list("bindings", "native_functions"))
    return manifest, entries[::every], [e for e in found if e.path in registries]


def measure_ratio(source: Path, manifest, entries, profile: str | None) -> dict[str, float]:
    import tree_sitter
    import tree_sitter_cpp

    from indexer.cpp.extractor import CppExtractor
    from indexer.extract.source import SourceFile
    from indexer.graph.facts import FileFacts

    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_cpp.language()))
    max_bytes = manifest.get("sources", "max_file_bytes", 4_000_000)
    readable = [e for e in entries if e.size <= max_bytes]
    # Warm the page cache so neither side pays for the first read.
    for entry in readable:
        (source / entry.path).read_bytes()

    from indexer.build import tree_context

    extractor = CppExtractor(manifest)
    # The scan of the headers' shared macros runs once before extraction: it counts on
    # our side, in full.
    started, started_cpu = time.perf_counter(), time.process_time()
    context = tree_context(source, manifest, entries)
    scan, scan_cpu = time.perf_counter() - started, time.process_time() - started_cpu
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    # File by file, the bare parse then our extraction of the same bytes (blanking,
    # parse, query, facts), so that the load of a shared machine weighs on both alike.
    # Both clocks: wall time, and this process's CPU time, which other processes on a
    # shared machine do not inflate.
    bare = bare_cpu = 0.0
    ours, ours_cpu = scan, scan_cpu
    wall, cpu = time.perf_counter, time.process_time
    for entry in readable:
        data = (source / entry.path).read_bytes()
        started, started_cpu = wall(), cpu()
        parser.parse(data)
        middle, middle_cpu = wall(), cpu()
        if profiler is not None:
            profiler.enable()
        facts = FileFacts(entry.path, entry.language, "", len(data))
        facts.add_node("file", entry.path.rsplit("/", 1)[-1], entry.path, 1, 1, None)
        extractor.extract(SourceFile(entry.path, data, entry.language, context), facts)
        if profiler is not None:
            profiler.disable()
        bare += middle - started
        ours += wall() - middle
        bare_cpu += middle_cpu - started_cpu
        ours_cpu += cpu() - middle_cpu
    if profiler is not None:
        profiler.dump_stats(profile)
    return {
        "bare_parse_s": bare,
        "extract_s": ours,
        "ratio": ours / bare,
        "bare_parse_cpu_s": bare_cpu,
        "extract_cpu_s": ours_cpu,
        "cpu_ratio": ours_cpu / bare_cpu,
    }


def build_cpp_index(
    source: Path, manifest, entries, jobs: int | None, keep: Path | None, op_bindings: str | None
) -> dict:
    from indexer.build import tree_context
    from indexer.extract.pipeline import extract_all
    from indexer.link import link
    from indexer.store import IndexWriter

    with tempfile.TemporaryDirectory(prefix="cpp-index-") as tmp:
        db_path = keep or Path(tmp) / "index.sqlite"
        started = time.perf_counter()
        with IndexWriter(db_path) as writer:
            context = tree_context(source, manifest, entries)
            for facts in extract_all(source, manifest, entries, jobs, context):
                writer.add(facts)
            extracted = time.perf_counter() - started
            writer.finish_load()
            stats = link(writer.conn)
            writer.conn.execute("COMMIT")
            writer.commit()
        wall = time.perf_counter() - started
        conn = sqlite3.connect(db_path)
        nodes = dict(conn.execute("SELECT kind, COUNT(*) FROM nodes GROUP BY kind"))
        edges = dict(conn.execute("SELECT kind, COUNT(*) FROM edges GROUP BY kind"))
        errors = conn.execute(
            "SELECT COUNT(*), SUM(parse_errors) FROM files WHERE parse_errors > 0"
        )
        files_with_errors, error_regions = errors.fetchone()
        problems = conn.execute("SELECT COUNT(*) FROM files WHERE error IS NOT NULL").fetchone()[0]
        from indexer.query.kernel_reach import cuda_ops_reaching_kernels

        ops, reaching = cuda_ops_reaching_kernels(conn, op_bindings) if op_bindings else ([], [])
        calls_unambiguous, calls_to_ops = conn.execute(
            "SELECT SUM(e.attrs IS NULL OR e.attrs NOT LIKE '%ambiguous%'),"
            " SUM(d.kind = 'op') FROM edges e JOIN nodes d ON d.id = e.dst_id"
            " WHERE e.kind = 'calls'"
        ).fetchone()
        conn.close()
    return {
        "wall_s": wall,
        "extract_phase_s": extracted,
        "link_phase_s": wall - extracted,
        "nodes": nodes,
        "edges": edges,
        "link_stats": stats.as_dict(),
        "files_with_parse_errors": files_with_errors,
        "parse_error_regions": error_regions or 0,
        "file_problems": problems,
        "calls_unambiguous": calls_unambiguous or 0,
        "calls_to_ops": calls_to_ops or 0,
        "cuda_ops": ops,
        "cuda_ops_reaching_kernels": reaching,
    }


def peak_memory_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(os.environ.get("TORCHTALK_PYTORCH_SOURCE") or DEFAULT_SOURCE),
    )
    parser.add_argument("--harness", default="pytorch")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--every", type=int, default=1, help="take every K-th file")
    parser.add_argument("--skip-build", action="store_true", help="only the ratio")
    parser.add_argument("--skip-ratio", action="store_true", help="only the index build")
    parser.add_argument("--profile", help="write a cProfile of our extraction here")
    parser.add_argument("--keep", type=Path, help="keep the C++ index database at this path")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--op-bindings", help="count the CUDA ops registered in this file that reach a kernel"
    )
    args = parser.parse_args(argv)
    if not (args.source / "aten").is_dir() and args.harness == "pytorch":
        print(f"error: no PyTorch tree at {args.source} (set --source)", file=sys.stderr)
        return 2
    manifest, entries, registries = cpp_entries(args.source, args.harness, args.every)
    if args.op_bindings is None and args.harness == "vllm":
        args.op_bindings = "csrc/torch_bindings.cpp"
    report: dict = {"files": len(entries), "bytes": sum(e.size for e in entries)}
    if not args.skip_ratio:
        report.update(measure_ratio(args.source, manifest, entries, args.profile))
    if not args.skip_build:
        report.update(
            build_cpp_index(
                args.source, manifest, entries + registries, args.jobs, args.keep, args.op_bindings
            )
        )
    report["peak_memory_mb"] = peak_memory_mb()
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    print(f"files                 {report['files']} ({report['bytes'] / 1e6:.1f} MB)")
    if not args.skip_ratio:
        print(
            f"bare parse            {report['bare_parse_s']:.1f} s wall,"
            f" {report['bare_parse_cpu_s']:.1f} s CPU (one process)"
        )
        print(
            f"our extraction        {report['extract_s']:.1f} s wall,"
            f" {report['extract_cpu_s']:.1f} s CPU (one process)"
        )
        print(
            f"ratio                 {report['ratio']:.2f} wall, {report['cpu_ratio']:.2f} CPU"
            " (target <= 2.0)"
        )
    if not args.skip_build:
        nodes, edges = report["nodes"], report["edges"]
        cpp = report["link_stats"].get("cpp", {})
        include = report["link_stats"].get("include", {})
        print(
            f"index wall time       {report['wall_s']:.1f} s (extract {report['extract_phase_s']:.1f} s, store+link {report['link_phase_s']:.1f} s)"
        )
        print(f"functions             {nodes.get('cpp_function', 0)}")
        print(f"kernels               {nodes.get('cuda_kernel', 0)}")
        print(
            f"classes / stubs       {nodes.get('cpp_class', 0)} / {nodes.get('dispatch_stub', 0)}"
        )
        print(f"edges by kind         {json.dumps(edges, sort_keys=True)}")
        print(
            f"calls edges           {edges.get('calls', 0)}: {report['calls_unambiguous']} from"
            f" unambiguous refs, {report['calls_to_ops']} into ATen's API (to aten ops)"
        )
        print(
            f"cpp refs              {cpp.get('refs', 0)}: resolved {cpp.get('resolved', 0)}, ambiguous {cpp.get('ambiguous', 0)}, unresolved {cpp.get('unresolved', 0)}"
        )
        print(
            f"include refs          {include.get('refs', 0)}: resolved {include.get('resolved', 0)}, ambiguous {include.get('ambiguous', 0)}, unresolved {include.get('unresolved', 0)}"
        )
        if args.op_bindings:
            ops, reaching = report["cuda_ops"], report["cuda_ops_reaching_kernels"]
            print(
                f"CUDA ops reaching a kernel  {len(reaching)} of {len(ops)} ({args.op_bindings});"
                f" not: {', '.join(sorted(set(ops) - set(reaching)))}"
            )
        print(
            f"parse errors          {report['parse_error_regions']} ERROR regions in {report['files_with_parse_errors']} files; {report['file_problems']} files with problems"
        )
    print(f"peak memory           {report['peak_memory_mb']:.0f} MB (self + children, max RSS)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
