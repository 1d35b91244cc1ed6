"""Test selection on the PyTorch tree: what `torchtalk select` costs, and how much it selects.

1. The time a one-function change adds: `torchtalk select` (a fresh process, as CI runs
   it) right after editing at::native::matmul, when the index must first be updated for
   the edited file, and again once it is up to date; with the engine's own breakdown.
   Target: under 1 s with a built index. Selections follow the chains to the hub
   (``torch``) that the refresh derives from the most used ops into the index
   (indexer/select/hub_chains.py) and keep none themselves.
2. For a sample of single-function changes in aten/src/ATen/native (a statement added to
   the body of a random C++/CUDA function), the selected fraction of test files and the
   run-everything rate, with the reasons; and `torchtalk select` per change once the
   index is up to date (the target's measure, over typical changes, not only matmul).

3. The PR job's path for the same change: the index restored from a snapshot (`torchtalk
   snapshot load`, as a PR job does after importing the nightly archive), the file
   edited, `torchtalk select` with the index update included. Target: 2.5 s CPU, the
   load included (issue 39).

Needs a built index of the tree (`torchtalk index build --source PATH`, under
TORCHTALK_CACHE_DIR if set); an index built otherwise (a copy of the corpus tests' one)
is first prepared as the build leaves it (the hub's walk, chains from the most used ops).
Edits the tree and restores every file it touched.

    python bench/selection.py [--source PATH] [--samples 40] [--seed 6]
        [--function at::native::matmul] [--folder aten/src/ATen/native]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from indexer.query.index import Index
from indexer.refresh import Refresh, prepare_for_selection
from indexer.select_changes import select_changes
from indexer.workspace import Workspace

DEFAULT_SOURCE = Path.home() / ".cache" / "torchtalk-corpora" / "pytorch-2.6"
NATIVE = "aten/src/ATen/native/"
MATMUL = "at::native::matmul"


def _insert_statement(path: Path, start: int, end: int) -> bytes | None:
    """Add ``(void)0;`` after the line opening the body of the function at [start, end];
    returns the original bytes, or None when no body opening is found."""
    original = path.read_bytes()
    lines = original.decode("utf-8", errors="surrogateescape").split("\n")
    for number in range(start, min(end, len(lines))):
        text = lines[number - 1].split("//", 1)[0].rstrip()
        if text.endswith("{") and number < end - 1:
            lines.insert(number, "  (void)0;  // torchtalk bench")
            path.write_bytes("\n".join(lines).encode("utf-8", errors="surrogateescape"))
            return original
    return None


def _cli_select(source: Path) -> tuple[float, dict]:
    """Wall seconds of ``torchtalk select`` in a fresh process, and its JSON report with
    the process's CPU seconds added as ``bench_cpu_s`` (git's children included)."""
    cpu = _children_cpu()
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest_torchtalk", "select", "--source", str(source), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - started
    report = json.loads(result.stdout)
    report["bench_cpu_s"] = _children_cpu() - cpu
    return wall, report


def one_function_change(source: Path, index: Index, qualname: str) -> None:
    candidates = index.find(qualname, ["cpp_function", "cuda_kernel"])
    if not candidates:
        raise SystemExit(f"{qualname} is not in the index")
    function = max(candidates, key=lambda node: node.end_line - node.line)
    path = source / function.path
    original = _insert_statement(path, function.line, function.end_line)
    if original is None:
        raise SystemExit(f"no body found for {qualname} at {function.evidence}")
    try:
        cold, report = _cli_select(source)
        warm, warm_report = _cli_select(source)
        again, again_report = _cli_select(source)
    finally:
        path.write_bytes(original)
    print(f"one-function change: {qualname} ({function.evidence}) gets a statement")
    print(
        f"  torchtalk select, index to update first: {cold:.2f} s, {report['bench_cpu_s']:.2f} s CPU"
    )
    print(
        f"  torchtalk select, index up to date:      {warm:.2f} s, "
        f"{warm_report['bench_cpu_s']:.2f} s CPU (target < 0.7 s CPU; no chain this change found kept)"
    )
    print(
        f"  the same again, its own chain kept:      {again:.2f} s, {again_report['bench_cpu_s']:.2f} s CPU"
    )
    for name, data in (("first run", report), ("up to date", warm_report), ("again", again_report)):
        timings = ", ".join(f"{k} {v:.3f}" for k, v in data["timings"].items())
        print(f"  engine ({name}): {timings}")
        print(f"    hub: {data['index'].get('hub_walk') or 'not reached'}")
    counts = warm_report["counts"]
    print(
        f"  selected {counts['test_files_selected']} of {counts['test_files_total']} test files "
        f"({counts['test_files_narrowed']} narrowed); run everything: "
        f"{warm_report['run_everything']}"
    )
    names = [s["path"] for s in warm_report["selected"]]
    print(f"  first selected files: {', '.join(names[:5])}")


def _torchtalk(*args: str) -> float:
    return _torchtalk_cpu(*args)[0]


def _torchtalk_cpu(*args: str) -> tuple[float, float]:
    """Wall and CPU seconds of a ``torchtalk`` command in a fresh process."""
    cpu = _children_cpu()
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest_torchtalk", *args], capture_output=True,
                   text=True, check=True)  # fmt: skip
    return time.perf_counter() - started, _children_cpu() - cpu


def _children_cpu() -> float:
    """CPU seconds of the finished children so far (a shared machine inflates wall time)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pr_job(source: Path, index: Index, qualname: str) -> None:
    """Restore the index from a snapshot, edit ``qualname``, select (update included)."""
    candidates = index.find(qualname, ["cpp_function", "cuda_kernel"])
    function = max(candidates, key=lambda node: node.end_line - node.line)
    _torchtalk("index", "update", "--source", str(source), "-q")  # the nightly's index
    saved = _torchtalk("snapshot", "save", "bench/pr-job", "--source", str(source))
    loaded, load_cpu = _torchtalk_cpu("snapshot", "load", "bench/pr-job", "--source", str(source))
    path = source / function.path
    original = _insert_statement(path, function.line, function.end_line)
    if original is None:
        raise SystemExit(f"no body found for {qualname} at {function.evidence}")
    try:
        selected, report = _cli_select(source)
        cpu = report["bench_cpu_s"]
    finally:
        path.write_bytes(original)
        _torchtalk("snapshot", "delete", "bench/pr-job")
        _torchtalk("index", "update", "--source", str(source), "-q")  # as it was
    timings = ", ".join(f"{k} {v:.3f}" for k, v in report["timings"].items())
    print(
        f"PR job: snapshot saved in {saved:.2f} s (the nightly's step), loaded in {loaded:.2f} s,"
        f" {load_cpu:.2f} s CPU"
    )
    print(
        f"  then {qualname} edited and torchtalk select, index update included: "
        f"{selected:.2f} s, {cpu:.2f} s CPU; engine: {timings}"
    )
    print(f"  the PR job's path (load, edit, select): {load_cpu + cpu:.2f} s CPU (target 2.5 s)")
    print(f"    update: {report['index'].get('update')}")
    print(f"    hub: {report['index'].get('hub_walk') or 'not reached'}")


