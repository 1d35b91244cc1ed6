"""Selection with a recorded run on the PyTorch tree: how much it narrows, and whether it
keeps every test the record shows running the changed code.

For single-function changes in aten/src/ATen/native (a statement added to a function's
body: named ones - matmul, a unary CPU kernel, the stable sort, atan2's and cumsum's CPU
kernels, embedding's dense backward - and the rest sampled, seeded), one selection each,
with the record beside the index. Reported per change, among the files and tests the
record holds: what the static walk selects, what is selected with the record, and the
independent join check (bench/join_check.py: the ops whose kernel the change reaches,
every name that runs those kernels read from native_functions.yaml, and the record's
names compared there, none of it the join's code): every trusted test whose record holds
one must be kept ("missed", must be 0); the ratio of recorded tests (and of recorded test
files) that run to those that ran the op. Also the import rule (for every module whose
import ran such an op: all trusted tests of it when it is a test file, every trusted
test that entered one of its functions, and at least one trusted test importing it;
indexer/select/record_join.py says why that is enough), and the time of `torchtalk
select` in a fresh process (``--timings``), first with the index to update for the
edited file (a PR job's select), then with it up to date.

Needs the tree, its index, and a record of it (bench/record.py):

    python bench/selection_record.py --source PATH --record /tmp/record-bench/record.ttr \
        [--samples 40] [--seed 6] [--timings]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from join_check import needed_tests  # the independent check
from selection import _cli_select, _insert_statement  # the same edit bench/selection.py makes

from indexer.query.index import Index
from indexer.query.recorded import RecordedRuns, record_path_for
from indexer.record import storage
from indexer.record.environment import current_environment
from indexer.select.matching import ItemMatcher
from indexer.select.model import Selection
from indexer.select.record_join import skip_environment, trusted_tests
from indexer.select_changes import select_changes
from indexer.workspace import Workspace

NATIVE = "aten/src/ATen/native/"
YAML = "aten/src/ATen/native/native_functions.yaml"
# (qualname suffix, file) of the named changes
NAMED = (
    ("at::native::matmul", "aten/src/ATen/native/LinearAlgebra.cpp"),
    ("sigmoid_kernel", "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp"),
    ("at::native::sort_stable_kernel", "aten/src/ATen/native/cpu/SortingKernel.cpp"),
    ("atan2_kernel", "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"),
    ("cumsum_cpu_kernel", "aten/src/ATen/native/cpu/ReduceOpsKernel.cpp"),
    ("at::native::embedding_dense_backward_cpu", "aten/src/ATen/native/Embedding.cpp"),
    ("at::native::embedding_dense_backward_cuda", "aten/src/ATen/native/cuda/Embedding.cu"),
)


def import_misses(runs: RecordedRuns, names, trusted: set[int], kept: set[str]) -> list[str]:
    """What the import rule requires and ``kept`` lacks: one line per module."""
    tests = runs.record.tests
    test_files = {t.file for t in tests}
    misses = []
    for module in sorted(runs.import_work(names)):
        if module in test_files:
            need = {tests[i].nodeid for i in trusted if tests[i].file == module}
            if need - kept:
                misses.append(f"{module}: {len(need - kept)} of its own tests")
            continue
        users = {tests[i].nodeid for i in runs.tests_executing(runs.functions_of(module))
                 if i in trusted}  # fmt: skip
        if users - kept:
            misses.append(f"{module}: {len(users - kept)} tests using it")
        importers = {tests[i].nodeid for i in runs.importers([module]) & trusted}
        if importers and not importers & kept:
            misses.append(f"{module}: none of its {len(importers)} importers")
    return misses


def static_only(selection: Selection) -> Selection:
    """The same selection as the static walk alone made it."""
    copy = Selection(selection.source, selection.harness, selection.base, selection.index)
    copy.files = {}
    for path, selected in selection.files.items():
        if selected.reasons or selected.tests is not None:
            clone = type(selected)(path, selected.reasons, selected.tests, selected.devices,
                                   selected.device_classes)  # fmt: skip
            copy.files[path] = clone
    copy.everything = list(selection.everything)
    return copy


def kept_tests(selection: Selection, tests) -> set[str]:
    matcher = ItemMatcher(selection)
    kept = set()
    for test in tests:
        parts = test.nodeid.split("::")[1:]
        if matcher.verdict(test.file, parts).keep:
            kept.add(test.nodeid)
    return kept


def _files(nodeids: set[str]) -> set[str]:
    return {n.split("::", 1)[0] for n in nodeids}


def _kinds(ops: set[str]) -> str:
    """Which variants the reached names include: in-place, out, several overloads."""
    bases: dict[str, int] = {}
    for op in ops:
        base = op.split(".", 1)[0]
        bases[base] = bases.get(base, 0) + 1
    kinds = []
    if any(op.split(".", 1)[0].endswith("_") for op in ops):
        kinds.append("in-place")
    if any(op.split(".", 1)[-1].startswith("out") or ".out" in op for op in ops if "." in op):
        kinds.append("out")
    if any(n > 1 for n in bases.values()):
        kinds.append("overloads")
    return "+".join(kinds) or "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--timings", action="store_true", help="time torchtalk select too")
    parser.add_argument(
        "--stamp-environment",
        action="store_true",
        help="a record made before environments were kept: say it was made in this one "
        "(run the bench with the recording's python and variables; an assumption, printed)",
    )
    args = parser.parse_args()
    source = args.source.resolve()
    dirty = subprocess.run(
        ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if dirty.strip():
        print(f"{source} has uncommitted changes; the bench needs a clean tree")
        return 1
    workspace = Workspace.resolve(source)
    beside = record_path_for(workspace.db_path)
    if args.record.resolve() != beside.resolve():
        shutil.copyfile(args.record, beside)
    if args.stamp_environment:
        record = storage.read(beside)
        if "environment" not in record.meta:
            record.meta["environment"] = current_environment()
            storage.write(record, beside)
            print(f"assumed: the record was made in this environment: {current_environment()}")
    runs = RecordedRuns.open(beside)
    skips = skip_environment(runs)
    trusted, untrusted = trusted_tests(runs, frozenset(), skips)
    trusted_ids = {id(t) for t in trusted}
    trusted_indexes = {i for i, t in enumerate(runs.record.tests) if id(t) in trusted_ids}
    trusted_nodeids = {t.nodeid for t in trusted}
    recorded_files = {t.file for t in runs.record.tests}
    print(
        f"record: {len(runs.record.tests)} tests in {len(recorded_files)} files, "
        f"{len(trusted)} trusted (skipped/xfailed decided here: {skips or 'yes'}); "
        f"untrusted: {dict(untrusted)}"
    )
    index = Index(workspace.db_path)
    rows = index.conn.execute(
        "SELECT n.id, n.qualname, f.path, n.line, n.end_line FROM nodes n"
        " JOIN files f ON f.id = n.file_id WHERE n.kind IN ('cpp_function', 'cuda_kernel')"
        " AND f.path LIKE ? AND n.end_line - n.line >= 3 ORDER BY n.id",
        (NATIVE + "%",),
    ).fetchall()
    named = [
        next(r for r in rows if r[1].endswith(suffix) and r[2] == path)
        for suffix, path in NAMED
        if any(r[1].endswith(suffix) and r[2] == path for r in rows)
    ]
    rng = random.Random(args.seed)
    rng.shuffle(rows)
    chosen = named + [r for r in rows if r not in named]
    results = []
    for node_id, qualname, rel, line, end in chosen:
        if len(results) >= args.samples:
            break
        path = source / rel
        original = _insert_statement(path, line, end)
        if original is None:
            continue
        update_s = cli_s = None
        try:
            if args.timings:
                update_s, update_report = _cli_select(source)  # the PR job's: index updated
                cli_s, cli_report = _cli_select(source)  # once the index is up to date
            started = time.perf_counter()
            selection = select_changes(workspace)
            select_s = time.perf_counter() - started
        finally:
            path.write_bytes(original)
        if selection.run_everything:
            print(f"  {qualname}: run everything ({selection.everything[0][:90]})", flush=True)
            results.append({"qualname": qualname, "everything": True})
            continue
        static = kept_tests(static_only(selection), runs.record.tests)
        with_record = kept_tests(selection, runs.record.tests)
        # The changed function itself, not the selection's placement of the change.
        cuda_only = index.node(node_id).kind == "cuda_kernel"
        needed = needed_tests(
            runs.record, trusted, source / YAML, workspace.db_path, [node_id], cuda_only
        )
        missed = needed.tests - with_record
        names = [("op", op) for op in needed.ops]
        import_missed = import_misses(runs, names, trusted_indexes, with_record)
        need_files = _files(needed.tests)
        result = {
            "qualname": qualname,
            "ops": len(needed.ops),
            "kinds": _kinds(needed.ops),
            "static_tests": len(static),
            "record_tests": len(with_record),
            "static_files": len(_files(static)),
            "record_files": len(_files(with_record)),
            "record_trusted": len(with_record & trusted_nodeids),
            "needed": len(needed.tests),
            "needed_files": len(need_files),
            "missed": len(missed),
            "import_missed": import_missed,
            "select_s": round(select_s, 2),
            "record_s": round(selection.timings.get("record_s", 0.0), 2),
        }
        if needed.tests:
            result["test_ratio"] = len(with_record) / len(needed.tests)
            result["file_ratio"] = len(_files(with_record)) / len(need_files)
        if args.timings:
            result |= {"cli_s": round(cli_s, 2), "update_s": round(update_s, 2),
                       "cli_cpu_s": round(cli_report["bench_cpu_s"], 2),
                       "update_cpu_s": round(update_report["bench_cpu_s"], 2)}  # fmt: skip
        results.append(result)
        ratio = (
            f"{result['record_files']}/{len(need_files)} files, "
            f"{len(with_record)}/{len(needed.tests)} tests"
            if needed.tests else "no recorded test ran it"
        )  # fmt: skip
        print(
            f"  {qualname} ({len(needed.ops)} names: {result['kinds']}): recorded tests kept "
            f"static {len(static)} ({result['static_files']} files) -> with the record "
            f"{len(with_record)} ({result['record_files']} files; {result['record_trusted']} trusted); ran it (check) "
            f"{len(needed.tests)} in {len(need_files)} files; missed {len(missed)}"
            f"{' ' + str(sorted(missed)[:3]) if missed else ''}; run/ran: {ratio}; import rule "
            f"missed {len(import_missed)}; select {select_s:.2f} s (the record's part "
            f"{result['record_s']:.2f} s)",
            flush=True,
        )
    measured = [r for r in results if not r.get("everything")]
    ratios = [r for r in measured if "file_ratio" in r]
    print(
        f"changes: {len(results)} ({len(results) - len(measured)} run everything, "
        f"{len(ratios)} run by a recorded test; in-place {sum('in-place' in r['kinds'] for r in measured)}, "
        f"out {sum('out' in r['kinds'] for r in measured)}, overloaded "
        f"{sum('overloads' in r['kinds'] for r in measured)}); missed by the join check: "
        f"{sum(r['missed'] for r in measured)}; import rule: "
        f"{sum(len(r['import_missed']) for r in measured)}"
    )
    if ratios:
        print(
            "median run/ran: files "
            f"{statistics.median(r['file_ratio'] for r in ratios):.2f}x, tests "
            f"{statistics.median(r['test_ratio'] for r in ratios):.2f}x (max files "
            f"{max(r['file_ratio'] for r in ratios):.2f}x, tests "
            f"{max(r['test_ratio'] for r in ratios):.2f}x); median select "
            f"{statistics.median(r['select_s'] for r in measured):.2f} s, the record's part "
            f"{statistics.median(r['record_s'] for r in measured):.2f} s"
        )
    if args.timings and measured:
        print(
            f"torchtalk select, index up to date: median "
            f"{statistics.median(r['cli_s'] for r in measured):.2f} s, max "
            f"{max(r['cli_s'] for r in measured):.2f} s; with the update first: median "
            f"{statistics.median(r['update_s'] for r in measured):.2f} s"
        )
    return 1 if any(r.get("missed") for r in measured) else 0


if __name__ == "__main__":
    sys.exit(main())