def sample_changes(source: Path, index: Index, samples: int, seed: int, folder: str) -> None:
    rows = index.conn.execute(
        "SELECT n.id, n.qualname, f.path, n.line, n.end_line FROM nodes n"
        " JOIN files f ON f.id = n.file_id"
        " WHERE n.kind IN ('cpp_function', 'cuda_kernel') AND f.path LIKE ?"
        " AND n.end_line - n.line >= 3 ORDER BY n.id",
        (folder.rstrip("/") + "/%",),
    ).fetchall()
    rng = random.Random(seed)
    rng.shuffle(rows)
    workspace = Workspace.resolve(source)
    fractions, selective, times, cli_times = [], [], [], []
    everything = 0
    reasons: Counter[str] = Counter()
    done = 0
    for _, qualname, rel, line, end in rows:
        if done >= samples:
            break
        path = source / rel
        original = _insert_statement(path, line, end)
        if original is None:
            continue
        try:
            started = time.perf_counter()
            selection = select_changes(workspace)
            times.append(time.perf_counter() - started)
            cli_times.append(_cli_select(source)[0])  # the index is up to date now
        finally:
            path.write_bytes(original)
        done += 1
        total = selection.test_files_total or 1
        if selection.run_everything:
            everything += 1
            fractions.append(1.0)
            reason = selection.everything[0]
            reasons[reason.split(" (")[0].split(":")[0][:70]] += 1
            print(f"  {qualname}: everything ({reason[:100]}); {cli_times[-1]:.2f} s")
        else:
            fraction = len(selection.files) / total
            fractions.append(fraction)
            selective.append(fraction)
            print(f"  {qualname}: {len(selection.files)}/{total} test files; {cli_times[-1]:.2f} s")
    print(f"sampled single-function changes in {folder}: {done}")
    if not done:
        return
    print(f"  run-everything rate: {everything}/{done} = {everything / done:.0%}")
    for reason, count in reasons.most_common():
        print(f"    {count} x {reason}")
    print(
        f"  selected fraction of test files, all samples: mean {statistics.mean(fractions):.1%}, "
        f"median {statistics.median(fractions):.1%}"
    )
    if selective:
        print(
            f"  selected fraction when selective: mean {statistics.mean(selective):.1%}, "
            f"median {statistics.median(selective):.1%}, max {max(selective):.1%}"
        )
    print(
        f"  select_tests per change (index update of the edited file included): median "
        f"{statistics.median(times):.2f} s, max {max(times):.2f} s"
    )
    under = sum(1 for t in cli_times if t < 1.0)
    print(
        f"  torchtalk select per change, index up to date (a fresh process, as CI runs it):"
        f" median {statistics.median(cli_times):.2f} s, max {max(cli_times):.2f} s;"
        f" under 1 s: {under}/{done} (target < 1 s)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--samples", type=int, default=40, help="0: only matmul and the PR job")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--function", default=MATMUL, help="the one-function change")
    parser.add_argument("--folder", default=NATIVE, help="where sampled functions live")
    args = parser.parse_args()
    source = args.source.resolve()
    workspace = Workspace.resolve(source)
    if not workspace.db_path.is_file():
        print(f"no index at {workspace.db_path}; run torchtalk index build --source {source}")
        return 1
    status = subprocess.run(
        ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if status.strip():
        print(f"{source} has uncommitted changes; the bench needs a clean tree")
        return 1
    print(
        f"tree {source}, index {workspace.db_path} ({os.path.getsize(workspace.db_path) >> 20} MiB)"
    )
    started = time.perf_counter()
    done = Refresh("built", "", None)
    prepare_for_selection(workspace, done)  # as 'torchtalk index build' leaves it, if it is not
    if done.prepared is not None:
        print(
            f"prepared as index build does: {done.prepared} ({time.perf_counter() - started:.1f} s)"
        )
    index = Index(workspace.db_path)
    one_function_change(source, index, args.function)
    pr_job(source, index, args.function)
    sample_changes(source, index, args.samples, args.seed, args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
